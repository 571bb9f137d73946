// Q4_1 quantiser: a least-squares scale and offset for the grid 0..15.
#include "runtime/quant/q4_1.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ4_1* out, int64_t n_blocks) {
  float w[kQK];
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    fit::ImportanceWeights(x, kQK, w);
    const fit::ScaleOffset f = fit::FitAsymmetric(x, w, kQK, 15, /*offset_at_most_zero=*/false);
    out[b].d = F32ToFp16(f.scale);
    out[b].m = F32ToFp16(f.offset);
    const float d = Fp16ToF32(out[b].d);
    const float m = Fp16ToF32(out[b].m);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQK / 2; ++i) {
      const int low = fit::Clamp(fit::NearestInt((x[i] - m) * inverse), 0, 15);
      const int high = fit::Clamp(fit::NearestInt((x[i + 16] - m) * inverse), 0, 15);
      out[b].qs[i] = static_cast<uint8_t>(low | high << 4);
    }
  }
}

}  // namespace tandem::quant
