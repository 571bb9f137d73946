// Q4_1: 32 4-bit values with an f16 scale and an f16 offset, x = nibble·d + m (spec §2.3).
// C++17, host and device; the quantiser is host-only (q4_1.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ4_1 {
  static constexpr GgmlType kType = GgmlType::kQ4_1;
  static constexpr int kElems = kQK;

  uint16_t d;           // f16 scale
  uint16_t m;           // f16 offset (the block's minimum, roughly)
  uint8_t qs[kQK / 2];  // element i in the low nibble of qs[i], element i+16 in the high nibble
};
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(offsetof(BlockQ4_1, m) == 2 && offsetof(BlockQ4_1, qs) == 4);

TANDEM_HD float DequantizeElement(const BlockQ4_1& b, int j) {
  return static_cast<float>(Nibble32(b.qs, j)) * Fp16ToF32(b.d) + Fp16ToF32(b.m);
}

TANDEM_HD void DequantizeBlock(const BlockQ4_1& b, float* out) {
  const float d = Fp16ToF32(b.d);
  const float m = Fp16ToF32(b.m);
  for (int i = 0; i < kQK / 2; ++i) {
    out[i] = static_cast<float>(b.qs[i] & 0xF) * d + m;
    out[i + 16] = static_cast<float>(b.qs[i] >> 4) * d + m;
  }
}

// Least-squares scale and offset, alternating rounding and solving over a sweep of ranges.
void QuantizeBlocks(const float* x, BlockQ4_1* out, int64_t n_blocks);

}  // namespace tandem::quant
