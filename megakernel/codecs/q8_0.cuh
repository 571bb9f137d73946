// Q8_0 on the device: one lane takes one block (32 weights) per slice and applies it to every
// active row with dp4a. Rows are in the device layout (codecs.h): the blocks'
// quants, then their scales. C++17, device only.
#pragma once

#include "megakernel/codecs.h"
#include "megakernel/codecs/act.cuh"
#include "megakernel/device/common.cuh"

namespace tandem::megakernel {

// Block b's 32 quants, and the scales of a row of nb blocks, in the device layout.
__device__ __forceinline__ const uint8_t* Q8Quants(const uint8_t* row, int b) {
  return row + kQ8QuantBytes * b;
}
__device__ __forceinline__ const unsigned short* Q8Scales(const uint8_t* row, int nb) {
  return reinterpret_cast<const unsigned short*>(row + kQ8QuantBytes * nb);
}

// Loads go out kUnroll slices at a time (RowDotWith): a 2,048-column row is two slices a lane, and
// one slice at a time made a unit two dependent round trips to memory.
struct CodecQ8_0 {
  static constexpr int kSliceElems = 32;
  static constexpr int kUnroll = 2;
  struct Raw {
    uint4 q[2];
    uint32_t d;  // fp16 bits
  };
  __device__ static Raw Load(const uint8_t* row, int slice, int n_slices) {
    const uint4* q = reinterpret_cast<const uint4*>(Q8Quants(row, slice));
    Raw raw;
    raw.q[0] = LoadStreaming(q);
    raw.q[1] = LoadStreaming(q + 1);
    raw.d = LoadStreaming(Q8Scales(row, n_slices) + slice);
    return raw;
  }
  template <int R>
  __device__ static void Apply(const Raw& raw, int slice, const ActSet& a, unsigned mask, int base,
                               float (&acc)[R]) {
    const float d = HalfBitsToFloat(raw.d);
    const uint32_t q[8] = {raw.q[0].x, raw.q[0].y, raw.q[0].z, raw.q[0].w,
                           raw.q[1].x, raw.q[1].y, raw.q[1].z, raw.q[1].w};
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!RowOn<R>(mask, r)) continue;
      const int p = ActRow(mask, base, r);
      const uintptr_t at = ActChunkAt(ActRowOf(a, p), 2 * slice);
      const int sum = Dot16(q, ActAt(at, 0)) + Dot16(q + 4, ActAt(at, 1));
      acc[r] += a.d[p * (a.cols / 32) + slice] * d * static_cast<float>(sum);
    }
  }
};

// Q8_0 on the tensor cores, for products of several step rows (sm_80+): a warp multiplies 16
// weight rows by the step's rows (up to 8) over a range of blocks, one mma.sync m16n8k32 on int8
// a block. Lane (g = lane / 4, t = lane % 4) holds bytes 8t .. 8t + 7 of a block's quants for
// weight rows g and g + 8, and the same bytes of step row g's activations: the mma's k slots
// 4t .. 4t + 3 take the first four, 16 + 4t .. the other four, in both operands, so the sum over
// k is the block's dot product. The lane gets rows g and g + 8 at step rows 2t and 2t + 1.
// Kept in int32 per block (32 products of |x| <= 127), then scaled as the dp4a path does.
inline constexpr int kQ8TileRows = 16;
inline constexpr int kQ8TileUnroll = 4;  // blocks whose loads go out together

struct Q8TileRows {
  const uint8_t* lo = nullptr;  // weight row g of the tile (device layout)
  const uint8_t* hi = nullptr;  // weight row g + 8
  int nb = 0;                   // blocks a row
  const int8_t* x = nullptr;    // step row g's activations (null: a row the step does not have)
  const float* d0 = nullptr;    // activation scales of step rows 2t and 2t + 1 (null: none)
  const float* d1 = nullptr;
};

// acc[0..3] += rows (g, g + 8) x step rows (2t, 2t + 1) over blocks b0 .. b1 - 1.
__device__ __forceinline__ void Q8TileDot(const Q8TileRows& rows, int b0, int b1, float (&acc)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const int t = static_cast<int>(threadIdx.x) & 3;
  for (int bb = b0; bb < b1; bb += kQ8TileUnroll) {
    uint32_t wl[kQ8TileUnroll][2], wh[kQ8TileUnroll][2];
    uint32_t sl[kQ8TileUnroll], sh[kQ8TileUnroll];
#pragma unroll
    for (int u = 0; u < kQ8TileUnroll; ++u) {
      const int b = min(bb + u, b1 - 1);  // past the range: the last block again, not applied
      const uint2 l = LoadStreaming(reinterpret_cast<const uint2*>(Q8Quants(rows.lo, b) + 8 * t));
      const uint2 h = LoadStreaming(reinterpret_cast<const uint2*>(Q8Quants(rows.hi, b) + 8 * t));
      wl[u][0] = l.x;
      wl[u][1] = l.y;
      wh[u][0] = h.x;
      wh[u][1] = h.y;
      sl[u] = LoadStreaming(Q8Scales(rows.lo, rows.nb) + b);
      sh[u] = LoadStreaming(Q8Scales(rows.hi, rows.nb) + b);
    }
#pragma unroll
    for (int u = 0; u < kQ8TileUnroll; ++u) {
      const int b = bb + u;
      if (b >= b1) break;
      uint2 xv = make_uint2(0u, 0u);
      if (rows.x != nullptr) {
        const int8_t* chunk = ActAt(ActChunkAt(rows.x, 2 * b), t >> 1);
        xv = *reinterpret_cast<const uint2*>(chunk + 8 * (t & 1));
      }
      int c[4];
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%10,%10,%10,%10};"
          : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
          : "r"(wl[u][0]), "r"(wh[u][0]), "r"(wl[u][1]), "r"(wh[u][1]), "r"(xv.x), "r"(xv.y),
            "r"(0));
      const float da0 = rows.d0 != nullptr ? rows.d0[b] : 0.0f;
      const float da1 = rows.d1 != nullptr ? rows.d1[b] : 0.0f;
      const float dl = HalfBitsToFloat(sl[u]), dh = HalfBitsToFloat(sh[u]);
      acc[0] += da0 * dl * static_cast<float>(c[0]);
      acc[1] += da1 * dl * static_cast<float>(c[1]);
      acc[2] += da0 * dh * static_cast<float>(c[2]);
      acc[3] += da1 * dh * static_cast<float>(c[3]);
    }
  }
#else
  (void)rows;
  (void)b0;
  (void)b1;
  (void)acc;
#endif
}

}  // namespace tandem::megakernel
