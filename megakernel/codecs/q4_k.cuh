// Q4_K and Q5_K on the device: one lane takes a 64-weight slice (sub-blocks 2p and 2p+1 of a
// 256-weight block, which share their 32 quant bytes: low and high nibbles), builds both
// sub-blocks as int8 words once, and applies them to every active row with dp4a; the minimum
// term uses the activation block sums. C++17, device only.
#pragma once

#include "megakernel/codecs/act.cuh"
#include "megakernel/device/common.cuh"

namespace tandem::megakernel {

// Scale and min (0..63) of sub-block j from the 12 packed bytes (quant::ScaleMinK4), without
// branches: j is a lane's runtime slice, and the two-way split cost a divergent branch per slice.
__device__ __forceinline__ void ScaleMinK4Words(uint32_t w0, uint32_t w1, uint32_t w2, int j,
                                                int* scale, int* min) {
  const unsigned shift = 8u * static_cast<unsigned>(j & 3);
  const int b0 = static_cast<int>((w0 >> shift) & 0xffu);  // byte j, or j - 4
  const int b1 = static_cast<int>((w1 >> shift) & 0xffu);  // byte j + 4, or j
  const int b2 = static_cast<int>((w2 >> shift) & 0xffu);  // byte j + 4 (j >= 4)
  // All ones for j >= 4: a bitwise select. The conditional form compiled to a branch (PTX), which
  // diverges since the lanes of a warp take different slices.
  const int high = -static_cast<int>(j >= 4);
  *scale = (((b2 & 0xF) | (b0 >> 6) << 4) & high) | (b0 & 63 & ~high);
  *min = (((b2 >> 4) | (b1 >> 6) << 4) & high) | (b1 & 63 & ~high);
}

// Applies the two sub-blocks (lo = weights 0..31, hi = 32..63 of the slice) to the rows.
template <int R>
__device__ __forceinline__ void DotK4Pair(const uint32_t* v_lo, const uint32_t* v_hi, float dl_lo,
                                          float ml_lo, float dl_hi, float ml_hi, int act_block,
                                          const ActSet& a, unsigned mask, int base,
                                          float (&acc)[R]) {
  const int nb = a.cols / 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!RowOn<R>(mask, r)) continue;
    const int p = ActRow(mask, base, r);
    const uintptr_t at = ActChunkAt(ActRowOf(a, p), 2 * act_block);  // 4 chunks, 4-aligned
    const int s_lo = Dot16(v_lo, ActAt(at, 0)) + Dot16(v_lo + 4, ActAt(at, 1));
    const int s_hi = Dot16(v_hi, ActAt(at, 2)) + Dot16(v_hi + 4, ActAt(at, 3));
    const float* d = a.d + p * nb + act_block;
    const float* s = a.s + p * nb + act_block;
    acc[r] += d[0] * dl_lo * static_cast<float>(s_lo) - ml_lo * s[0] +
              d[1] * dl_hi * static_cast<float>(s_hi) - ml_hi * s[1];
  }
}

// Applies slice `slice`'s two sub-blocks, built as int8 words, with the scales and minimums of its
// block header (d, dmin, then the 12 packed scale bytes).
template <int R>
__device__ __forceinline__ void ApplyK4Slice(const uint4& hdr, int slice, const uint32_t* v_lo,
                                             const uint32_t* v_hi, const ActSet& a, unsigned mask,
                                             int base, float (&acc)[R]) {
  const int b = slice >> 2, pair = slice & 3;
  const float d = HalfBitsToFloat(hdr.x), dmin = HalfBitsToFloat(hdr.x >> 16);
  int sc_lo, m_lo, sc_hi, m_hi;
  ScaleMinK4Words(hdr.y, hdr.z, hdr.w, 2 * pair, &sc_lo, &m_lo);
  ScaleMinK4Words(hdr.y, hdr.z, hdr.w, 2 * pair + 1, &sc_hi, &m_hi);
  DotK4Pair<R>(v_lo, v_hi, d * sc_lo, dmin * m_lo, d * sc_hi, dmin * m_hi, 8 * b + 2 * pair, a,
               mask, base, acc);
}

// Loads go out kUnroll slices at a time (RowDotWith), so that a lane with several slices of a row
// has them all in flight at once.
struct CodecQ4K {
  static constexpr int kSliceElems = 64;
  static constexpr int kUnroll = 2;
  struct Raw {
    uint4 hdr, q0, q1;
  };
  __device__ static Raw Load(const uint8_t* row, int slice, int /*n_slices*/) {
    const int b = slice >> 2, pair = slice & 3;
    const uint8_t* blk = row + 144 * b;
    Raw raw;
    raw.hdr = LoadStreaming(reinterpret_cast<const uint4*>(blk));
    raw.q0 = LoadStreaming(reinterpret_cast<const uint4*>(blk + 16 + 32 * pair));
    raw.q1 = LoadStreaming(reinterpret_cast<const uint4*>(blk + 32 + 32 * pair));
    return raw;
  }
  template <int R>
  __device__ static void Apply(const Raw& raw, int slice, const ActSet& a, unsigned mask, int base,
                               float (&acc)[R]) {
    const uint32_t qw[8] = {raw.q0.x, raw.q0.y, raw.q0.z, raw.q0.w,
                            raw.q1.x, raw.q1.y, raw.q1.z, raw.q1.w};
    uint32_t v_lo[8], v_hi[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v_lo[j] = qw[j] & 0x0F0F0F0Fu;
      v_hi[j] = (qw[j] >> 4) & 0x0F0F0F0Fu;
    }
    ApplyK4Slice<R>(raw.hdr, slice, v_lo, v_hi, a, mask, base, acc);
  }
};

struct CodecQ5K {
  static constexpr int kSliceElems = 64;
  static constexpr int kUnroll = 2;
  struct Raw {
    uint4 hdr, h0, h1, q0, q1;
  };
  __device__ static Raw Load(const uint8_t* row, int slice, int /*n_slices*/) {
    const int b = slice >> 2, pair = slice & 3;
    const uint8_t* blk = row + 176 * b;
    Raw raw;
    raw.hdr = LoadStreaming(reinterpret_cast<const uint4*>(blk));
    raw.h0 = LoadStreaming(reinterpret_cast<const uint4*>(blk + 16));
    raw.h1 = LoadStreaming(reinterpret_cast<const uint4*>(blk + 32));
    raw.q0 = LoadStreaming(reinterpret_cast<const uint4*>(blk + 48 + 32 * pair));
    raw.q1 = LoadStreaming(reinterpret_cast<const uint4*>(blk + 64 + 32 * pair));
    return raw;
  }
  template <int R>
  __device__ static void Apply(const Raw& raw, int slice, const ActSet& a, unsigned mask, int base,
                               float (&acc)[R]) {
    const int pair = slice & 3;
    const uint32_t qw[8] = {raw.q0.x, raw.q0.y, raw.q0.z, raw.q0.w,
                            raw.q1.x, raw.q1.y, raw.q1.z, raw.q1.w};
    const uint32_t hw[8] = {raw.h0.x, raw.h0.y, raw.h0.z, raw.h0.w,
                            raw.h1.x, raw.h1.y, raw.h1.z, raw.h1.w};
    uint32_t v_lo[8], v_hi[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // Bit 2·pair (lo) and 2·pair+1 (hi) of qh byte l is the fifth bit of element l.
      v_lo[j] = (qw[j] & 0x0F0F0F0Fu) | ((hw[j] >> (2 * pair)) & 0x01010101u) << 4;
      v_hi[j] = ((qw[j] >> 4) & 0x0F0F0F0Fu) | ((hw[j] >> (2 * pair + 1)) & 0x01010101u) << 4;
    }
    ApplyK4Slice<R>(raw.hdr, slice, v_lo, v_hi, a, mask, base, acc);
  }
};

}  // namespace tandem::megakernel
