// The activation side of every device matrix-vector product: rows quantised to int8 in blocks of
// 32 (scale d, and the block sum d·Σq for formats with minimums), kept in shared memory,
// plus an fp32 copy for float weights. Step row r reads activation row r (base < 0) or
// base + popcount(mask & ((1 << r) - 1)) (per-pair activations: an expert's rows packed after
// those of the experts before it). C++17, device only.
#pragma once

#include <cstdint>

namespace tandem::megakernel {

struct ActSet {
  const int8_t* q = nullptr;  // [n][cols], 16-byte chunks where ActChunkSlot puts them
  const float* d = nullptr;   // [n][cols / 32]
  const float* s = nullptr;   // [n][cols / 32] d · Σ q of each block
  const float* x = nullptr;   // [n][cols], shared or global memory
  int cols = 0;
};

// The slot of 16-byte chunk c of a quantised activation row: c with its low three bits (its place
// among the eight chunks of a 128-byte line) XORed with bits 3..5 of c, and bit 0 also with bit 6.
// The lanes of a row group take consecutive slices, so at each step the 8 lanes of a quarter-warp
// (one 128-bit shared load phase) read chunks S·s + k of consecutive s, S = 2 (Q8_0, IQ4_XS), 4
// (Q4_K, Q5_K), 8 (Q6_K) or 16 (Q3_K) chunks a slice; unswizzled those are 32·S bytes apart, in the
// same four banks up to 8 at a time, so each load took up to 8 wavefronts. With the XOR the eight
// chunks land in eight different bank quads for every S. Rows whose length is not a multiple of
// 128 bytes keep the plain layout, so that no chunk leaves its row.
__device__ __forceinline__ int ActChunkSlot(int cols, int c) {
  const int flip = ((c >> 3) & 7) ^ ((c >> 6) & 1);
  return (cols & 127) == 0 ? c ^ flip : c;
}

// The 16 quantised activations of chunk c (elements 16c ..) of activation row p.
__device__ __forceinline__ const int8_t* ActChunk(const ActSet& a, int p, int c) {
  return a.q + static_cast<int64_t>(p) * a.cols + 16 * ActChunkSlot(a.cols, c);
}

__device__ __forceinline__ int ActRow(unsigned mask, int base, int r) {
  return base < 0 ? r : base + __popc(mask & ((1u << r) - 1u));
}

// Whether step row r of `mask` takes part in an R-row product. A one-row product always has its
// row: a one-row step has B = 1, and an expert's job exists only for the rows that chose it. So
// R = 1 needs no test, and without it the codecs' runs are no longer each wrapped in a branch that
// the compiler could not schedule across (docs/perf/megakernel.md, session 27).
template <int R>
__device__ __forceinline__ bool RowOn(unsigned mask, int r) {
  return R == 1 || (mask >> r & 1u) != 0;
}

}  // namespace tandem::megakernel
