// IQ4_XS on the device: one lane takes one 32-weight sub-block, maps its 4-bit indices through
// the IQ4_NL codebook with byte permutes, and applies it to every active row with dp4a.
// C++17, device only.
#pragma once

#include "megakernel/codecs/act.cuh"
#include "megakernel/device/common.cuh"
#include "runtime/quant/iq4_nl.h"

namespace tandem::megakernel {

// Four codebook values for the four indices (0..15) held in the bytes of `idx`.
__device__ __forceinline__ uint32_t Iq4Lookup(uint32_t idx) {
  constexpr uint32_t t0 = static_cast<uint32_t>(quant::kIq4CodebookLow);
  constexpr uint32_t t1 = static_cast<uint32_t>(quant::kIq4CodebookLow >> 32);
  constexpr uint32_t t2 = static_cast<uint32_t>(quant::kIq4CodebookHigh);
  constexpr uint32_t t3 = static_cast<uint32_t>(quant::kIq4CodebookHigh >> 32);
  const uint32_t low3 = idx & 0x07070707u;
  // Byte-wise indices to the nibble selector that __byte_perm takes.
  const uint32_t packed = low3 | (low3 >> 4);
  const uint32_t selector = (packed & 0xffu) | ((packed >> 8) & 0xff00u);
  const uint32_t lo = __byte_perm(t0, t1, selector);
  const uint32_t hi = __byte_perm(t2, t3, selector);
  const uint32_t use_hi = ((idx >> 3) & 0x01010101u) * 0xffu;
  return (lo & ~use_hi) | (hi & use_hi);
}

struct CodecIQ4XS {
  static constexpr int kSliceElems = 32;
  template <int R>
  __device__ static void Dot(const uint8_t* row, int slice, int /*n_slices*/, const ActSet& a,
                             unsigned mask, int base, float (&acc)[R]) {
    const int b = slice >> 3, j = slice & 7;
    const uint8_t* blk = row + 136 * b;
    const uint2 hdr = LoadStreaming(reinterpret_cast<const uint2*>(blk));
    const uint2 q0 = LoadStreaming(reinterpret_cast<const uint2*>(blk + 8 + 16 * j));
    const uint2 q1 = LoadStreaming(reinterpret_cast<const uint2*>(blk + 16 + 16 * j));
    const uint32_t qw[4] = {q0.x, q0.y, q1.x, q1.y};
    uint32_t v[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = Iq4Lookup(qw[i] & 0x0F0F0F0Fu);             // weights 4i..4i+3
      v[i + 4] = Iq4Lookup((qw[i] >> 4) & 0x0F0F0F0Fu);  // weights 16+4i..
    }
    const int low4 = (hdr.y >> (8 * (j >> 1) + 4 * (j & 1))) & 0xF;
    const int high2 = (hdr.x >> (16 + 2 * j)) & 3;
    const float dl = HalfBitsToFloat(hdr.x) * static_cast<float>((low4 | high2 << 4) - 32);
    const int act_block = 8 * b + j;
    const int nb = a.cols / 32;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!RowOn<R>(mask, r)) continue;
      const int p = ActRow(mask, base, r);
      const uintptr_t at = ActChunkAt(ActRowOf(a, p), 2 * act_block);
      const int sum = Dot16(v, ActAt(at, 0)) + Dot16(v + 4, ActAt(at, 1));
      acc[r] += a.d[p * nb + act_block] * dl * static_cast<float>(sum);
    }
  }
};

}  // namespace tandem::megakernel
