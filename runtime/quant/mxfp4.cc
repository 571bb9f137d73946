// MXFP4 quantiser: the shared exponent from the largest magnitude, nearest E2M1 value per element.
#include "runtime/quant/mxfp4.h"

#include <cmath>

#include "runtime/quant/quantize_fit.h"

namespace tandem::quant {
namespace {

// The nibble whose doubled E2M1 value is nearest to v (v in doubled units); ties go to the
// smaller magnitude, which has the even mantissa.
int NearestDoubledE2M1(float v) {
  const float magnitude = std::fabs(v);
  // Midpoints between the doubled magnitudes 0, 1, 2, 3, 4, 6, 8, 12.
  constexpr float kMidpoints[7] = {0.5f, 1.5f, 2.5f, 3.5f, 5.0f, 7.0f, 10.0f};
  int code = 0;
  for (int k = 0; k < 7; ++k) {
    if (magnitude > kMidpoints[k]) code = k + 1;
  }
  return code == 0 ? 0 : (v < 0 ? code | 8 : code);
}

// Fills the block's nibbles for exponent e; returns the squared error.
float EncodeWithExponent(const float* x, uint8_t e, BlockMXFP4* block) {
  block->e = e;
  const float half_scale = E8M0ToF32Half(e);
  const float inverse = 1.0f / half_scale;
  float error = 0.0f;
  for (int i = 0; i < kQK / 2; ++i) {
    const int low = NearestDoubledE2M1(x[i] * inverse);
    const int high = NearestDoubledE2M1(x[i + 16] * inverse);
    block->qs[i] = static_cast<uint8_t>(low | high << 4);
    const float diff_low = static_cast<float>(kMxfp4Doubled[low]) * half_scale - x[i];
    const float diff_high = static_cast<float>(kMxfp4Doubled[high]) * half_scale - x[i + 16];
    error += diff_low * diff_low + diff_high * diff_high;
  }
  return error;
}

}  // namespace

void QuantizeBlocks(const float* x, BlockMXFP4* out, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    if (amax == 0.0f) {
      EncodeWithExponent(x, 0, &out[b]);
      continue;
    }
    // 2^(e−127) = 2^(floor(log2 amax) − 2) puts amax at 4..8 in E2M1 units: values between 6 and
    // 8 clip, so the next exponent up (amax at 2..4) is tried too and the better one kept.
    // e >= 2 keeps 1 / E8M0ToF32Half(e) finite; blocks that small round to zero anyway.
    const int e = fit::Clamp(static_cast<int>(std::floor(std::log2(amax))) - 2 + 127, 2, 253);
    const float error = EncodeWithExponent(x, static_cast<uint8_t>(e), &out[b]);
    BlockMXFP4 alternative;
    if (EncodeWithExponent(x, static_cast<uint8_t>(e + 1), &alternative) < error)
      out[b] = alternative;
  }
}

}  // namespace tandem::quant
