// Q6_K quantiser and bit packing.
#include "runtime/quant/q6_k.h"

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {

void QuantizeBlocks(const float* x, BlockQ6K* out, int64_t n_blocks) {
  fit::SymmetricSuperBlock sb;
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK_K) {
    fit::FitSymmetricSuperBlock(x, 16, 16, /*qmin=*/-32, /*qmax=*/31, /*code_min=*/-128,
                                /*code_max=*/127, &sb);
    BlockQ6K& block = out[b];
    block.d = sb.d;
    for (int j = 0; j < 16; ++j) block.scales[j] = static_cast<int8_t>(sb.scale[j]);
    for (int i = 0; i < kQK_K / 4; ++i) block.qh[i] = 0;
    for (int e = 0; e < kQK_K; ++e) {
      const int biased = sb.q[e] + 32;  // 0..63
      const int half = e >> 7;
      const int run = (e & 127) >> 5;
      const int l = e & 31;
      uint8_t& low_byte = block.ql[64 * half + 32 * (run & 1) + l];
      if (run < 2) {
        low_byte = static_cast<uint8_t>((low_byte & 0xF0) | (biased & 0xF));
      } else {
        low_byte = static_cast<uint8_t>((low_byte & 0x0F) | (biased & 0xF) << 4);
      }
      block.qh[32 * half + l] |= static_cast<uint8_t>((biased >> 4) << (2 * run));
    }
  }
}

}  // namespace tandem::quant
