// Q5_1 quantiser: a least-squares scale and offset for the grid 0..31.
#include "runtime/quant/q5_1.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ5_1* out, int64_t n_blocks) {
  float w[kQK];
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    fit::ImportanceWeights(x, kQK, w);
    const fit::ScaleOffset f = fit::FitAsymmetric(x, w, kQK, 31, /*offset_at_most_zero=*/false);
    out[b].d = F32ToFp16(f.scale);
    out[b].m = F32ToFp16(f.offset);
    const float d = Fp16ToF32(out[b].d);
    const float m = Fp16ToF32(out[b].m);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    for (int i = 0; i < kQK / 2; ++i) {
      const int low = fit::Clamp(fit::NearestInt((x[i] - m) * inverse), 0, 31);
      const int high = fit::Clamp(fit::NearestInt((x[i + 16] - m) * inverse), 0, 31);
      out[b].qs[i] = static_cast<uint8_t>((low & 0xF) | (high & 0xF) << 4);
      qh |= static_cast<uint32_t>(low >> 4) << i | static_cast<uint32_t>(high >> 4) << (i + 16);
    }
    for (int k = 0; k < 4; ++k) out[b].qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

}  // namespace tandem::quant
