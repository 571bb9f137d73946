// Q8_K: the activation format paired with K-quant and IQ4_XS weights (spec §2.4): an f32 scale,
// 256 signed bytes, and the sum of each 16 bytes so that dot products apply the weights' min terms
// without touching the elements. x = d·qs[e]. C++17, host and device; the quantiser is host-only
// (q8_k.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

struct BlockQ8K {
  static constexpr GgmlType kType = GgmlType::kQ8_K;
  static constexpr int kElems = kQK_K;

  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // bsums[k] = Σ qs[16k .. 16k+15]
};
static_assert(sizeof(BlockQ8K) == 292);
static_assert(offsetof(BlockQ8K, qs) == 4 && offsetof(BlockQ8K, bsums) == 260);

TANDEM_HD float DequantizeElement(const BlockQ8K& b, int e) {
  return b.d * static_cast<float>(b.qs[e]);
}

TANDEM_HD void DequantizeBlock(const BlockQ8K& b, float* out) {
  for (int e = 0; e < kQK_K; ++e) out[e] = b.d * static_cast<float>(b.qs[e]);
}

// ggml's convention: the element of largest |x| maps to −127, so d is negative when that element
// is positive; qs = min(127, round-half-even(x / d)); bsums filled; an all-zero block gets d = 0.
void QuantizeBlocks(const float* x, BlockQ8K* out, int64_t n_blocks);

}  // namespace tandem::quant
