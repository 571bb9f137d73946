// f16, bf16 and E8M0 conversions: exhaustive round trips, rounding ties, and an independent oracle
// (the compiler's _Float16) for f32 -> f16 where the compiler has one.
#include "runtime/quant/float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

namespace tandem::quant {
namespace {

float FromBits(uint32_t bits) { return BitsToF32(bits); }

TEST(Fp16, KnownValues) {
  EXPECT_EQ(Fp16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(Fp16ToF32(0xC000), -2.0f);
  EXPECT_EQ(Fp16ToF32(0x3555), 0.333251953125f);
  EXPECT_EQ(Fp16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(Fp16ToF32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(Fp16ToF32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(Fp16ToF32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(Fp16ToF32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToF32(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp16ToF32(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Fp16ToF32(0x7E00)));
  EXPECT_TRUE(std::isnan(Fp16ToF32(0x7C01)));
  EXPECT_EQ(F32ToBits(Fp16ToF32(0x8000)), 0x80000000u);  // −0 keeps its sign
  EXPECT_EQ(F32ToBits(Fp16ToF32(0x0000)), 0u);
}

// Every f16 value, NaNs included, survives f16 -> f32 -> f16 unchanged (NaN payloads are kept).
TEST(Fp16, ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToF32(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    ASSERT_EQ(std::isnan(f), is_nan) << std::hex << h;
    ASSERT_EQ(F32ToFp16(f), h) << std::hex << h;
  }
}

// Exhaustive monotonicity: every f16 value converts to a strictly larger f32 than its predecessor.
TEST(Fp16, ExhaustiveOrderOfPositiveValues) {
  for (uint32_t h = 1; h < 0x7C01; ++h) {
    ASSERT_LT(Fp16ToF32(static_cast<uint16_t>(h - 1)), Fp16ToF32(static_cast<uint16_t>(h)))
        << std::hex << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(F32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie, even below
  EXPECT_EQ(F32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, even above
  EXPECT_EQ(F32ToFp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  EXPECT_EQ(F32ToFp16(-1.0f - 3 * std::ldexp(1.0f, -11)), 0xBC02);
  EXPECT_EQ(F32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(F32ToFp16(65519.996f), 0x7BFF);  // just below the tie with 65536
  EXPECT_EQ(F32ToFp16(65520.0f), 0x7C00);    // the tie goes to the even "65536", i.e. infinity
  EXPECT_EQ(F32ToFp16(1e10f), 0x7C00);
  EXPECT_EQ(F32ToFp16(-1e10f), 0xFC00);
  EXPECT_EQ(F32ToFp16(std::numeric_limits<float>::infinity()), 0x7C00);
}

TEST(Fp16, RoundsIntoSubnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // f16 0x0001
  EXPECT_EQ(F32ToFp16(tiny), 0x0001);
  EXPECT_EQ(F32ToFp16(0.5f * tiny), 0x0000);  // tie with zero: even
  EXPECT_EQ(F32ToFp16(0.5f * tiny * 1.0001f), 0x0001);
  EXPECT_EQ(F32ToFp16(1.5f * tiny), 0x0002);                          // tie 1|2 -> 2
  EXPECT_EQ(F32ToFp16(2.5f * tiny), 0x0002);                          // tie 2|3 -> 2
  EXPECT_EQ(F32ToFp16(std::ldexp(1.0f, -14) - 0.5f * tiny), 0x0400);  // tie 0x3FF|0x400
  EXPECT_EQ(F32ToFp16(std::ldexp(1.0f, -14) - 0.75f * tiny), 0x03FF);
  EXPECT_EQ(F32ToFp16(-0.4f * tiny), 0x8000);
  EXPECT_EQ(F32ToFp16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(Fp16, NanStaysNan) {
  EXPECT_EQ(F32ToFp16(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
  // A signalling f32 NaN whose payload lies below the kept ten bits still maps to a NaN.
  EXPECT_EQ(F32ToFp16(FromBits(0x7F800001u)), 0x7E00);
  EXPECT_EQ(F32ToFp16(FromBits(0xFFC00000u)), 0xFE00);
}

#if defined(__FLT16_MAX__)
// The compiler's _Float16 conversion (libgcc / compiler-rt) is an independent, correctly rounded
// implementation: compare on random bit patterns and on every f32 near the f16 range limits.
TEST(Fp16, MatchesCompilerFloat16) {
  std::mt19937 rng(12345);
  const auto check = [](uint32_t bits) {
    const float f = BitsToF32(bits);
    if (std::isnan(f)) return;
    const _Float16 oracle = static_cast<_Float16>(f);
    uint16_t oracle_bits;
    std::memcpy(&oracle_bits, &oracle, sizeof(oracle_bits));
    ASSERT_EQ(F32ToFp16(f), oracle_bits) << std::hex << bits;
  };
  for (int i = 0; i < 2'000'000; ++i) check(static_cast<uint32_t>(rng()));
  // f32 values between 2^-26 and 2^-13 (subnormal f16 and the first normals) and near 65504.
  for (uint32_t bits = 0x32800000u; bits < 0x39000000u; bits += 97) check(bits);
  for (uint32_t bits = 0x477F0000u; bits < 0x47810000u; ++bits) check(bits);
}
#endif

TEST(Bf16, KnownValuesAndRounding) {
  EXPECT_EQ(Bf16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xC040), -3.0f);
  EXPECT_EQ(F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBf16(FromBits(0x3F808000u)), 0x3F80);  // tie, even below
  EXPECT_EQ(F32ToBf16(FromBits(0x3F818000u)), 0x3F82);  // tie, even above
  EXPECT_EQ(F32ToBf16(FromBits(0x3F808001u)), 0x3F81);  // just above the tie
  EXPECT_EQ(F32ToBf16(FromBits(0x3F807FFFu)), 0x3F80);
  EXPECT_EQ(F32ToBf16(FromBits(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to infinity
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(F32ToBf16(FromBits(0x7F800001u)), 0x7FC0);  // signalling NaN becomes quiet
  EXPECT_EQ(F32ToBf16(FromBits(0xFFC12345u)), 0xFFC1);  // quiet NaN is truncated
}

// Every bf16 value survives bf16 -> f32 -> bf16; NaNs come back quiet with the same sign.
TEST(Bf16, ExhaustiveRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Bf16ToF32(static_cast<uint16_t>(b));
    const bool is_nan = (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
    ASSERT_EQ(std::isnan(f), is_nan) << std::hex << b;
    ASSERT_EQ(F32ToBf16(f), is_nan ? (b | 0x40) : b) << std::hex << b;
  }
}

TEST(E8M0, HalfScaleLikeGgml) {
  EXPECT_EQ(E8M0ToF32Half(128), 1.0f);
  EXPECT_EQ(E8M0ToF32Half(127), 0.5f);
  EXPECT_EQ(E8M0ToF32Half(130), 4.0f);
  EXPECT_EQ(E8M0ToF32Half(2), std::ldexp(1.0f, -126));
  EXPECT_EQ(E8M0ToF32Half(1), std::ldexp(1.0f, -127));  // f32 subnormal 0x00400000
  EXPECT_EQ(F32ToBits(E8M0ToF32Half(1)), 0x00400000u);
  EXPECT_EQ(F32ToBits(E8M0ToF32Half(0)), 0x00200000u);   // 2^-128
  EXPECT_EQ(E8M0ToF32Half(255), std::ldexp(1.0f, 127));  // finite, not NaN
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(E8M0ToF32Half(static_cast<uint8_t>(e)), std::ldexp(1.0f, e - 128)) << e;
  }
}

}  // namespace
}  // namespace tandem::quant
