// Internal to experts/kernel_vnni_rows.h and experts/kernel_avx2_rows.h: what the two 2..8-row
// kernels share about walking the weights, span by span of activation blocks, row by row. Internal
// linkage, like the other kernel headers, because each kernel file has its own -m flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tandem::experts {
namespace {

// Blocks of one activation row prepared per span: 8 rows × 16 blocks × 256 bytes = 32 KiB of stack.
inline constexpr int64_t kRowsSpanBlocks = 16;

// Weight rows ahead that a row's blocks are prefetched: the cold (streamed) 2..8-row calls ran at
// ~10 GB/s against 12-17 hot on the hardware prefetcher alone. experts_bench cold, best of 5,
// 2026-11-29: distance 1 gives Q4_K 2 rows 13.4 GB/s (2: 11.7) but 4 rows 9.6 (2: 11.1), 4: worse.
template <int N>
inline constexpr int kRowsPrefetchAhead = N <= 2 ? 1 : 2;

// Prefetches blocks [b0, b0 + span) of weight row r + kRowsPrefetchAhead<N>, if there is one.
template <class Block, int N>
inline void PrefetchRowAhead(const uint8_t* w, int64_t w_stride, int r, int n_wrows, int64_t b0,
                             int64_t span) {
  const int ahead = r + kRowsPrefetchAhead<N>;
  if (ahead >= n_wrows) return;
  const char* next =
      reinterpret_cast<const char*>(reinterpret_cast<const Block*>(w + ahead * w_stride) + b0);
  for (int64_t off = 0; off < span * static_cast<int64_t>(sizeof(Block)); off += 64) {
    _mm_prefetch(next + off, _MM_HINT_T0);
  }
}

}  // namespace
}  // namespace tandem::experts
