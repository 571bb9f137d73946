// Q4_0 quantiser: a least-squares scale for the grid −8..7.
#include "runtime/quant/q4_0.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ4_0* out, int64_t n_blocks) {
  float w[kQK];
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    fit::ImportanceWeights(x, kQK, w);
    out[b].d = F32ToFp16(fit::FitSymmetric(x, w, kQK, -8, 7));
    const float d = Fp16ToF32(out[b].d);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQK / 2; ++i) {
      const int low = fit::Clamp(fit::NearestInt(x[i] * inverse), -8, 7) + 8;
      const int high = fit::Clamp(fit::NearestInt(x[i + 16] * inverse), -8, 7) + 8;
      out[b].qs[i] = static_cast<uint8_t>(low | high << 4);
    }
  }
}

}  // namespace tandem::quant
