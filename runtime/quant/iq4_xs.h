// IQ4_XS: 256 IQ4_NL codebook indices in 8 sub-blocks of 32, each with a 6-bit scale biased by 32,
// and one f16 factor: x = d·(ls − 32)·K[index] (spec §2.4). C++17, host and device; the quantiser
// is host-only (iq4_xs.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"
#include "runtime/quant/iq4_nl.h"

namespace tandem::quant {

struct BlockIQ4XS {
  static constexpr GgmlType kType = GgmlType::kIQ4_XS;
  static constexpr int kElems = kQK_K;

  uint16_t d;             // f16
  uint16_t scales_h;      // bits 2j..2j+1: bits 4–5 of ls_j
  uint8_t scales_l[4];    // scales_l[j/2] nibble j%2 (low first): bits 0–3 of ls_j
  uint8_t qs[kQK_K / 2];  // sub-block j: qs[16j .. 16j+15], Q4_0 nibble order inside
};
static_assert(sizeof(BlockIQ4XS) == 136);
static_assert(offsetof(BlockIQ4XS, scales_h) == 2 && offsetof(BlockIQ4XS, scales_l) == 4 &&
              offsetof(BlockIQ4XS, qs) == 8);

// Scale of sub-block j (0..7) in −32..31.
TANDEM_HD int Iq4XsScale(const BlockIQ4XS& b, int j) {
  const int low4 = (b.scales_l[j >> 1] >> (4 * (j & 1))) & 0xF;
  const int high2 = (b.scales_h >> (2 * j)) & 3;
  return (low4 | high2 << 4) - 32;
}

TANDEM_HD float DequantizeElement(const BlockIQ4XS& b, int e) {
  const int j = e >> 5;
  const float dl = Fp16ToF32(b.d) * static_cast<float>(Iq4XsScale(b, j));
  return dl * static_cast<float>(Iq4CodebookValue(Nibble32(b.qs + 16 * j, e & 31)));
}

TANDEM_HD void DequantizeBlock(const BlockIQ4XS& b, float* out) {
  const float d = Fp16ToF32(b.d);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(Iq4XsScale(b, j));
    const uint8_t* q = b.qs + 16 * j;
    float* y = out + 32 * j;
    for (int i = 0; i < 16; ++i) {
      y[i] = dl * static_cast<float>(Iq4CodebookValue(q[i] & 0xF));
      y[i + 16] = dl * static_cast<float>(Iq4CodebookValue(q[i] >> 4));
    }
  }
}

// Per sub-block codebook scale search, then 6-bit signed codes under one f16 factor.
void QuantizeBlocks(const float* x, BlockIQ4XS* out, int64_t n_blocks);

}  // namespace tandem::quant
