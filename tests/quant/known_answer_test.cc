// Known answers: blocks built byte by byte from the spec (gguf-and-quants.md §2), with the expected
// values worked out by hand in the comments. Each check goes through both the per-element decoder
// and the whole-block decoder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/quant/blocks.h"

namespace tandem::quant {
namespace {

constexpr uint16_t kF16Quarter = 0x3400;   // 0.25
constexpr uint16_t kF16Half = 0x3800;      // 0.5
constexpr uint16_t kF16One = 0x3C00;       // 1.0
constexpr uint16_t kF16MinusOne = 0xBC00;  // -1.0
constexpr uint16_t kF16Two = 0x4000;       // 2.0

// Decodes element e both ways; they must agree exactly.
template <typename Block>
float Decode(const Block& b, int e) {
  float all[Block::kElems];
  DequantizeBlock(b, all);
  const float one = DequantizeElement(b, e);
  EXPECT_EQ(one, all[e]) << "element " << e;
  return all[e];
}

TEST(KnownAnswer, Q8_0) {
  BlockQ8_0 b{};
  b.d = kF16Half;
  b.qs[3] = -7;
  b.qs[31] = 127;
  EXPECT_EQ(Decode(b, 3), -3.5f);
  EXPECT_EQ(Decode(b, 31), 63.5f);
  EXPECT_EQ(Decode(b, 0), 0.0f);
}

TEST(KnownAnswer, Q4_0NibbleOrderAndOffset) {
  BlockQ4_0 b{};
  b.d = kF16Half;
  b.qs[0] = 0x3A;                   // element 0 = low nibble 10, element 16 = high nibble 3
  b.qs[15] = 0xF0;                  // element 15 = 0, element 31 = 15
  EXPECT_EQ(Decode(b, 0), 1.0f);    // (10 − 8)·0.5
  EXPECT_EQ(Decode(b, 16), -2.5f);  // (3 − 8)·0.5
  EXPECT_EQ(Decode(b, 15), -4.0f);  // (0 − 8)·0.5
  EXPECT_EQ(Decode(b, 31), 3.5f);   // (15 − 8)·0.5
}

TEST(KnownAnswer, Q4_1ScaleAndOffset) {
  BlockQ4_1 b{};
  b.d = kF16Quarter;
  b.m = kF16MinusOne;
  b.qs[2] = 0x5C;
  EXPECT_EQ(Decode(b, 2), 2.0f);    // 12·0.25 − 1
  EXPECT_EQ(Decode(b, 18), 0.25f);  // 5·0.25 − 1
  EXPECT_EQ(Decode(b, 3), -1.0f);   // 0·0.25 − 1
}

TEST(KnownAnswer, Q5_0HighBitsAsLittleEndianWord) {
  BlockQ5_0 b{};
  b.d = kF16One;
  const uint8_t qh[4] = {0x01, 0x00, 0x01, 0x80};  // LE u32 0x80010001: bits 0, 16, 31
  std::memcpy(b.qh, qh, 4);
  b.qs[0] = 0x21;
  b.qs[15] = 0xF3;
  EXPECT_EQ(Decode(b, 0), 1.0f);     // (1 | 16) − 16
  EXPECT_EQ(Decode(b, 16), 2.0f);    // (2 | 16) − 16
  EXPECT_EQ(Decode(b, 15), -13.0f);  // 3 − 16, bit 15 clear
  EXPECT_EQ(Decode(b, 31), 15.0f);   // (15 | 16) − 16
  EXPECT_EQ(Decode(b, 1), -16.0f);   // 0 − 16
}

TEST(KnownAnswer, Q5_1) {
  BlockQ5_1 b{};
  b.d = kF16Half;
  b.m = kF16Two;
  const uint8_t qh[4] = {0x02, 0x00, 0x01, 0x00};  // LE u32 0x00010002: bits 1 and 16
  std::memcpy(b.qh, qh, 4);
  b.qs[0] = 0x90;
  b.qs[1] = 0x07;
  EXPECT_EQ(Decode(b, 1), 13.5f);   // (7 | 16)·0.5 + 2
  EXPECT_EQ(Decode(b, 17), 2.0f);   // 0·0.5 + 2
  EXPECT_EQ(Decode(b, 0), 2.0f);    // 0·0.5 + 2, bit 0 clear
  EXPECT_EQ(Decode(b, 16), 14.5f);  // (9 | 16)·0.5 + 2
}

TEST(KnownAnswer, IQ4NLCodebook) {
  EXPECT_EQ(Iq4CodebookValue(0), -127);
  EXPECT_EQ(Iq4CodebookValue(7), -10);
  EXPECT_EQ(Iq4CodebookValue(8), 1);
  EXPECT_EQ(Iq4CodebookValue(15), 113);
  for (int k = 0; k < 16; ++k) EXPECT_EQ(Iq4CodebookValue(k), kIq4Codebook[k]) << k;

  BlockIQ4NL b{};
  b.d = kF16Half;
  b.qs[0] = 0xF0;
  b.qs[5] = 0x78;
  EXPECT_EQ(Decode(b, 0), -63.5f);  // 0.5·K[0] = 0.5·−127
  EXPECT_EQ(Decode(b, 16), 56.5f);  // 0.5·K[15] = 0.5·113
  EXPECT_EQ(Decode(b, 5), 0.5f);    // 0.5·K[8] = 0.5·1
  EXPECT_EQ(Decode(b, 21), -5.0f);  // 0.5·K[7] = 0.5·−10
}

TEST(KnownAnswer, MXFP4TableAndExponent) {
  for (int k = 0; k < 16; ++k) EXPECT_EQ(Mxfp4DoubledValue(k), kMxfp4Doubled[k]) << k;

  BlockMXFP4 b{};
  b.e = 128;  // 2^(128−127) = 2, and the doubled table already holds 2·E2M1, so the factor is 1
  b.qs[0] = 0xF7;
  b.qs[3] = 0x08;
  EXPECT_EQ(Decode(b, 0), 12.0f);    // E2M1 0b0111 = 6.0, times 2
  EXPECT_EQ(Decode(b, 16), -12.0f);  // 0b1111 = −6.0, times 2
  EXPECT_EQ(Decode(b, 3), 0.0f);     // 0b1000 = −0
  EXPECT_EQ(Decode(b, 19), 0.0f);

  b.e = 127;  // scale 2^0 = 1: plain E2M1 values
  b.qs[1] = 0x9A;
  EXPECT_EQ(Decode(b, 1), -1.0f);   // 0b1010 = −1.0
  EXPECT_EQ(Decode(b, 17), -0.5f);  // 0b1001 = −0.5
  EXPECT_EQ(Decode(b, 0), 6.0f);

  b.e = 1;  // 2^(1−127): the subnormal half-scale path
  EXPECT_EQ(Decode(b, 0), 12.0f * std::ldexp(1.0f, -127));
}

TEST(KnownAnswer, Q2KScalesMinsAndTwoBitRuns) {
  BlockQ2K b{};
  b.d = kF16Half;
  b.dmin = kF16Quarter;
  b.scales[0] = 0x23;  // sub-block 0: scale 3, min 2
  b.scales[2] = 0x11;  // sub-block 2: scale 1, min 1
  b.scales[4] = 0x11;
  b.scales[6] = 0x11;
  b.scales[9] = 0x1F;  // sub-block 9: scale 15, min 1
  b.qs[0] = 0xE4;      // bit pairs 0..3 = 0, 1, 2, 3 for elements 0, 32, 64, 96
  b.qs[53] = 0x02;     // element 128 + 21 = 149 (sub-block 9, second half, run 0, l = 21)
  EXPECT_EQ(Decode(b, 0), -0.5f);     // 0.5·3·0 − 0.25·2
  EXPECT_EQ(Decode(b, 32), 0.25f);    // 0.5·1·1 − 0.25·1
  EXPECT_EQ(Decode(b, 64), 0.75f);    // 0.5·1·2 − 0.25
  EXPECT_EQ(Decode(b, 96), 1.25f);    // 0.5·1·3 − 0.25
  EXPECT_EQ(Decode(b, 149), 14.75f);  // 0.5·15·2 − 0.25·1
  EXPECT_EQ(Decode(b, 16), 0.0f);     // sub-block 1: scale 0, min 0
}

// Scales 0, 5, 10, 15 are 33, 0, 63, 40 (biased by 32: +1, −32, +31, +8); all others 32 (= 0).
BlockQ3K HandBuiltQ3K() {
  BlockQ3K b{};
  b.d = kF16One;
  // Low nibbles: byte j holds scale j (low half) and scale j+8 (high half).
  b.scales[0] = 0x01;  // scale 0: low 1; scale 8: low 0
  b.scales[2] = 0xF0;  // scale 2: 0; scale 10: low 15
  b.scales[7] = 0x80;  // scale 7: 0; scale 15: low 8
  // Top two bits: byte 8+k holds scales k, k+4, k+8, k+12 at bits 0, 2, 4, 6. Everything has top
  // bits 2 (10b) except scale 5 (0) and scale 10 (3).
  b.scales[8] = 0xAA;   // 2, 2, 2, 2
  b.scales[9] = 0xA2;   // scale 1: 2, scale 5: 0, scale 9: 2, scale 13: 2
  b.scales[10] = 0xBA;  // scale 2: 2, scale 6: 2, scale 10: 3, scale 14: 2
  b.scales[11] = 0xAA;
  return b;
}

TEST(KnownAnswer, Q3KScaleUnpacking) {
  const BlockQ3K b = HandBuiltQ3K();
  EXPECT_EQ(Q3KScale(b.scales, 0), 1);
  EXPECT_EQ(Q3KScale(b.scales, 5), -32);
  EXPECT_EQ(Q3KScale(b.scales, 10), 31);
  EXPECT_EQ(Q3KScale(b.scales, 15), 8);
  for (int j : {1, 2, 3, 4, 6, 7, 8, 9, 11, 12, 13, 14}) EXPECT_EQ(Q3KScale(b.scales, j), 0) << j;
}

TEST(KnownAnswer, Q3KSetHighBitMeansNoSubtraction) {
  BlockQ3K b = HandBuiltQ3K();
  b.qs[0] = 0x03;      // element 0: low bits 3
  b.hmask[0] = 0x01;   // element 0: high bit set -> q = 3
  b.qs[16] = 0x10;     // element 80 (half 0, run 2, l = 16): low bits 1
                       // hmask[16] bit 2 clear -> q = 1 − 4 = −3
  b.qs[63] = 0x80;     // element 255 (half 1, run 3, l = 31): low bits 2
  b.hmask[31] = 0x80;  // element 255: bit 7 set -> q = 2
  // element 165 (half 1, run 1, l = 5): low bits 0, hmask[5] bit 5 clear -> q = −4
  EXPECT_EQ(Decode(b, 0), 3.0f);       // 1·1·3
  EXPECT_EQ(Decode(b, 80), 96.0f);     // 1·(−32)·(−3)
  EXPECT_EQ(Decode(b, 165), -124.0f);  // 1·31·(−4)
  EXPECT_EQ(Decode(b, 255), 16.0f);    // 1·8·2
  EXPECT_EQ(Q3KQuant(b, 1), -4);       // all bits clear: the most negative quant
}

// Scales 1, 2, 3, 4, 33, 50, 63, 17 and mins 5, 6, 7, 8, 20, 40, 48, 60 packed by hand.
constexpr uint8_t kK4Scales[12] = {
    0x81, 0xC2, 0xC3, 0x44,  // sc0..3, bits 6–7 = bits 4–5 of sc4..7 (2, 3, 3, 1)
    0x45, 0x86, 0xC7, 0xC8,  // m0..3, bits 6–7 = bits 4–5 of m4..7 (1, 2, 3, 3)
    0x41, 0x82, 0x0F, 0xC1,  // low nibbles of sc4..7 (1, 2, 15, 1), high of m4..7 (4, 8, 0, 12)
};
constexpr int kK4ScaleValues[8] = {1, 2, 3, 4, 33, 50, 63, 17};
constexpr int kK4MinValues[8] = {5, 6, 7, 8, 20, 40, 48, 60};

TEST(KnownAnswer, K4ScaleMinPacking) {
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    ScaleMinK4(kK4Scales, j, &scale, &min);
    EXPECT_EQ(scale, kK4ScaleValues[j]) << j;
    EXPECT_EQ(min, kK4MinValues[j]) << j;
  }
  uint8_t packed[12];
  PackScaleMinK4(kK4ScaleValues, kK4MinValues, packed);
  for (int k = 0; k < 12; ++k) EXPECT_EQ(packed[k], kK4Scales[k]) << k;
}

TEST(KnownAnswer, Q4K) {
  BlockQ4K b{};
  b.d = kF16Half;
  b.dmin = kF16One;
  std::memcpy(b.scales, kK4Scales, 12);
  b.qs[0] = 0x0B;    // element 0: sub-block 0, low nibble 11
  b.qs[7] = 0xA0;    // element 39: sub-block 1, high nibble 10
  b.qs[67] = 0xF0;   // element 163: sub-block 5, high nibble of qs[64 + 3]
  b.qs[127] = 0x09;  // element 223: sub-block 6, low nibble 9; element 255: sub-block 7, 0
  EXPECT_EQ(Decode(b, 0), 0.5f);      // 0.5·1·11 − 1·5
  EXPECT_EQ(Decode(b, 39), 4.0f);     // 0.5·2·10 − 6
  EXPECT_EQ(Decode(b, 163), 335.0f);  // 0.5·50·15 − 40
  EXPECT_EQ(Decode(b, 223), 235.5f);  // 0.5·63·9 − 48
  EXPECT_EQ(Decode(b, 255), -60.0f);  // 0.5·17·0 − 60
}

TEST(KnownAnswer, Q5KHighBits) {
  BlockQ5K b{};
  b.d = kF16Half;
  b.dmin = kF16One;
  std::memcpy(b.scales, kK4Scales, 12);
  b.qs[0] = 0x0B;
  b.qs[7] = 0xA0;
  b.qs[127] = 0x09;
  b.qh[7] = 0x02;                     // element 39 = 32·1 + 7: bit 1 of qh[7]
  b.qh[31] = 0xC0;                    // elements 223 and 255: bits 6 and 7 of qh[31]
  EXPECT_EQ(Decode(b, 0), 0.5f);      // 0.5·1·11 − 5, high bit clear
  EXPECT_EQ(Decode(b, 39), 20.0f);    // 0.5·2·(10 + 16) − 6
  EXPECT_EQ(Decode(b, 223), 739.5f);  // 0.5·63·(9 + 16) − 48
  EXPECT_EQ(Decode(b, 255), 76.0f);   // 0.5·17·(0 + 16) − 60
  EXPECT_EQ(Decode(b, 7), -5.0f);     // sub-block 0, q = 0: −1·5 (qh[7] bit 0 clear)
}

TEST(KnownAnswer, Q6KLowAndHighBitLayout) {
  BlockQ6K b{};
  b.d = kF16Half;
  b.scales[0] = 2;
  b.scales[3] = -3;
  b.scales[4] = 1;
  b.scales[9] = 7;
  b.scales[15] = -128;
  b.ql[0] = 0x05;    // element 0 (run 0): low nibble 5
  b.qh[0] = 0x02;    //   bits 0–1 = 2 -> q = (5 | 32) − 32 = 5
  b.ql[48] = 0x0C;   // element 48 (run 1, l = 16): low nibble of ql[32 + 16] = 12, qh[16] = 0
                     //   -> q = 12 − 32 = −20
  b.ql[6] = 0xA0;    // element 70 (run 2, l = 6): high nibble of ql[6] = 10
  b.qh[6] = 0x20;    //   bits 4–5 = 2 -> q = (10 | 32) − 32 = 10
  b.ql[86] = 0x0F;   // element 150 (half 1, run 0, l = 22): low nibble of ql[64 + 22] = 15
  b.qh[54] = 0x03;   //   bits 0–1 of qh[32 + 22] = 3 -> q = 63 − 32 = 31
  b.ql[127] = 0x30;  // element 255 (half 1, run 3, l = 31): high nibble of ql[64 + 32 + 31] = 3
  b.qh[63] = 0x40;   //   bits 6–7 of qh[32 + 31] = 1 -> q = (3 | 16) − 32 = −13
  EXPECT_EQ(Decode(b, 0), 5.0f);      // 0.5·2·5
  EXPECT_EQ(Decode(b, 48), 30.0f);    // 0.5·(−3)·(−20)
  EXPECT_EQ(Decode(b, 70), 5.0f);     // 0.5·1·10
  EXPECT_EQ(Decode(b, 150), 108.5f);  // 0.5·7·31
  EXPECT_EQ(Decode(b, 255), 832.0f);  // 0.5·(−128)·(−13)
  EXPECT_EQ(Q6KQuant(b, 1), -32);     // all bits clear
}

TEST(KnownAnswer, Q8KDecode) {
  BlockQ8K b{};
  b.d = -0.25f;
  b.qs[7] = -100;
  b.qs[200] = 127;
  EXPECT_EQ(Decode(b, 7), 25.0f);
  EXPECT_EQ(Decode(b, 200), -31.75f);
}

// ggml's Q8_K convention: the largest-magnitude element maps to −127, so d < 0 when it is positive.
TEST(KnownAnswer, Q8KQuantiserSignConventionAndSums) {
  float x[kQK_K] = {};
  x[10] = 2.0f;
  x[20] = -1.0f;
  x[40] = 1.0f / 127.0f;  // rounds to −0.5 → 0 (half to even)
  BlockQ8K b;
  QuantizeBlocks(x, &b, 1);
  EXPECT_EQ(b.d, 1.0f / -63.5f);
  EXPECT_EQ(b.qs[10], -127);
  EXPECT_EQ(b.qs[20], 64);  // 63.5 rounds half to even
  EXPECT_EQ(b.qs[40], 0);
  EXPECT_EQ(b.bsums[0], -127);
  EXPECT_EQ(b.bsums[1], 64);
  for (int k = 2; k < 16; ++k) EXPECT_EQ(b.bsums[k], 0) << k;
}

TEST(KnownAnswer, IQ4XSScalesHighAndLow) {
  BlockIQ4XS b{};
  b.d = kF16Half;
  // ls = 33, 32, 32, 0, 32, 32, 63, 17 (−32: +1, 0, 0, −32, 0, 0, +31, −15).
  b.scales_l[0] = 0x01;  // ls0 low 1, ls1 low 0
  b.scales_l[1] = 0x00;  // ls2 low 0, ls3 low 0
  b.scales_l[2] = 0x00;
  b.scales_l[3] = 0x1F;  // ls6 low 15, ls7 low 1
  b.scales_h = 0x7A2A;   // top bits 2, 2, 2, 0, 2, 2, 3, 1 at bit pairs 0..7
  EXPECT_EQ(Iq4XsScale(b, 0), 1);
  EXPECT_EQ(Iq4XsScale(b, 1), 0);
  EXPECT_EQ(Iq4XsScale(b, 3), -32);
  EXPECT_EQ(Iq4XsScale(b, 6), 31);
  EXPECT_EQ(Iq4XsScale(b, 7), -15);
  b.qs[0] = 0x0F;    // element 0: K[15] = 113
  b.qs[52] = 0x00;   // element 116 = 32·3 + 20: high nibble of qs[48 + 4] -> K[0] = −127
  b.qs[101] = 0x09;  // element 197 = 32·6 + 5: low nibble of qs[96 + 5] -> K[9] = 13
  b.qs[127] = 0x70;  // element 255: high nibble of qs[112 + 15] -> K[7] = −10
  EXPECT_EQ(Decode(b, 0), 56.5f);      // 0.5·1·113
  EXPECT_EQ(Decode(b, 116), 2032.0f);  // 0.5·(−32)·(−127)
  EXPECT_EQ(Decode(b, 197), 201.5f);   // 0.5·31·13
  EXPECT_EQ(Decode(b, 255), 75.0f);    // 0.5·(−15)·(−10)
}

TEST(KnownAnswer, FloatRows) {
  const uint16_t f16[3] = {0x3C00, 0xC000, 0x0001};
  const uint16_t bf16[3] = {0x3F80, 0xC040, 0x0000};
  float out[3];
  DequantizeRowF16(f16, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  DequantizeRowBF16(bf16, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 0.0f);
  uint16_t back[3];
  QuantizeRowBF16(out, back, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], bf16[i]);
  DequantizeRowF16(f16, out, 3);
  QuantizeRowF16(out, back, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], f16[i]);
}

}  // namespace
}  // namespace tandem::quant
