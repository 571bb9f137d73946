// Q5_K quantiser and bit packing.
#include "runtime/quant/q5_k.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ5K* out, int64_t n_blocks) {
  fit::AsymmetricSuperBlock sb;
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    fit::FitAsymmetricSuperBlock(x, 8, 32, /*qmax=*/31, /*code_max=*/63, &sb);
    BlockQ5K& block = out[b];
    block.d = sb.d;
    block.dmin = sb.dmin;
    PackScaleMinK4(sb.scale, sb.min, block.scales);
    for (int l = 0; l < 32; ++l) block.qh[l] = 0;
    for (int pair = 0; pair < 4; ++pair) {
      for (int l = 0; l < 32; ++l) {
        const int q_lo = sb.q[64 * pair + l];
        const int q_hi = sb.q[64 * pair + 32 + l];
        block.qs[32 * pair + l] = static_cast<uint8_t>((q_lo & 0xF) | (q_hi & 0xF) << 4);
        block.qh[l] |=
            static_cast<uint8_t>((q_lo >> 4) << (2 * pair) | (q_hi >> 4) << (2 * pair + 1));
      }
    }
  }
}

}  // namespace tandem::quant
