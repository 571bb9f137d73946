// Q6_K and Q3_K on the device. A Q6_K lane takes half a 256-weight block (128 weights: four runs
// of 32, each two 16-weight sub-blocks with their own signed scale); a Q3_K lane takes a whole
// block (eight runs), since both halves share the block's high-bit mask and scales. Each run is
// built as int8 words and applied to every active row with dp4a. Both read the device layouts of
// codecs.h, whose loads are all aligned: Q6_K rows split into quant, scale and d planes, Q3_K
// blocks padded to 112 bytes (kQ3KDeviceBlockBytes). C++17, device only.
#pragma once

#include "megakernel/codecs.h"
#include "megakernel/codecs/act.cuh"
#include "megakernel/device/common.cuh"

namespace tandem::megakernel {

// One 32-weight run (words v[0..7]) with integer scales sc0 (weights 0..15) and sc1 (16..31), all
// times d. The two halves' scaled sums are added as integers and converted once, where float
// scales took four conversions and three multiplies a run. Exact: |value| <= 32 and |x| <= 127, so
// a half's sum is under 16·32·127 = 65,024, times |sc| <= 128 (Q6_K's int8 scales; Q3_K's are
// within ±32) under 2^23, and the two together under 2^24, where floats still hold every integer.
template <int R>
__device__ __forceinline__ void DotRun16(const uint32_t* v, float d, int sc0, int sc1,
                                         int act_block, const ActSet& a, unsigned mask, int base,
                                         float (&acc)[R]) {
  const int nb = a.cols / 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!RowOn<R>(mask, r)) continue;
    const int p = ActRow(mask, base, r);
    const uintptr_t at = ActChunkAt(ActRowOf(a, p), 2 * act_block);
    const int s0 = Dot16(v, ActAt(at, 0)), s1 = Dot16(v + 4, ActAt(at, 1));
    acc[r] += a.d[p * nb + act_block] * d * static_cast<float>(sc0 * s0 + sc1 * s1);
  }
}

__device__ __forceinline__ int SignedByte(uint32_t w, int k) {
  return static_cast<int8_t>((w >> (8 * k)) & 0xffu);
}

// 0xff in each byte of w whose top bit is set, 0 in the others: one prmt in its sign-replicating
// form (selector nibbles 8 + byte).
__device__ __forceinline__ uint32_t SignBytes(uint32_t w) {
  uint32_t r;
  asm("prmt.b32 %0, %1, 0, 0xba98;" : "=r"(r) : "r"(w));
  return r;
}

// The planes of a Q6_K row of nb blocks in the device layout (codecs.h): block b's ql and qh
// (192 bytes), its 16 scales, and every block's d.
__device__ __forceinline__ const uint8_t* Q6KQuants(const uint8_t* row, int b) {
  return row + kQ6KQuantBytes * b;
}
__device__ __forceinline__ const int8_t* Q6KScales(const uint8_t* row, int nb, int b) {
  return reinterpret_cast<const int8_t*>(row + kQ6KQuantBytes * nb + kQ6KScaleBytes * b);
}
__device__ __forceinline__ const unsigned short* Q6KFactors(const uint8_t* row, int nb) {
  return reinterpret_cast<const unsigned short*>(row + (kQ6KQuantBytes + kQ6KScaleBytes) * nb);
}

// Rows are in the device layout, so that a lane's loads are all aligned.
struct CodecQ6K {
  static constexpr int kSliceElems = 128;
  template <int R>
  __device__ static void Dot(const uint8_t* row, int slice, int n_slices, const ActSet& a,
                             unsigned mask, int base, float (&acc)[R]) {
    const int b = slice >> 1, h = slice & 1, nb = n_slices >> 1;
    const uint8_t* q = Q6KQuants(row, b);
    uint32_t ql[16], qh[8];
    LoadChunks<4>(reinterpret_cast<const uint4*>(q + 64 * h), ql);
    LoadChunks<2>(reinterpret_cast<const uint4*>(q + 128 + 32 * h), qh);
    const uint2 sc = LoadStreaming(reinterpret_cast<const uint2*>(Q6KScales(row, nb, b) + 8 * h));
    const float d = HalfBitsToFloat(LoadStreaming(Q6KFactors(row, nb) + b));
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      // Run g: low nibbles from ql[32·(g%2) + l] (high nibble when g >= 2), top bits from bit
      // pair g of qh[l]; values − 32, bytewise: with bit 7 of each byte (0..63) set first, no
      // byte borrows from the next, and the xor restores it. __vsubss4 saturates, which these
      // values never need, and sm_90 has no instruction for it (14 PTX instructions a word).
      uint32_t v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t low = g < 2 ? ql[8 * (g & 1) + j] & 0x0F0F0F0Fu
                                   : (ql[8 * (g & 1) + j] >> 4) & 0x0F0F0F0Fu;
        const uint32_t top = g == 0   ? (qh[j] << 4) & 0x30303030u
                             : g == 1 ? (qh[j] << 2) & 0x30303030u
                             : g == 2 ? qh[j] & 0x30303030u
                                      : (qh[j] >> 2) & 0x30303030u;
        v[j] = ((low | top | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
      }
      const uint32_t sw = g < 2 ? sc.x : sc.y;
      DotRun16<R>(v, d, SignedByte(sw, 2 * (g & 1)), SignedByte(sw, 2 * (g & 1) + 1),
                  8 * b + 4 * h + g, a, mask, base, acc);
    }
  }
};

// The eight 6-bit scales (biased by 32) of Q3_K half-block h, sub-blocks j = 8h + m, as bytes m
// of two words (m = 0..3, 4..7), from the block's 12 packed scale bytes (quant::Q3KScale): low four
// bits from nibble h of byte m, top two from bits 4h + 2(m / 4) of byte 8 + m % 4. Shifting the
// words by 4h once keeps every field inside its byte, so the whole set costs a few word operations
// instead of a byte select and two variable shifts per scale.
__device__ __forceinline__ void Q3KHalfScales(const uint32_t (&sc)[3], int h, uint32_t* s03,
                                              uint32_t* s47) {
  const unsigned shift = 4u * static_cast<unsigned>(h);
  const uint32_t top = sc[2] >> shift;
  *s03 = ((sc[0] >> shift) & 0x0F0F0F0Fu) | (top & 0x03030303u) << 4;
  *s47 = ((sc[1] >> shift) & 0x0F0F0F0Fu) | (top >> 2 & 0x03030303u) << 4;
}

// Byte k of w, a biased 6-bit scale, as its signed value.
__device__ __forceinline__ int BiasedScale(uint32_t w, int k) {
  return static_cast<int>((w >> (8 * k)) & 0xffu) - 32;
}

// A lane takes a whole block: loading it as one run of 28 words (the 112-byte device block's 7
// aligned chunks) reads the high-bit mask and the scales once, where two half-block lanes each
// loaded all of them (16 chunks a block); and a row of 2,048 needs 8 lanes instead of 16, so
// flash-next-125b's expert phases have half the units, each a load round trip and a reduction
// (docs/perf/megakernel.md, session 26).
struct CodecQ3K {
  static constexpr int kSliceElems = 256;
  template <int R>
  __device__ static void Dot(const uint8_t* row, int slice, int /*n_slices*/, const ActSet& a,
                             unsigned mask, int base, float (&acc)[R]) {
    // hmask (words 0..7), qs (8..23), the 12 scale bytes (24..26), then d (and the padding).
    uint32_t w[28];
    LoadChunks<kQ3KDeviceBlockBytes / 16>(
        reinterpret_cast<const uint4*>(row + kQ3KDeviceBlockBytes * slice), w);
    const uint32_t sc[3] = {w[24], w[25], w[26]};
    const float d = HalfBitsToFloat(w[27]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t s03, s47;
      Q3KHalfScales(sc, h, &s03, &s47);
#pragma unroll
      for (int g = 0; g < 4; ++g) {
        // Weight 128h + 32g + l: low bits (qs[32h + l] >> 2g) & 3, high bit
        // (hmask[l] >> (4h + g)) & 1; value = low + 4·high − 4: low itself where the high bit is
        // set, else low − 4, which as a byte is low | 0xFC (low ≤ 3). The high bit shifted to the
        // top of its byte and replicated over it (SignBytes) selects between the two in one
        // three-input logic op, where a mask, a not and a multiply built it before.
        const int k = 4 * h + g;
        uint32_t v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t low = w[8 + 8 * h + j] >> (2 * g);
          const uint32_t high_set = SignBytes(w[j] << (7 - k));
          v[j] = (low & 0x03030303u) | (~high_set & 0xFCFCFCFCu);
        }
        const uint32_t sw = g < 2 ? s03 : s47;  // scales m = 2g, 2g + 1 of this half
        DotRun16<R>(v, d, BiasedScale(sw, 2 * (g & 1)), BiasedScale(sw, 2 * (g & 1) + 1),
                    8 * slice + 4 * h + g, a, mask, base, acc);
      }
    }
  }
};

}  // namespace tandem::megakernel
