// Q4_K: 256 4-bit values in 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min, and two f16
// factors: x = d·sc·q − dmin·m (spec §2.4). The 12-byte scale/min packing is shared with Q5_K.
// C++17, host and device; the quantiser is host-only (q4_k.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

// Scale and min of sub-block j (0..7), each 0..63, from the 12 packed bytes:
// bytes 0–3: sc0..3 in bits 0–5, bits 4–5 of sc4..7 in bits 6–7;
// bytes 4–7: m0..3 in bits 0–5, bits 4–5 of m4..7 in bits 6–7;
// bytes 8–11: bits 0–3 of sc4..7 in the low nibbles, of m4..7 in the high nibbles.
TANDEM_HD void ScaleMinK4(const uint8_t* scales, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0xF) | (scales[j - 4] >> 6) << 4;
    *min = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
  }
}

// The inverse of ScaleMinK4 for eight scales and eight mins, each 0..63. Host-only.
void PackScaleMinK4(const int* scale, const int* min, uint8_t* scales);

struct BlockQ4K {
  static constexpr GgmlType kType = GgmlType::kQ4_K;
  static constexpr int kElems = kQK_K;

  uint16_t d;             // f16 factor of the scales
  uint16_t dmin;          // f16 factor of the mins
  uint8_t scales[12];     // see ScaleMinK4
  uint8_t qs[kQK_K / 2];  // qs[32k + l]: sub-block 2k in the low nibble, 2k+1 in the high nibble
};
static_assert(sizeof(BlockQ4K) == 144);
static_assert(offsetof(BlockQ4K, scales) == 4 && offsetof(BlockQ4K, qs) == 16);

TANDEM_HD float DequantizeElement(const BlockQ4K& b, int e) {
  const int j = e >> 5;
  int scale, min;
  ScaleMinK4(b.scales, j, &scale, &min);
  const float dl = Fp16ToF32(b.d) * static_cast<float>(scale);
  const float ml = Fp16ToF32(b.dmin) * static_cast<float>(min);
  const uint8_t byte = b.qs[32 * (j >> 1) + (e & 31)];
  const int q = (j & 1) ? byte >> 4 : byte & 0xF;
  return dl * static_cast<float>(q) - ml;
}

TANDEM_HD void DequantizeBlock(const BlockQ4K& b, float* out) {
  const float d = Fp16ToF32(b.d);
  const float dmin = Fp16ToF32(b.dmin);
  for (int pair = 0; pair < 4; ++pair) {  // sub-blocks 2·pair (low nibbles) and 2·pair+1 (high)
    int scale_lo, min_lo, scale_hi, min_hi;
    ScaleMinK4(b.scales, 2 * pair, &scale_lo, &min_lo);
    ScaleMinK4(b.scales, 2 * pair + 1, &scale_hi, &min_hi);
    const float dl_lo = d * static_cast<float>(scale_lo);
    const float ml_lo = dmin * static_cast<float>(min_lo);
    const float dl_hi = d * static_cast<float>(scale_hi);
    const float ml_hi = dmin * static_cast<float>(min_hi);
    const uint8_t* q = b.qs + 32 * pair;
    float* y = out + 64 * pair;
    for (int l = 0; l < 32; ++l) {
      y[l] = dl_lo * static_cast<float>(q[l] & 0xF) - ml_lo;
      y[l + 32] = dl_hi * static_cast<float>(q[l] >> 4) - ml_hi;
    }
  }
}

// Per sub-block least-squares scale and min, then 6-bit codes for both under f16 factors, then a
// joint least-squares refit of the two factors.
void QuantizeBlocks(const float* x, BlockQ4K* out, int64_t n_blocks);

}  // namespace tandem::quant
