// Q4_0: 32 4-bit values and one f16 scale, x = (nibble − 8)·d (spec §2.3).
// C++17, host and device; the quantiser is host-only (q4_0.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ4_0 {
  static constexpr GgmlType kType = GgmlType::kQ4_0;
  static constexpr int kElems = kQK;

  uint16_t d;           // f16
  uint8_t qs[kQK / 2];  // element i in the low nibble of qs[i], element i+16 in the high nibble
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(offsetof(BlockQ4_0, qs) == 2);

TANDEM_HD float DequantizeElement(const BlockQ4_0& b, int j) {
  return static_cast<float>(Nibble32(b.qs, j) - 8) * Fp16ToF32(b.d);
}

TANDEM_HD void DequantizeBlock(const BlockQ4_0& b, float* out) {
  const float d = Fp16ToF32(b.d);
  for (int i = 0; i < kQK / 2; ++i) {
    out[i] = static_cast<float>((b.qs[i] & 0xF) - 8) * d;
    out[i + 16] = static_cast<float>((b.qs[i] >> 4) - 8) * d;
  }
}

// Least-squares scale over a sweep of grids anchored on the largest |x|.
void QuantizeBlocks(const float* x, BlockQ4_0* out, int64_t n_blocks);

}  // namespace tandem::quant
