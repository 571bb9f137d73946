// Streaming reads of a buffer: the ceilings that `tandem bench experts` and the kernel lab
// (bench/experts_bench.cc) compare the expert kernels with. A ceiling has to be read the way the
// fastest reader reads, so besides plain loads there is the kernels' own way: the widest loads the
// CPU has and a software prefetch as far ahead as the kernels keep (kernel_prefetch.h). On the
// 16-core H200 host the plain loop read 78-89 GB/s while the kernels streamed weights at up to
// 1.13x that (session 13), and 64-byte loads read 4-6% more than 16-byte ones (session 15). And it
// has to share the work the way the pool does, by claims: on that host some threads read at half
// the rate of others, so equal slices measured the slowest thread (session 16).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::experts {

// Sum of p[0..n) with plain 64-bit loads into four sums (n a multiple of 4).
uint64_t SumWordsPlain(const uint64_t* p, size_t n);

// Sum of p[0..n) with 64-byte loads where the CPU has AVX-512 (else 16-byte ones) and a software
// prefetch kPrefetchBytesAhead ahead. p is 64-byte aligned and n a multiple of 16 (two lines).
uint64_t SumWordsPrefetching(const uint64_t* p, size_t n);

// n words starting on a 64-byte line, uninitialised: a buffer for the readers above. Huge pages
// are asked for (madvise), as PackedExperts asks for them for the repacked experts the pool reads:
// a ceiling must not be read through smaller pages than the kernels it is compared with.
class LineAlignedWords {
 public:
  explicit LineAlignedWords(size_t n);
  ~LineAlignedWords();
  LineAlignedWords(LineAlignedWords&& o) noexcept;
  LineAlignedWords& operator=(LineAlignedWords&&) = delete;
  uint64_t* data() const { return words_; }
  size_t size() const { return n_; }

 private:
  uint64_t* words_;
  size_t n_, bytes_;
};

// What StreamReadClaimed read: the rate over the whole call (thread start and join included) and
// the sum of every word, so that a claim read twice or skipped shows.
struct StreamReading {
  double gbps;
  uint64_t sum;
};

// Reads all of buf with `threads` threads started for the call, each claiming kStreamChunkWords at
// a time until none are left, with SumWordsPrefetching or SumWordsPlain: the way the pool's workers
// share a layer, so that a thread the host slows down reads less instead of holding the read up.
// The threads float over every core (WideBinding). buf.size() is a multiple of kStreamChunkWords.
inline constexpr size_t kStreamChunkWords = (size_t{1} << 20) / 8;  // 1 MiB
StreamReading StreamReadClaimed(const LineAlignedWords& buf, int threads, bool prefetching);

}  // namespace tandem::experts
