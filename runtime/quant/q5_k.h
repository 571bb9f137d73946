// Q5_K: Q4_K plus a fifth bit per element: x = d·sc·q − dmin·m with q in 0..31 (spec §2.4).
// Bit j of qh[l] is the high bit of element 32j + l. C++17, host and device; the quantiser is
// host-only (q5_k.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"
#include "runtime/quant/q4_k.h"

namespace tandem::quant {

struct BlockQ5K {
  static constexpr GgmlType kType = GgmlType::kQ5_K;
  static constexpr int kElems = kQK_K;

  uint16_t d;             // f16 factor of the scales
  uint16_t dmin;          // f16 factor of the mins
  uint8_t scales[12];     // same packing as Q4_K, see ScaleMinK4
  uint8_t qh[kQK_K / 8];  // high bits
  uint8_t qs[kQK_K / 2];  // low 4 bits, same addressing as Q4_K
};
static_assert(sizeof(BlockQ5K) == 176);
static_assert(offsetof(BlockQ5K, scales) == 4 && offsetof(BlockQ5K, qh) == 16 &&
              offsetof(BlockQ5K, qs) == 48);

TANDEM_HD float DequantizeElement(const BlockQ5K& b, int e) {
  const int j = e >> 5;
  int scale, min;
  ScaleMinK4(b.scales, j, &scale, &min);
  const float dl = Fp16ToF32(b.d) * static_cast<float>(scale);
  const float ml = Fp16ToF32(b.dmin) * static_cast<float>(min);
  const uint8_t byte = b.qs[32 * (j >> 1) + (e & 31)];
  const int q = ((j & 1) ? byte >> 4 : byte & 0xF) + 16 * ((b.qh[e & 31] >> j) & 1);
  return dl * static_cast<float>(q) - ml;
}

TANDEM_HD void DequantizeBlock(const BlockQ5K& b, float* out) {
  const float d = Fp16ToF32(b.d);
  const float dmin = Fp16ToF32(b.dmin);
  for (int pair = 0; pair < 4; ++pair) {
    const int j_lo = 2 * pair;
    const int j_hi = 2 * pair + 1;
    int scale_lo, min_lo, scale_hi, min_hi;
    ScaleMinK4(b.scales, j_lo, &scale_lo, &min_lo);
    ScaleMinK4(b.scales, j_hi, &scale_hi, &min_hi);
    const float dl_lo = d * static_cast<float>(scale_lo);
    const float ml_lo = dmin * static_cast<float>(min_lo);
    const float dl_hi = d * static_cast<float>(scale_hi);
    const float ml_hi = dmin * static_cast<float>(min_hi);
    const uint8_t* q = b.qs + 32 * pair;
    float* y = out + 64 * pair;
    for (int l = 0; l < 32; ++l) {
      const int q_lo = (q[l] & 0xF) + 16 * ((b.qh[l] >> j_lo) & 1);
      const int q_hi = (q[l] >> 4) + 16 * ((b.qh[l] >> j_hi) & 1);
      y[l] = dl_lo * static_cast<float>(q_lo) - ml_lo;
      y[l + 32] = dl_hi * static_cast<float>(q_hi) - ml_hi;
    }
  }
}

// As Q4_K, with q in 0..31.
void QuantizeBlocks(const float* x, BlockQ5K* out, int64_t n_blocks);

}  // namespace tandem::quant
