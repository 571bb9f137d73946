// Q8_0: 32 signed bytes and one f16 scale, x = qs[j]·d (spec §2.3). A weight format and the
// activation format that the CPU pairs with Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4 weights.
// C++17, host and device; the quantiser is host-only (q8_0.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ8_0 {
  static constexpr GgmlType kType = GgmlType::kQ8_0;
  static constexpr int kElems = kQK;

  uint16_t d;  // f16
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(offsetof(BlockQ8_0, qs) == 2);

TANDEM_HD float DequantizeElement(const BlockQ8_0& b, int j) {
  return static_cast<float>(b.qs[j]) * Fp16ToF32(b.d);
}

TANDEM_HD void DequantizeBlock(const BlockQ8_0& b, float* out) {
  const float d = Fp16ToF32(b.d);
  for (int j = 0; j < kQK; ++j) out[j] = static_cast<float>(b.qs[j]) * d;
}

// d = max|x| / 127 (stored as f16), qs = round-half-away(x / d) within [-127, 127].
void QuantizeBlocks(const float* x, BlockQ8_0* out, int64_t n_blocks);

}  // namespace tandem::quant
