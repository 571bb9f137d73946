// Q5_0: 32 5-bit values and one f16 scale, x = ((nibble | high bit << 4) − 16)·d (spec §2.3).
// The fifth bits of all 32 elements sit in qh, read as one little-endian u32 (bit j = element j).
// C++17, host and device; the quantiser is host-only (q5_0.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ5_0 {
  static constexpr GgmlType kType = GgmlType::kQ5_0;
  static constexpr int kElems = kQK;

  uint16_t d;           // f16
  uint8_t qh[4];        // bit j of the LE u32 = bit 4 of element j
  uint8_t qs[kQK / 2];  // low 4 bits: element i low nibble of qs[i], element i+16 high nibble
};
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(offsetof(BlockQ5_0, qh) == 2 && offsetof(BlockQ5_0, qs) == 6);

TANDEM_HD float DequantizeElement(const BlockQ5_0& b, int j) {
  const int high = (LoadLe32(b.qh) >> j) & 1;
  return static_cast<float>((Nibble32(b.qs, j) | high << 4) - 16) * Fp16ToF32(b.d);
}

TANDEM_HD void DequantizeBlock(const BlockQ5_0& b, float* out) {
  const float d = Fp16ToF32(b.d);
  const uint32_t qh = LoadLe32(b.qh);
  for (int i = 0; i < kQK / 2; ++i) {
    const int low = (b.qs[i] & 0xF) | static_cast<int>((qh >> i) & 1) << 4;
    const int high = (b.qs[i] >> 4) | static_cast<int>((qh >> (i + 16)) & 1) << 4;
    out[i] = static_cast<float>(low - 16) * d;
    out[i + 16] = static_cast<float>(high - 16) * d;
  }
}

// Least-squares scale over a sweep of grids anchored on the largest |x|.
void QuantizeBlocks(const float* x, BlockQ5_0* out, int64_t n_blocks);

}  // namespace tandem::quant
