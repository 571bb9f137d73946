// Q4_K quantiser, bit packing, and the 6-bit scale/min packing shared with Q5_K.
#include "runtime/quant/q4_k.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void PackScaleMinK4(const int* scale, const int* min, uint8_t* scales) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>(scale[j] | (scale[j + 4] >> 4) << 6);
    scales[j + 4] = static_cast<uint8_t>(min[j] | (min[j + 4] >> 4) << 6);
    scales[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0xF) | (min[j + 4] & 0xF) << 4);
  }
}

void QuantizeBlocks(const float* x, BlockQ4K* out, int64_t n_blocks) {
  fit::AsymmetricSuperBlock sb;
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    fit::FitAsymmetricSuperBlock(x, 8, 32, /*qmax=*/15, /*code_max=*/63, &sb);
    BlockQ4K& block = out[b];
    block.d = sb.d;
    block.dmin = sb.dmin;
    PackScaleMinK4(sb.scale, sb.min, block.scales);
    for (int pair = 0; pair < 4; ++pair) {
      for (int l = 0; l < 32; ++l) {
        block.qs[32 * pair + l] =
            static_cast<uint8_t>(sb.q[64 * pair + l] | sb.q[64 * pair + 32 + l] << 4);
      }
    }
  }
}

}  // namespace tandem::quant
