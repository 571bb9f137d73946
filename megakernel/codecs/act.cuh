// The activation side of every device matrix-vector product: rows quantised to int8 in blocks of
// 32 (scale d, and the block sum d·Σq for formats with minimums), kept in shared memory,
// plus an fp32 copy for float weights. Step row r reads activation row r (base < 0) or
// base + popcount(mask & ((1 << r) - 1)) (per-pair activations: an expert's rows packed after
// those of the experts before it). C++17, device only.
#pragma once

#include <cstdint>

#include "megakernel/smem.h"

namespace tandem::megakernel {

struct ActSet {
  const int8_t* q = nullptr;  // [n][ActRowBytes(cols)], chunks in swizzled slots
  const float* d = nullptr;   // [n][cols / 32]
  const float* s = nullptr;   // [n][cols / 32] d · Σ q of each block
  const float* x = nullptr;   // [n][cols], shared or global memory
  int cols = 0;
};

// Activation row p of the set.
__device__ __forceinline__ const int8_t* ActRowOf(const ActSet& a, int p) {
  return a.q + static_cast<int64_t>(p) * ActRowBytes(a.cols);
}

// Where chunk c of `row` sits, as an address. Chunk c + i, for c a multiple of a power of two
// n > i (the chunks a codec's slice or run spans), sits at that address ^ 16i (ActAt): the line's
// flip is worked out once per span, and each further chunk costs one xor.
__device__ __forceinline__ uintptr_t ActChunkAt(const int8_t* row, int c) {
  const int line = c >> 3;
  return (reinterpret_cast<uintptr_t>(row) + kActLineBytes * static_cast<unsigned>(line)) |
         (16u * (ActLineFlip(line) ^ static_cast<unsigned>(c & 7)));
}
__device__ __forceinline__ const int8_t* ActAt(uintptr_t at, int i) {
  return reinterpret_cast<const int8_t*>(at ^ (16u * static_cast<unsigned>(i)));
}

// The 16 quantised activations of chunk c (elements 16c ..) of activation row p.
__device__ __forceinline__ const int8_t* ActChunk(const ActSet& a, int p, int c) {
  return ActAt(ActChunkAt(ActRowOf(a, p), c), 0);
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
