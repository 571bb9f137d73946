// Q3_K quantiser and bit packing.
#include "runtime/quant/q3_k.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ3K* out, int64_t n_blocks) {
  fit::SymmetricSuperBlock sb;
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    fit::FitSymmetricSuperBlock(x, 16, 16, /*qmin=*/-4, /*qmax=*/3, /*code_min=*/-32,
                                /*code_max=*/31, &sb);
    BlockQ3K& block = out[b];
    block.d = sb.d;
    for (int k = 0; k < 12; ++k) block.scales[k] = 0;
    for (int j = 0; j < 16; ++j) {
      const int biased = sb.scale[j] + 32;  // 0..63
      block.scales[j & 7] |= static_cast<uint8_t>((biased & 0xF) << (4 * (j >> 3)));
      block.scales[8 + (j & 3)] |= static_cast<uint8_t>((biased >> 4) << (2 * (j >> 2)));
    }
    for (int i = 0; i < kQK_K / 8; ++i) block.hmask[i] = 0;
    for (int i = 0; i < kQK_K / 4; ++i) block.qs[i] = 0;
    for (int e = 0; e < kQK_K; ++e) {
      // q = low2 − 4 when the high bit is clear, low2 when set: both are (q + 4) in 0..7.
      const int biased = sb.q[e] + 4;
      const int run = (e & 127) >> 5;
      block.qs[32 * (e >> 7) + (e & 31)] |= static_cast<uint8_t>((biased & 3) << (2 * run));
      block.hmask[e & 31] |= static_cast<uint8_t>((biased >> 2) << (e >> 5));
    }
  }
}

}  // namespace tandem::quant
