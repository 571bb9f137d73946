// IQ4_XS quantiser and bit packing.
#include "runtime/quant/iq4_xs.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockIQ4XS* out, int64_t n_blocks) {
  float w[kQK_K];
  float scales[8];
  int codes[8];
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    for (int j = 0; j < 8; ++j) {
      fit::ImportanceWeights(x + 32 * j, 32, w + 32 * j);
      scales[j] = fit::FitCodebook(x + 32 * j, w + 32 * j, 32, kIq4Codebook);
    }
    BlockIQ4XS& block = out[b];
    block.d = fit::QuantizeSignedScales(scales, 8, -32, 31, codes);
    const float d = Fp16ToF32(block.d);
    block.scales_h = 0;
    for (int k = 0; k < 4; ++k) block.scales_l[k] = 0;
    for (int j = 0; j < 8; ++j) {
      const int biased = codes[j] + 32;  // 0..63
      block.scales_l[j >> 1] |= static_cast<uint8_t>((biased & 0xF) << (4 * (j & 1)));
      block.scales_h = static_cast<uint16_t>(block.scales_h | (biased >> 4) << (2 * j));
      const float dl = d * static_cast<float>(codes[j]);
      const float inverse = dl != 0.0f ? 1.0f / dl : 0.0f;
      const float* xj = x + 32 * j;
      for (int i = 0; i < 16; ++i) {
        const int low = fit::NearestCodebookIndex(kIq4Codebook, xj[i] * inverse);
        const int high = fit::NearestCodebookIndex(kIq4Codebook, xj[i + 16] * inverse);
        block.qs[16 * j + i] = static_cast<uint8_t>(low | high << 4);
      }
    }
  }
}

}  // namespace tandem::quant
