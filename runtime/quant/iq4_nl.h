// IQ4_NL: 32 4-bit indices into a fixed non-linear int8 codebook and one f16 scale,
// x = d·K[nibble] (spec §2.3). IQ4_XS uses the same codebook. C++17, host and device; the
// quantiser is host-only (iq4_nl.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

// The codebook K[0..15], ascending. Host code indexes this array.
inline constexpr int8_t kIq4Codebook[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// The same 16 bytes as two little-endian words (entry k in byte k % 8), for device code, which
// cannot read a namespace-scope array, and for byte-permute lookups.
inline constexpr uint64_t kIq4CodebookLow = 0xF6EADDCFBFAD9881ull;
inline constexpr uint64_t kIq4CodebookHigh = 0x7159453526190D01ull;

TANDEM_HD int Iq4CodebookValue(int index) {
  const uint64_t word = index < 8 ? kIq4CodebookLow : kIq4CodebookHigh;
  return static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * (index & 7))));
}

struct BlockIQ4NL {
  static constexpr GgmlType kType = GgmlType::kIQ4_NL;
  static constexpr int kElems = kQK;

  uint16_t d;           // f16
  uint8_t qs[kQK / 2];  // codebook indices, same nibble order as Q4_0
};
static_assert(sizeof(BlockIQ4NL) == 18);
static_assert(offsetof(BlockIQ4NL, qs) == 2);

TANDEM_HD float DequantizeElement(const BlockIQ4NL& b, int j) {
  return Fp16ToF32(b.d) * static_cast<float>(Iq4CodebookValue(Nibble32(b.qs, j)));
}

TANDEM_HD void DequantizeBlock(const BlockIQ4NL& b, float* out) {
  const float d = Fp16ToF32(b.d);
  for (int i = 0; i < kQK / 2; ++i) {
    out[i] = d * static_cast<float>(Iq4CodebookValue(b.qs[i] & 0xF));
    out[i + 16] = d * static_cast<float>(Iq4CodebookValue(b.qs[i] >> 4));
  }
}

// Least-squares scale over a sweep of candidate scales of either sign, nearest codebook entries.
void QuantizeBlocks(const float* x, BlockIQ4NL* out, int64_t n_blocks);

}  // namespace tandem::quant
