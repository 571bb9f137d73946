// Q8_0 quantiser: scale from the block's largest magnitude.
#include "runtime/quant/q8_0.h"

#include <cmath>

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ8_0* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    out[b].d = F32ToFp16(amax / 127.0f);
    // Quantise with the stored (f16) scale, so the rounding of d is not added to every element.
    const float d = Fp16ToF32(out[b].d);
    const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kQK; ++j) {
      out[b].qs[j] =
          static_cast<int8_t>(fit::Clamp(static_cast<int>(std::round(x[j] * inverse)), -127, 127));
    }
  }
}

}  // namespace tandem::quant
