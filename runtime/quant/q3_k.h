// Q3_K: 256 3-bit values (q in −4..3) in 16 sub-blocks of 16 with signed 6-bit scales and one f16
// factor: x = d·(sc − 32)·q (spec §2.4). The low two bits use Q2_K's layout; a SET bit in hmask
// means "no subtraction", a clear bit subtracts 4. C++17, host and device; the quantiser is
// host-only (q3_k.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ3K {
  static constexpr GgmlType kType = GgmlType::kQ3_K;
  static constexpr int kElems = kQK_K;

  uint8_t hmask[kQK_K / 8];  // bit b of hmask[l] is the high bit of element 32b + l
  uint8_t qs[kQK_K / 4];     // low 2 bits, see TwoBitField
  uint8_t scales[12];        // sixteen 6-bit scales biased by 32, see Q3KScale
  uint16_t d;                // f16
};
static_assert(sizeof(BlockQ3K) == 110);
static_assert(offsetof(BlockQ3K, qs) == 32 && offsetof(BlockQ3K, scales) == 96 &&
              offsetof(BlockQ3K, d) == 108);

// Scale of sub-block j (0..15) in −32..31. Bytes 0..7 hold the low nibbles (scales 0..7 in the low
// halves, 8..15 in the high halves); byte 8 + k holds the top two bits of scales k, k+4, k+8, k+12.
TANDEM_HD int Q3KScale(const uint8_t* scales, int j) {
  const int low4 = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
  const int high2 = (scales[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return (low4 | high2 << 4) - 32;
}

TANDEM_HD int Q3KQuant(const BlockQ3K& b, int e) {
  const int high_bit = (b.hmask[e & 31] >> (e >> 5)) & 1;
  return TwoBitField(b.qs, e) - (high_bit ? 0 : 4);
}

TANDEM_HD float DequantizeElement(const BlockQ3K& b, int e) {
  const float dl = Fp16ToF32(b.d) * static_cast<float>(Q3KScale(b.scales, e >> 4));
  return dl * static_cast<float>(Q3KQuant(b, e));
}

TANDEM_HD void DequantizeBlock(const BlockQ3K& b, float* out) {
  const float d = Fp16ToF32(b.d);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * static_cast<float>(Q3KScale(b.scales, j));
    // Sub-block j: low bits as in Q2_K; its 16 high bits are bit j/2 of hmask[16·(j%2) ...].
    const uint8_t* q = b.qs + 32 * (j >> 3) + 16 * (j & 1);
    const uint8_t* h = b.hmask + 16 * (j & 1);
    const int shift = 2 * ((j >> 1) & 3);
    const int high_bit = j >> 1;
    for (int i = 0; i < 16; ++i) {
      const int value = ((q[i] >> shift) & 3) - (((h[i] >> high_bit) & 1) ? 0 : 4);
      out[16 * j + i] = dl * static_cast<float>(value);
    }
  }
}

// Per sub-block least-squares scale over q in −4..3, then 6-bit signed codes under one f16 factor.
void QuantizeBlocks(const float* x, BlockQ3K* out, int64_t n_blocks);

}  // namespace tandem::quant
