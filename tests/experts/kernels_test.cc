// Every supported weight format × every ISA this CPU runs × 1..8 activation rows × odd shapes,
// against the fp32 dot product of the scalar-decoded weights with the unquantised activations.
// The SIMD paths must also agree with the scalar integer path to float rounding.
#include "experts/kernels.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "tests/experts/test_util.h"

namespace tandem::experts {
namespace {

using quant::GgmlType;

constexpr GgmlType kFormats[] = {GgmlType::kQ4_K,   GgmlType::kQ3_K,  GgmlType::kQ8_0,
                                 GgmlType::kQ6_K,   GgmlType::kQ5_K,  GgmlType::kQ2_K,
                                 GgmlType::kIQ4_XS, GgmlType::kQ4_0,  GgmlType::kIQ4_NL,
                                 GgmlType::kMXFP4};

// Normalised error of a quantised-activation dot product against fp32 (Q8_K rounds to 1/127 of a
// 256-block's max, Q8_0 to 1/127 of a 32-block's max). Measured worst case over these cases on
// 2026-12 (every ISA gives the same): 0.0099 (Q6_K) with Q8_K activations, 0.0083 (MXFP4) with
// Q8_0; the bound leaves 2x room.
constexpr double kKernelBound = 0.02;

class KernelTest : public ::testing::TestWithParam<std::tuple<GgmlType, Isa>> {};

TEST_P(KernelTest, MatchesFp32ReferenceForRows1To8AndOddShapes) {
  const auto [type, isa] = GetParam();
  if (!CpuSupports(isa)) GTEST_SKIP() << "this CPU lacks " << IsaName(isa);
  const DotFn dot = GetDotKernel(isa, type);
  const DotFn scalar = GetDotKernel(Isa::kScalar, type);
  ASSERT_NE(dot, nullptr);
  const int block = quant::GetTypeInfo(type).block_elems;
  for (const auto& [k_blocks, n_wrows] : {std::pair{1, 1}, std::pair{3, 7}, std::pair{5, 13}}) {
    const int64_t k = static_cast<int64_t>(k_blocks) * block;
    const uint64_t seed = static_cast<uint64_t>(type) * 1000 + k_blocks;
    const std::vector<uint8_t> w = RandomWeights(type, n_wrows, k, seed);
    const std::vector<float> wf = DecodeRows(type, w.data(), k, 0, n_wrows);
    const int64_t act_bytes = ActivationRowBytes(type, k);
    for (int n_act = 1; n_act <= kMaxKernelRows; ++n_act) {
      const std::vector<float> x = RandomFloats(static_cast<size_t>(n_act * k), seed + n_act);
      std::vector<uint8_t> xq(static_cast<size_t>(n_act * act_bytes));
      const uint8_t* act[kMaxKernelRows];
      for (int a = 0; a < n_act; ++a) {
        QuantizeActivations(type, &x[a * k], k, &xq[a * act_bytes]);
        act[a] = &xq[a * act_bytes];
      }
      const int64_t stride = n_wrows + 3;  // padded, to catch stride mistakes
      std::vector<float> got(static_cast<size_t>(n_act * stride), std::nanf(""));
      std::vector<float> ref_int(got.size(), std::nanf(""));
      dot(w.data(), quant::RowBytes(type, k), n_wrows, k, act, n_act, got.data(), stride);
      scalar(w.data(), quant::RowBytes(type, k), n_wrows, k, act, n_act, ref_int.data(), stride);
      std::vector<float> g, want, s;
      for (int a = 0; a < n_act; ++a) {
        for (int r = 0; r < n_wrows; ++r) {
          double acc = 0;
          for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(wf[r * k + i]) * x[a * k + i];
          want.push_back(static_cast<float>(acc));
          g.push_back(got[a * stride + r]);
          s.push_back(ref_int[a * stride + r]);
        }
        for (int64_t r = n_wrows; r < stride; ++r) EXPECT_TRUE(std::isnan(got[a * stride + r]));
      }
      SCOPED_TRACE(testing::Message() << "k " << k << " rows " << n_wrows << " act " << n_act);
      // One block is too few elements for a stable normalised error; the bound is for >= 3.
      if (k_blocks >= 3) {
        EXPECT_LT(NormalisedError(g.data(), want.data(), g.size()), kKernelBound);
      }
      EXPECT_LT(NormalisedError(g.data(), s.data(), g.size()), 2e-6);
    }
  }
}

std::string Name(const testing::TestParamInfo<std::tuple<GgmlType, Isa>>& info) {
  return std::string(quant::GetTypeInfo(std::get<0>(info.param)).name) + "_" +
         IsaName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(All, KernelTest,
                         testing::Combine(testing::ValuesIn(kFormats),
                                          testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)),
                         Name);

TEST(KernelTest, UnsupportedFormatsHaveNoKernel) {
  for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16, GgmlType::kF32, GgmlType::kQ4_1,
                        GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    EXPECT_FALSE(SupportsFormat(type)) << quant::GetTypeInfo(type).name;
    EXPECT_EQ(GetDotKernel(Isa::kScalar, type), nullptr);
  }
}

TEST(IsaTest, ResolveNamesAndRefusals) {
  EXPECT_EQ(*ResolveIsa("scalar"), Isa::kScalar);
  EXPECT_EQ(*ResolveIsa("auto"), BestIsa());
  EXPECT_FALSE(ResolveIsa("sse9").ok());
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    EXPECT_EQ(ResolveIsa(IsaName(isa)).ok(), CpuSupports(isa));
  }
}

}  // namespace
}  // namespace tandem::experts
