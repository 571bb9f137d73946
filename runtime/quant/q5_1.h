// Q5_1: 32 5-bit values with an f16 scale and an f16 offset, x = (nibble | high bit << 4)·d + m
// (spec §2.3). C++17, host and device; the quantiser is host-only (q5_1.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ5_1 {
  static constexpr GgmlType kType = GgmlType::kQ5_1;
  static constexpr int kElems = kQK;

  uint16_t d;           // f16 scale
  uint16_t m;           // f16 offset
  uint8_t qh[4];        // bit j of the LE u32 = bit 4 of element j
  uint8_t qs[kQK / 2];  // low 4 bits, same nibble order as Q4_1
};
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(offsetof(BlockQ5_1, qh) == 4 && offsetof(BlockQ5_1, qs) == 8);

TANDEM_HD float DequantizeElement(const BlockQ5_1& b, int j) {
  const int high = (LoadLe32(b.qh) >> j) & 1;
  return static_cast<float>(Nibble32(b.qs, j) | high << 4) * Fp16ToF32(b.d) + Fp16ToF32(b.m);
}

TANDEM_HD void DequantizeBlock(const BlockQ5_1& b, float* out) {
  const float d = Fp16ToF32(b.d);
  const float m = Fp16ToF32(b.m);
  const uint32_t qh = LoadLe32(b.qh);
  for (int i = 0; i < kQK / 2; ++i) {
    const int low = (b.qs[i] & 0xF) | static_cast<int>((qh >> i) & 1) << 4;
    const int high = (b.qs[i] >> 4) | static_cast<int>((qh >> (i + 16)) & 1) << 4;
    out[i] = static_cast<float>(low) * d + m;
    out[i + 16] = static_cast<float>(high) * d + m;
  }
}

// Least-squares scale and offset, alternating rounding and solving over a sweep of ranges.
void QuantizeBlocks(const float* x, BlockQ5_1* out, int64_t n_blocks);

}  // namespace tandem::quant
