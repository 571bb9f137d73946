// Internal to experts/ (kernel_simd.h, stream_read.cc): software prefetch of the weight rows ahead
// of the one the generic kernel loops read (every K-quant, the 32-element formats at one row,
// F16/BF16). The hardware prefetcher stops at every 4 KiB page and starts over at every pool item
// (a kernel call), and on the 16-core host a thread streaming an item's rows on it alone kept too
// few lines in flight: 10 Q4_K experts at 1 row took 453-539 µs a layer (median layer) without this
// and 323-439 µs with it, the same call alternating builds (2026-11-30, docs/perf/experts.md,
// session 13); one host core read Q8_0 at 1 row 55-65% faster with it and F16/BF16 13-70% (session
// 14). 2 KiB ahead measured about the same as 4 KiB, on all cores too (session 15). The VNNI and
// AVX2 rows kernels (kernel_vnni_rows.h, kernel_avx2_rows.h) request whole rows ahead instead
// (kernel_rows_span.h): requesting their first rows at a call's start made the 4-row layer 15-25%
// slower (session 13).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace tandem::experts {
namespace {

// Bytes of weights ahead of the row being read that a kernel keeps requested into L1.
inline constexpr int64_t kPrefetchBytesAhead = 4096;

// Requests [p, p + bytes) into L1, one 64-byte line at a time.
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

// Keeps kPrefetchBytesAhead of a kernel call's weight reads requested: the call reads `bytes` bytes
// at `first` + r·`stride` for r = 0..n_rows-1 in order. Start() requests the first rows (a call is
// one pool item, so nothing is in flight when it starts), Row(r) the row that many bytes past r.
class RowPrefetch {
 public:
  RowPrefetch(const uint8_t* first, int64_t stride, int64_t bytes, int n_rows)
      : first_(first),
        stride_(stride),
        bytes_(bytes),
        n_rows_(n_rows),
        ahead_(static_cast<int>((kPrefetchBytesAhead + bytes - 1) / bytes)) {}

  void Start() const {
    for (int r = 0; r < std::min(ahead_, n_rows_); ++r) PrefetchBytes(first_ + r * stride_, bytes_);
  }
  void Row(int r) const {
    if (r + ahead_ < n_rows_) PrefetchBytes(first_ + (r + ahead_) * stride_, bytes_);
  }

 private:
  const uint8_t* first_;
  int64_t stride_, bytes_;
  int n_rows_, ahead_;
};

}  // namespace
}  // namespace tandem::experts
