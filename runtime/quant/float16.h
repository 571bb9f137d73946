// Scalar conversions between f32 and the 16-bit and 8-bit float encodings found in GGUF blocks:
// IEEE binary16 (f16), bfloat16 (bf16) and the E8M0 exponent byte of MXFP4 (spec §2.2).
// Pure bit manipulation, so host and device give identical results. C++17, host and device; no
// intrinsics, no tables, no rounding-mode assumptions.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/quant/host_device.h"

namespace tandem::quant {

TANDEM_HD float BitsToF32(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

TANDEM_HD uint32_t F32ToBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
#endif
}

// Exact: every f16 value, subnormals included, is representable in f32. NaN payloads are kept
// (shifted into the top of the f32 mantissa), so a signalling f16 NaN stays signalling.
TANDEM_HD float Fp16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return BitsToF32(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return BitsToF32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa · 2^-24. Both factors are exact in f32 and the product is a
  // normal f32 (>= 2^-24), so one multiply is exact.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return BitsToF32(sign | F32ToBits(magnitude));
}

// Round to nearest, ties to even. Values from 65520 up round to infinity; values below 2^-25 (and
// 2^-25 itself, a tie with zero) round to a signed zero. NaN stays NaN: the top ten payload bits
// are kept and the quiet bit is set when they would all be zero.
TANDEM_HD uint16_t F32ToFp16(float f) {
  const uint32_t bits = F32ToBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {
    if (magnitude == 0x7F800000u) return sign | 0x7C00u;
    const uint32_t payload = (magnitude >> 13) & 0x3FFu;
    return static_cast<uint16_t>(sign | 0x7C00u | (payload != 0 ? payload : 0x200u));
  }
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520: the tie above 65504 is odd
  if (magnitude >= 0x38800000u) {                       // >= 2^-14: a normal f16
    uint32_t half = ((magnitude >> 23) - 112u) << 10 | ((magnitude >> 13) & 0x3FFu);
    const uint32_t rest = magnitude & 0x1FFFu;
    // A carry out of the mantissa correctly bumps the exponent.
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  // Subnormal f16 (or zero): the result is round(value · 2^24) in units of 2^-24.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25 (f32 subnormals included)
  const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  uint32_t half = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

TANDEM_HD float Bf16ToF32(uint16_t b) { return BitsToF32(static_cast<uint32_t>(b) << 16); }

// Round to nearest, ties to even; a NaN is truncated and forced quiet (spec §2.2).
TANDEM_HD uint16_t F32ToBf16(float f) {
  const uint32_t bits = F32ToBits(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Half of the E8M0 scale, 2^(e-128), as ggml computes it: MXFP4's value table is stored doubled
// (spec §2.5), so value = table[nibble] · E8M0ToF32Half(e). e = 255 gives 2^127, not NaN.
TANDEM_HD float E8M0ToF32Half(uint8_t e) {
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : 0x00200000u << e;
  return BitsToF32(bits);
}

}  // namespace tandem::quant
