// Q2_K quantiser and bit packing.
#include "runtime/quant/q2_k.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ2K* out, int64_t n_blocks) {
  fit::AsymmetricSuperBlock sb;
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    fit::FitAsymmetricSuperBlock(x, 16, 16, /*qmax=*/3, /*code_max=*/15, &sb);
    BlockQ2K& block = out[b];
    block.d = sb.d;
    block.dmin = sb.dmin;
    for (int j = 0; j < 16; ++j)
      block.scales[j] = static_cast<uint8_t>(sb.scale[j] | sb.min[j] << 4);
    for (int i = 0; i < kQK_K / 4; ++i) block.qs[i] = 0;
    for (int e = 0; e < kQK_K; ++e) {
      const int run = (e & 127) >> 5;
      block.qs[32 * (e >> 7) + (e & 31)] |= static_cast<uint8_t>(sb.q[e] << (2 * run));
    }
  }
}

}  // namespace tandem::quant
