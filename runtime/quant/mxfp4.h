// MXFP4: 32 E2M1 (FP4) values sharing one E8M0 exponent byte (spec §2.5):
// x = F[nibble]·2^(e−128), with F the E2M1 magnitudes doubled, as ggml stores them.
// C++17, host and device; the quantiser is host-only (mxfp4.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/quant/block_common.h"
#include "runtime/quant/float16.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/host_device.h"

namespace tandem::quant {

// F[0..15] = 0, 1, 2, 3, 4, 6, 8, 12, then the same negated: bit 3 of the nibble is the sign.
inline constexpr int8_t kMxfp4Doubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                             0, -1, -2, -3, -4, -6, -8, -12};
// The table as two little-endian words (entry k in byte k % 8), for device code.
inline constexpr uint64_t kMxfp4DoubledLow = 0x0C08060403020100ull;
inline constexpr uint64_t kMxfp4DoubledHigh = 0xF4F8FAFCFDFEFF00ull;

TANDEM_HD int Mxfp4DoubledValue(int nibble) {
  const uint64_t word = nibble < 8 ? kMxfp4DoubledLow : kMxfp4DoubledHigh;
  return static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * (nibble & 7))));
}

struct BlockMXFP4 {
  static constexpr GgmlType kType = GgmlType::kMXFP4;
  static constexpr int kElems = kQK;

  uint8_t e;            // E8M0 shared exponent
  uint8_t qs[kQK / 2];  // E2M1 codes, same nibble order as Q4_0
};
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(offsetof(BlockMXFP4, qs) == 1);

TANDEM_HD float DequantizeElement(const BlockMXFP4& b, int j) {
  return static_cast<float>(Mxfp4DoubledValue(Nibble32(b.qs, j))) * E8M0ToF32Half(b.e);
}

TANDEM_HD void DequantizeBlock(const BlockMXFP4& b, float* out) {
  const float d = E8M0ToF32Half(b.e);
  for (int i = 0; i < kQK / 2; ++i) {
    out[i] = static_cast<float>(Mxfp4DoubledValue(b.qs[i] & 0xF)) * d;
    out[i + 16] = static_cast<float>(Mxfp4DoubledValue(b.qs[i] >> 4)) * d;
  }
}

// e from the largest |x| (the exponent that puts it at the top of the E2M1 range, or one above
// when that fits the block better), then the nearest E2M1 value for each element.
void QuantizeBlocks(const float* x, BlockMXFP4* out, int64_t n_blocks);

}  // namespace tandem::quant
