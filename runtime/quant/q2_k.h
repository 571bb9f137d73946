// Q2_K: 256 2-bit values in 16 sub-blocks of 16, each with a 4-bit scale and 4-bit min, and two f16
// super-block factors: x = d·sc·q − dmin·m (spec §2.4). C++17, host and device; the quantiser is
// host-only (q2_k.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ2K {
  static constexpr GgmlType kType = GgmlType::kQ2_K;
  static constexpr int kElems = kQK_K;

  uint8_t scales[16];     // sub-block j: low nibble = scale, high nibble = min
  uint8_t qs[kQK_K / 4];  // 2-bit quants, see TwoBitField
  uint16_t d;             // f16 factor of the scales
  uint16_t dmin;          // f16 factor of the mins
};
static_assert(sizeof(BlockQ2K) == 84);
static_assert(offsetof(BlockQ2K, qs) == 16 && offsetof(BlockQ2K, d) == 80 &&
              offsetof(BlockQ2K, dmin) == 82);

TANDEM_HD float DequantizeElement(const BlockQ2K& b, int e) {
  const int j = e >> 4;
  const float dl = Fp16ToF32(b.d) * static_cast<float>(b.scales[j] & 0xF);
  const float ml = Fp16ToF32(b.dmin) * static_cast<float>(b.scales[j] >> 4);
  return dl * static_cast<float>(TwoBitField(b.qs, e)) - ml;
}

TANDEM_HD void DequantizeBlock(const BlockQ2K& b, float* out) {
  const float d = Fp16ToF32(b.d);
  const float dmin = Fp16ToF32(b.dmin);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * static_cast<float>(b.scales[j] & 0xF);
    const float ml = dmin * static_cast<float>(b.scales[j] >> 4);
    // Sub-block j covers elements 16j..16j+15: half j/8, bit pair (j/2)%4, bytes from 16·(j%2).
    const uint8_t* q = b.qs + 32 * (j >> 3) + 16 * (j & 1);
    const int shift = 2 * ((j >> 1) & 3);
    for (int i = 0; i < 16; ++i)
      out[16 * j + i] = dl * static_cast<float>((q[i] >> shift) & 3) - ml;
  }
}

// Per sub-block least-squares scale and min, then 4-bit codes for both under f16 factors, then a
// joint least-squares refit of the two factors.
void QuantizeBlocks(const float* x, BlockQ2K* out, int64_t n_blocks);

}  // namespace tandem::quant
