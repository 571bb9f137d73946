#include "experts/stream_read.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "experts/kernel_prefetch.h"
#include "experts/topology.h"

namespace tandem::experts {
namespace {

uint64_t SumPrefetching16(const uint64_t* p, size_t n) {
  const __m128i* v = reinterpret_cast<const __m128i*>(p);
  __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
  for (size_t i = 0; i < n / 2; i += 4) {
    _mm_prefetch(reinterpret_cast<const char*>(v + i) + kPrefetchBytesAhead, _MM_HINT_T0);
    a = _mm_add_epi64(a, _mm_load_si128(v + i));
    b = _mm_add_epi64(b, _mm_load_si128(v + i + 1));
    c = _mm_add_epi64(c, _mm_load_si128(v + i + 2));
    d = _mm_add_epi64(d, _mm_load_si128(v + i + 3));
  }
  const __m128i s = _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(s)) +
         static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(s, s)));
}

__attribute__((target("avx512f"))) uint64_t SumPrefetching64(const uint64_t* p, size_t n) {
  const __m512i* v = reinterpret_cast<const __m512i*>(p);
  __m512i a = _mm512_setzero_si512(), b = a;
  for (size_t i = 0; i < n / 8; i += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(v + i) + kPrefetchBytesAhead, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v + i + 1) + kPrefetchBytesAhead, _MM_HINT_T0);
    a = _mm512_add_epi64(a, _mm512_load_si512(v + i));
    b = _mm512_add_epi64(b, _mm512_load_si512(v + i + 1));
  }
  // Through memory: GCC 12's _mm512_reduce_add_epi64 trips -Wuninitialized.
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(a, b));
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

}  // namespace

LineAlignedWords::LineAlignedWords(size_t n) : n_(n) {
  // Whole 2 MiB pages, aligned to them, so that every page of the buffer can be a huge one.
  constexpr size_t kHuge = size_t{2} << 20;
  bytes_ = (n * sizeof(uint64_t) + kHuge - 1) / kHuge * kHuge;
  words_ = static_cast<uint64_t*>(std::aligned_alloc(kHuge, bytes_));
  if (words_ == nullptr) throw std::bad_alloc();
  madvise(words_, bytes_, MADV_HUGEPAGE);  // advice only: ordinary pages without it
}

LineAlignedWords::LineAlignedWords(LineAlignedWords&& o) noexcept
    : words_(std::exchange(o.words_, nullptr)),
      n_(std::exchange(o.n_, 0)),
      bytes_(std::exchange(o.bytes_, 0)) {}

LineAlignedWords::~LineAlignedWords() { std::free(words_); }

uint64_t SumWordsPlain(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i < n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}

uint64_t SumWordsPrefetching(const uint64_t* p, size_t n) {
  static const bool wide = __builtin_cpu_supports("avx512f");
  return wide ? SumPrefetching64(p, n) : SumPrefetching16(p, n);
}

StreamReading StreamReadClaimed(const LineAlignedWords& buf, int threads, bool prefetching) {
  const size_t chunks = buf.size() / kStreamChunkWords;
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> readers;
  // The readers spread over every core, not onto a pinned pool caller's (PoolOptions::pin).
  const WideBinding wide;
  for (int t = 0; t < threads; ++t) {
    readers.emplace_back([&] {
      uint64_t sum = 0;
      for (size_t c; (c = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
        const uint64_t* p = buf.data() + c * kStreamChunkWords;
        sum += prefetching ? SumWordsPrefetching(p, kStreamChunkWords)
                           : SumWordsPlain(p, kStreamChunkWords);
      }
      total.fetch_add(sum, std::memory_order_relaxed);
    });
  }
  for (std::thread& r : readers) r.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {static_cast<double>(chunks * kStreamChunkWords * 8) / seconds / 1e9, total.load()};
}

}  // namespace tandem::experts
