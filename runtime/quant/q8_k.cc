// Q8_K quantiser (ggml's sign convention, spec §2.4) with the 16-element sums.
#include "runtime/quant/q8_k.h"

#include <cmath>

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ8K* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    BlockQ8K& block = out[b];
    float extreme = 0.0f;  // the element of largest magnitude, sign kept
    for (int e = 0; e < kQK_K; ++e) {
      if (std::fabs(x[e]) > std::fabs(extreme)) extreme = x[e];
    }
    if (extreme == 0.0f) {
      block.d = 0.0f;
      for (int e = 0; e < kQK_K; ++e) block.qs[e] = 0;
    } else {
      const float inverse_scale = -127.0f / extreme;
      for (int e = 0; e < kQK_K; ++e) {
        block.qs[e] =
            static_cast<int8_t>(fit::Clamp(fit::NearestInt(inverse_scale * x[e]), -127, 127));
      }
      block.d = 1.0f / inverse_scale;
    }
    for (int k = 0; k < kQK_K / 16; ++k) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += block.qs[16 * k + i];
      block.bsums[k] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace tandem::quant
