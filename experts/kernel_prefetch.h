// Internal to experts/kernel_simd.h: software prefetch of the weight rows ahead of the one the
// single-row kernels read. The hardware prefetcher stops at every 4 KiB page and starts over at
// every pool item (a kernel call), and on the 16-core host a thread streaming an item's rows on it
// alone kept too few lines in flight: 10 Q4_K experts at 1 row took 453-539 µs a layer (median
// layer) without this and 323-439 µs with it, the same call alternating builds (2026-11-30,
// docs/perf/experts.md, session 13). 2 KiB ahead measured about the same as 4 KiB. The 2..8-row
// kernels keep their own row-based distance (kernel_rows_span.h): 2 or 4 KiB there made the 4-row
// layer 15-25% slower.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tandem::experts {
namespace {

// Bytes of weights ahead of the row being read that a kernel keeps requested into L1.
inline constexpr int64_t kPrefetchBytesAhead = 4096;

// Rows of `row_stride` bytes that cover kPrefetchBytesAhead (at least one).
inline int PrefetchRowsAhead(int64_t row_stride) {
  return static_cast<int>((kPrefetchBytesAhead + row_stride - 1) / row_stride);
}

// Requests [p, p + bytes) into L1, one 64-byte line at a time.
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

}  // namespace
}  // namespace tandem::experts
