// IQ4_NL quantiser: a least-squares codebook scale, nearest codebook entry per element.
#include "runtime/quant/iq4_nl.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockIQ4NL* out, int64_t n_blocks) {
  float w[kQK];
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    fit::ImportanceWeights(x, kQK, w);
    out[b].d = F32ToFp16(fit::FitCodebook(x, w, kQK, kIq4Codebook));
    const float d = Fp16ToF32(out[b].d);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQK / 2; ++i) {
      // With d = 0 every value is 0 whatever the index; index 8 (K = 1) is the nearest to 0.
      const int low = fit::NearestCodebookIndex(kIq4Codebook, x[i] * inverse);
      const int high = fit::NearestCodebookIndex(kIq4Codebook, x[i + 16] * inverse);
      out[b].qs[i] = static_cast<uint8_t>(low | high << 4);
    }
  }
}

}  // namespace tandem::quant
