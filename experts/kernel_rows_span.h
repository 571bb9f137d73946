// Internal to experts/kernel_vnni_rows.h and experts/kernel_avx2_rows.h: what the two 1..8-row
// kernels share about walking the weights, span by span of activation blocks, row by row. Internal
// linkage, like the other kernel headers, because each kernel file has its own -m flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace tandem::experts {
namespace {

// Blocks of one activation row prepared per span: 8 rows × 16 blocks × 256 bytes = 32 KiB of stack.
inline constexpr int64_t kRowsSpanBlocks = 16;

// The fewest weight rows ahead that a row's blocks are prefetched: the cold (streamed) 2..8-row
// calls ran at ~10 GB/s against 12-17 hot on the hardware prefetcher alone. experts_bench cold,
// best of 5, 2026-11-29, one core, gate/up shape (1152-byte Q4_K rows): distance 1 gives 2 rows
// 13.4 GB/s (2: 11.7) but 4 rows 9.6 (2: 11.1), 4: worse.
template <int N>
inline constexpr int kRowsPrefetchAhead = N <= 2 ? 1 : 2;

// Past that, enough rows to keep kRowsPrefetchBytes requested, up to kRowsPrefetchMaxAhead. With
// all 16 cores of the H200 host streaming, the down shape's 432-byte Q4_K rows read 80-82 GB/s
// at 4 activation rows with 2 rows (864 bytes) ahead, 88-93 with 4, 97-98 with 8 (3.5 KB); the
// gate/up shape gained 1-8% from 3 rows instead of 2 (docs/perf/experts.md, session 15).
inline constexpr int64_t kRowsPrefetchBytes = 3072;
inline constexpr int kRowsPrefetchMaxAhead = 8;

// Rows ahead to prefetch when each row's span is `span_bytes`.
template <int N>
inline int RowsPrefetchAhead(int64_t span_bytes) {
  const int64_t rows = (kRowsPrefetchBytes + span_bytes - 1) / span_bytes;
  return static_cast<int>(std::clamp<int64_t>(rows, kRowsPrefetchAhead<N>, kRowsPrefetchMaxAhead));
}

// Prefetches blocks [b0, b0 + span) of weight row r + ahead, if there is one.
template <class Block>
inline void PrefetchRowAhead(const uint8_t* w, int64_t w_stride, int r, int ahead, int n_wrows,
                             int64_t b0, int64_t span) {
  if (r + ahead >= n_wrows) return;
  const char* next = reinterpret_cast<const char*>(
      reinterpret_cast<const Block*>(w + (r + ahead) * w_stride) + b0);
  for (int64_t off = 0; off < span * static_cast<int64_t>(sizeof(Block)); off += 64) {
    _mm_prefetch(next + off, _MM_HINT_T0);
  }
}

}  // namespace
}  // namespace tandem::experts
