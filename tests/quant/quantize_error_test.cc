// Quantise -> decode error of every block format on fresh random data, against bounds set from
// measurement. Each bound comment gives this implementation's measured relative RMS error and, for
// comparison, that of ggml's own quantisers (ggml-org/ggml d99724f, ggml_quantize_chunk without an
// importance matrix) on the same kind of data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/quant/blocks.h"
#include "tests/quant/block_types.h"

namespace tandem::quant {
namespace {

struct ErrorBounds {
  double gaussian;  // N(0, 1)
  double outliers;  // N(0, 1) with element 7 of every 32 scaled by 10
};

ErrorBounds BoundsFor(GgmlType type) {
  switch (type) {
    // clang-format off
    //                               gaussian  outliers    measured (ours, ggml): gaussian | outliers
    case GgmlType::kQ8_0:   return {0.0060,   0.0122};  // 0.00534, 0.00535 | 0.0111, 0.0111
    case GgmlType::kQ4_0:   return {0.090,    0.19};    // 0.0826, 0.0859   | 0.172, 0.173
    case GgmlType::kQ4_1:   return {0.078,    0.11};    // 0.0707, 0.0781   | 0.0990, 0.109
    case GgmlType::kQ5_0:   return {0.045,    0.097};   // 0.0405, 0.0427   | 0.0878, 0.0880
    case GgmlType::kQ5_1:   return {0.038,    0.053};   // 0.0341, 0.0378   | 0.0478, 0.0526
    case GgmlType::kQ2_K:   return {0.30,     0.31};    // 0.277, 0.296     | 0.286, 0.330
    case GgmlType::kQ3_K:   return {0.16,     0.23};    // 0.148, 0.151     | 0.208, 0.209
    case GgmlType::kQ4_K:   return {0.079,    0.112};   // 0.0719, 0.0713   | 0.102, 0.102
    case GgmlType::kQ5_K:   return {0.040,    0.057};   // 0.0359, 0.0361   | 0.0514, 0.0513
    case GgmlType::kQ6_K:   return {0.019,    0.034};   // 0.0168, 0.0177   | 0.0307, 0.0314
    case GgmlType::kQ8_K:   return {0.0077,   0.023};   // 0.00695, (none)  | 0.0209, (none)
    case GgmlType::kIQ4_NL: return {0.082,    0.14};    // 0.0748, 0.0761   | 0.128, 0.129
    case GgmlType::kIQ4_XS: return {0.083,    0.141};   // 0.0755, 0.0767   | 0.129, 0.130
    case GgmlType::kMXFP4:  return {0.123,    0.187};   // 0.112, 0.115     | 0.170, 0.174
    // clang-format on
    default:
      ADD_FAILURE() << "no bounds for " << GetTypeInfo(type).name;
      return {0, 0};
  }
}

// 131072 elements: 4096 blocks of 32 or 512 super-blocks of 256.
constexpr int64_t kElements = 1 << 17;

template <typename Block>
std::vector<float> RoundTrip(const std::vector<float>& x) {
  const int64_t n_blocks = static_cast<int64_t>(x.size()) / Block::kElems;
  std::vector<Block> blocks(n_blocks);
  QuantizeBlocks(x.data(), blocks.data(), n_blocks);
  std::vector<float> y(x.size(), NAN);  // poisoned: every element must be written
  for (int64_t b = 0; b < n_blocks; ++b) DequantizeBlock(blocks[b], y.data() + b * Block::kElems);
  return y;
}

template <typename Block>
class QuantizeErrorTest : public ::testing::Test {};
TYPED_TEST_SUITE(QuantizeErrorTest, BlockTypes, BlockTypeNames);

TYPED_TEST(QuantizeErrorTest, GaussianData) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const std::vector<float> x = GaussianData(seed, kElements);
  const double error = RelativeRmsError(x, RoundTrip<TypeParam>(x));
  EXPECT_LT(error, BoundsFor(TypeParam::kType).gaussian);
}

TYPED_TEST(QuantizeErrorTest, GaussianDataWithOutliers) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::vector<float> x = GaussianData(seed, kElements);
  for (int64_t i = 7; i < kElements; i += 32) x[i] *= 10.0f;
  const double error = RelativeRmsError(x, RoundTrip<TypeParam>(x));
  EXPECT_LT(error, BoundsFor(TypeParam::kType).outliers);
}

// Weight-sized data (RMS 0.02) pushes the K-quant super-block scales towards the f16 subnormal
// range (Q6_K's factor is about 1e-5, an f16 subnormal); measured errors are within 0.2% of the
// unit-scale ones.
TYPED_TEST(QuantizeErrorTest, WeightScaleData) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::vector<float> x = GaussianData(seed, kElements);
  for (float& v : x) v *= 0.02f;
  const double error = RelativeRmsError(x, RoundTrip<TypeParam>(x));
  EXPECT_LT(error, 1.1 * BoundsFor(TypeParam::kType).gaussian);
}

TYPED_TEST(QuantizeErrorTest, AllZeroBlockDecodesToZeros) {
  const std::vector<float> x(2 * TypeParam::kElems, 0.0f);
  const std::vector<float> y = RoundTrip<TypeParam>(x);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], 0.0f) << i;
}

// Degenerate blocks: constant, a single non-zero element, a single negative element. Decoded values
// must be finite and close.
TYPED_TEST(QuantizeErrorTest, DegenerateBlocks) {
  const int k = TypeParam::kElems;
  std::vector<float> x(3 * k, 0.0f);
  for (int i = 0; i < k; ++i) x[i] = 0.7f;
  x[k + 5] = 3.0f;
  x[2 * k + k - 1] = -2.5f;
  const std::vector<float> y = RoundTrip<TypeParam>(x);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(std::isfinite(y[i])) << i;
  // MXFP4 scales only by powers of two, so a lone value can fall halfway between two E2M1 steps:
  // −2.5 is 5 half-units, between 4 and 6, and rounds to 4 (error 0.2).
  const double bound =
      TypeParam::kType == GgmlType::kMXFP4 ? 0.201 : BoundsFor(TypeParam::kType).gaussian;
  for (int block = 0; block < 3; ++block) {
    const std::vector<float> xb(x.begin() + block * k, x.begin() + (block + 1) * k);
    const std::vector<float> yb(y.begin() + block * k, y.begin() + (block + 1) * k);
    EXPECT_LT(RelativeRmsError(xb, yb), bound) << "block " << block;
  }
}

TEST(QuantizeError, FloatRows) {
  const std::vector<float> x = GaussianData(FreshSeed(), 4096);
  std::vector<uint16_t> half(x.size());
  std::vector<float> y(x.size());
  QuantizeRowF16(x.data(), half.data(), static_cast<int64_t>(x.size()));
  DequantizeRowF16(half.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_LT(RelativeRmsError(x, y), 2.5e-4);  // 2^-11 / sqrt(12) ≈ 1.4e-4 relative per value
  QuantizeRowBF16(x.data(), half.data(), static_cast<int64_t>(x.size()));
  DequantizeRowBF16(half.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_LT(RelativeRmsError(x, y), 2.0e-3);  // 2^-8 / sqrt(12) ≈ 1.1e-3
}

}  // namespace
}  // namespace tandem::quant
