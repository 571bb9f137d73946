// Every supported weight format × every ISA this CPU runs × 1..8 activation rows (registers) and
// 9, 33, 200, 512 rows (the tiled path) × odd shapes, against the fp32 dot product of the
// scalar-decoded weights with the unquantised activations. The SIMD paths must also agree with
// the scalar path to float rounding.
#include "experts/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/quant/blocks.h"
#include "runtime/quant/q8_0.h"
#include "runtime/quant/q8_k.h"
#include "tests/experts/test_util.h"

namespace tandem::experts {
namespace {

using quant::GgmlType;

// Normalised error of a quantised-activation dot product against fp32 (Q8_K rounds to 1/127 of a
// 256-block's max, Q8_0 to 1/127 of a 32-block's max). Measured worst case over these cases on
// 2026-11-29 (every ISA gives the same): 0.0136 (Q3_K) with Q8_K activations, 0.0133 (IQ4_NL)
// with Q8_0, 1.1e-6 for F16/BF16 (f32 activations); the bound leaves ~1.5x room.
constexpr double kKernelBound = 0.02;

// SIMD against the scalar path: integer block sums are exact on both, so only the float
// accumulation order differs. Measured worst on 2026-11-29: 1.1e-6 (Q5_K and F16 at k = 23040:
// f32 sums over 90 blocks or 23040 products; the scalar F16 path sums in fp64), 6.5e-7 for
// k <= 1280, tiled rows included; the bound leaves ~1.8x room.
constexpr double kScalarBound = 2e-6;

class KernelTest : public ::testing::TestWithParam<std::tuple<GgmlType, Isa>> {};

struct Shape {
  int k_blocks, n_wrows;
  std::vector<int> act_rows;
};

// dot over w_dot (the n_wrows rows of w as dot reads them: w itself, or repacked) against the
// scalar kernel on w (float rounding: kScalarBound) and the fp32 products of w's decoded rows
// (kKernelBound, from 3 blocks up), for each count of activation rows; outputs poisoned first
// and strided, so that rows and rows past the end are checked.
void ExpectNearScalarAndFp32(GgmlType type, DotFn dot, const uint8_t* w_dot,
                             const std::vector<uint8_t>& w, int n_wrows, int64_t k, bool bounded,
                             const std::vector<int>& act_rows, uint64_t seed) {
  const DotFn scalar = GetDotKernel(Isa::kScalar, type);
  const std::vector<float> wf = DecodeRows(type, w.data(), k, 0, n_wrows);
  const int64_t row_bytes = quant::RowBytes(type, k);
  for (int n_act : act_rows) {
    const std::vector<float> x = RandomFloats(static_cast<size_t>(n_act * k), seed + n_act);
    const QuantizedRows q = QuantizeRows(type, x, n_act, k);
    const int64_t stride = n_wrows + 3;  // padded, to catch stride mistakes
    std::vector<float> got(static_cast<size_t>(n_act * stride), std::nanf(""));
    std::vector<float> ref_int(got.size(), std::nanf(""));
    dot(w_dot, row_bytes, n_wrows, k, q.rows.data(), n_act, got.data(), stride);
    scalar(w.data(), row_bytes, n_wrows, k, q.rows.data(), n_act, ref_int.data(), stride);
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
    if (bounded) {
      EXPECT_LT(NormalisedError(g.data(), want.data(), g.size()), kKernelBound);
    }
    EXPECT_LT(NormalisedError(g.data(), s.data(), g.size()), kScalarBound);
  }
}

TEST_P(KernelTest, MatchesFp32ReferenceForManyRowCountsAndOddShapes) {
  const auto [type, isa] = GetParam();
  if (!CpuSupports(isa)) GTEST_SKIP() << "this CPU lacks " << IsaName(isa);
  const DotFn dot = GetDotKernel(isa, type);
  ASSERT_NE(dot, nullptr);
  const int block = quant::GetTypeInfo(type).block_elems;
  const std::vector<int> many = {1, 2, 3, 4, 5, 6, 7, 8, 9, 33, 200, 512};
  // {5, 40}: several weight-row tiles; {90, 3}: K rows longer than one tile (k split, summed);
  // {20, 5}: 2..8 rows over more blocks than one activation span of kernel_vnni_rows.h (16).
  const Shape shapes[] = {{1, 1, many},     {3, 7, many},        {5, 13, many},
                          {5, 40, {9, 33}}, {90, 3, {1, 9, 33}}, {20, 5, {2, 5, 8}}};
  for (const Shape& shape : shapes) {
    // F16/BF16/F32 have no blocks: k gets an odd tail past the vector loops.
    const int64_t k = block == 1 ? shape.k_blocks * 256 + 7 : int64_t{shape.k_blocks} * block;
    const uint64_t seed = static_cast<uint64_t>(type) * 1000 + shape.k_blocks;
    const std::vector<uint8_t> w = RandomWeights(type, shape.n_wrows, k, seed);
    // One block is too few elements for a stable normalised error; the bound is for >= 3.
    ExpectNearScalarAndFp32(type, dot, w.data(), w, shape.n_wrows, k, shape.k_blocks >= 3,
                            shape.act_rows, seed);
  }
}

std::string Name(const testing::TestParamInfo<std::tuple<GgmlType, Isa>>& info) {
  return std::string(quant::GetTypeInfo(std::get<0>(info.param)).name) + "_" +
         IsaName(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(All, KernelTest,
                         testing::Combine(testing::ValuesIn(kAllFormats),
                                          testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512)),
                         Name);

// The multi-row kernels hold integer sums as int16 before applying the sub-block scale
// (kernel_vnni_rows.h per int32 lane, kernel_avx2_rows.h per int16 lane across four chunks); that
// is exact only while |sum| < 32768. Largest weights (every quant and scale at its maximum)
// against activations of one sign (every Q8_K value ±127) put the sums at their bound (Q4_K
// 15240, Q5_K 31496); Q3_K's lanes hold Σ q·y after the offset, largest at q = -4 (quants and hmask
// all zero, 8128) next to q = 3 (all ones). The SIMD paths must still match the scalar one.
TEST(KernelTest, LargestWeightsAndActivationsMatchScalar) {
  constexpr int64_t kBlocks = 3, k = kBlocks * quant::kQK_K;
  constexpr int kRows = 4;
  std::vector<uint8_t> q4(kRows * kBlocks * sizeof(quant::BlockQ4K), 0xFF);
  std::vector<uint8_t> q3(kRows * kBlocks * sizeof(quant::BlockQ3K), 0xFF);
  std::vector<uint8_t> q3_low = q3;
  std::vector<uint8_t> q5(kRows * kBlocks * sizeof(quant::BlockQ5K), 0xFF);
  for (int64_t i = 0; i < kRows * kBlocks; ++i) {
    auto* b4 = reinterpret_cast<quant::BlockQ4K*>(q4.data()) + i;
    b4->d = 0x3C00;     // 1.0
    b4->dmin = 0x3800;  // 0.5
    reinterpret_cast<quant::BlockQ3K*>(q3.data())[i].d = 0x3C00;
    auto* b5 = reinterpret_cast<quant::BlockQ5K*>(q5.data()) + i;
    b5->d = 0x3C00;
    b5->dmin = 0x3800;
    auto* b3 = reinterpret_cast<quant::BlockQ3K*>(q3_low.data()) + i;
    b3->d = 0x3C00;
    std::memset(b3->qs, 0, sizeof(b3->qs));
    std::memset(b3->hmask, 0, sizeof(b3->hmask));
  }
  for (const auto& [type, w] :
       {std::pair{GgmlType::kQ4_K, &q4}, std::pair{GgmlType::kQ3_K, &q3},
        std::pair{GgmlType::kQ3_K, &q3_low}, std::pair{GgmlType::kQ5_K, &q5}}) {
    for (int n_act = 1; n_act <= kMaxKernelRows; ++n_act) {
      std::vector<float> x(static_cast<size_t>(n_act * k));
      for (int64_t i = 0; i < n_act * k; ++i) x[i] = (i / k) % 2 ? -1.0f : 1.0f;
      const QuantizedRows q = QuantizeRows(type, x, n_act, k);
      const uint8_t* const* act = q.rows.data();
      std::vector<float> want(static_cast<size_t>(n_act * kRows));
      GetDotKernel(Isa::kScalar, type)(w->data(), quant::RowBytes(type, k), kRows, k, act, n_act,
                                       want.data(), kRows);
      for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
        if (!CpuSupports(isa)) continue;
        std::vector<float> got(want.size(), std::nanf(""));
        GetDotKernel(isa, type)(w->data(), quant::RowBytes(type, k), kRows, k, act, n_act,
                                got.data(), kRows);
        EXPECT_LT(NormalisedError(got.data(), want.data(), got.size()), kScalarBound)
            << quant::GetTypeInfo(type).name << " " << IsaName(isa) << " act " << n_act;
      }
    }
  }
}

// QuantizeActivations(weights, x) writes what quant::QuantizeBlocks writes for its activation
// blocks (Block: BlockQ8K or BlockQ8_0).
template <class Block>
void ExpectScalarQuantiserBytes(GgmlType weights, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> got(static_cast<size_t>(ActivationRowBytes(weights, n))), want(got.size());
  QuantizeActivations(weights, x.data(), n, got.data());
  quant::QuantizeBlocks(x.data(), reinterpret_cast<Block*>(want.data()), n / Block::kElems);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
      << (CpuSupports(Isa::kAvx2) ? "AVX2" : "scalar (no AVX2 here)") << " quantiser differs";
}

// QuantizeActivations takes AVX2 for Q8_K where the CPU has it; it must write the scalar
// quantiser's bytes (quant::QuantizeBlocks), so that results do not depend on the CPU. Blocks: all
// zeros, random magnitudes, the largest magnitude twice with opposite signs (the first one's sign
// counts), products that land exactly on .5 (ties round to even), and a NaN in the last block (the
// AVX2 code hands such a block to the scalar one instead of searching it for its maximum).
TEST(QuantizeActivationsTest, Q8KIsTheScalarQuantisersBytes) {
  constexpr int kBlocks = 7;
  std::vector<float> x(kBlocks * quant::kQK_K);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  for (int e = 0; e < quant::kQK_K; ++e) x[e] = 0.0f;  // block 0: zeros
  float* b2 = x.data() + 2 * quant::kQK_K;             // block 2: ±3 at 5 and 9, -3 first
  b2[5] = -3.0f;
  b2[9] = 3.0f;
  float* b3 = x.data() + 3 * quant::kQK_K;  // block 3: extreme -127, so the scale is exactly 1
  for (int e = 0; e < quant::kQK_K; ++e) b3[e] = static_cast<float>(e % 21 - 10) + 0.5f;
  b3[100] = -127.0f;
  float* b4 = x.data() + 4 * quant::kQK_K;  // block 4: tiny and huge magnitudes
  for (int e = 0; e < quant::kQK_K; ++e) b4[e] = u(rng) * (e % 2 ? 1e-30f : 1e30f);
  x[6 * quant::kQK_K + 17] = std::numeric_limits<float>::quiet_NaN();  // block 6, the last
  ExpectScalarQuantiserBytes<quant::BlockQ8K>(GgmlType::kQ4_K, x);
}

// The same for Q8_0 (the 32-element formats' activations), whose scalar code takes the f16-rounded
// scale and rounds half away from zero. Blocks: zeros, random, a scale of exactly 1 with products
// on .5 of both signs, a NaN (which max must skip, as std::fmax does), magnitudes from 1e-30 to
// 1e30.
TEST(QuantizeActivationsTest, Q80IsTheScalarQuantisersBytes) {
  constexpr int kBlocks = 40;
  std::vector<float> x(kBlocks * quant::kQK);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int b = 0; b < kBlocks; ++b) {
    const float scale = std::pow(10.0f, static_cast<float>(b % 13) * 5.0f - 30.0f);
    for (int e = 0; e < quant::kQK; ++e) x[b * quant::kQK + e] = u(rng) * scale;
  }
  for (int e = 0; e < quant::kQK; ++e) x[e] = 0.0f;  // block 0: zeros
  float* b1 = x.data() + quant::kQK;                 // block 1: scale 1, ties
  for (int e = 0; e < quant::kQK; ++e)
    b1[e] = static_cast<float>(e % 11 - 5) + (e % 2 ? 0.5f : -0.5f);
  b1[7] = 127.0f;
  x[2 * quant::kQK + 4] = std::numeric_limits<float>::quiet_NaN();  // block 2
  ExpectScalarQuantiserBytes<quant::BlockQ8_0>(GgmlType::kQ8_0, x);
}

// The SIMD SwiGLU against the scalar one (libm's expf): within 2 ulp, or within 1e-30 where silu
// is ≈ 0 (the scalar e^-x overflows to inf past x = -88, the SIMD one is clamped at e^88); NaN
// stays NaN; an odd length runs the SIMD loop's scalar tail.
TEST(SiluMulTest, SimdIsWithinTwoUlpOfScalar) {
  std::vector<float> x;
  for (float v = -120.0f; v <= 120.0f; v += 0.0625f) x.push_back(v);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> small(-1e-3f, 1e-3f), mid(-20.0f, 20.0f);
  for (int i = 0; i < 2000; ++i) x.push_back(i % 2 ? small(rng) : mid(rng));
  for (float v : {0.0f, -0.0f, 1e-38f, -1e-38f, 87.0f, -87.0f, 88.5f, -88.5f, 1e30f, -1e30f})
    x.push_back(v);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  x.push_back(1.0f);  // odd length
  std::uniform_real_distribution<float> uu(-2.0f, 2.0f);
  std::vector<float> u(x.size());
  for (float& v : u) v = uu(rng);
  std::vector<float> want = x;
  SiluMul(Isa::kScalar, want.data(), u.data(), static_cast<int64_t>(want.size()));
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    SCOPED_TRACE(IsaName(isa));
    std::vector<float> got = x;
    SiluMul(isa, got.data(), u.data(), static_cast<int64_t>(got.size()));
    int checked = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << "x " << x[i];
        continue;
      }
      const float ulp = std::nextafter(std::fabs(want[i]), INFINITY) - std::fabs(want[i]);
      EXPECT_LE(std::fabs(got[i] - want[i]), std::max(2.0f * ulp, 1e-30f))
          << "x " << x[i] << " u " << u[i] << ": " << got[i] << " vs " << want[i];
      ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(x.size()) - 1);
  }
}

TEST(KernelTest, UnsupportedFormatsHaveNoKernel) {
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1}) {
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

// The rows8 layout (rows8.h): a lossless rearrangement, and its AVX-512 and AVX2 kernels against
// the GGUF-layout scalar kernel (float rounding only: the integer block sums are the same) and the
// fp32 dot products, over row counts, weight-row groups and spans.
class Rows8Test : public ::testing::TestWithParam<std::tuple<GgmlType, Isa>> {};

TEST_P(Rows8Test, PackThenUnpackGivesBackTheBytes) {
  const GgmlType type = std::get<0>(GetParam());
  for (const auto& [rows, k_blocks] : {std::pair{8, 1}, std::pair{16, 3}, std::pair{40, 8}}) {
    const int64_t k = int64_t{k_blocks} * quant::kQK_K;
    const std::vector<uint8_t> w = RandomWeights(type, rows, k, 11 + rows);
    std::vector<uint8_t> packed(w.size(), 0xA5), back(w.size(), 0x5A);
    PackRows8(type, w.data(), rows, k, packed.data());
    UnpackRows8(type, packed.data(), rows, k, back.data());
    EXPECT_NE(packed, w) << "rows " << rows;
    EXPECT_EQ(back, w) << "rows " << rows;
  }
}

TEST_P(Rows8Test, KernelMatchesGgufKernelAndFp32) {
  const auto [type, isa] = GetParam();
  if (!CpuSupports(isa)) GTEST_SKIP() << "this CPU lacks " << IsaName(isa);
  const DotFn rows8 = GetDotKernel(isa, type, WeightLayout::kRows8);
  ASSERT_NE(rows8, nullptr);
  const std::vector<int> many = {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33};
  // {70, 8}: more blocks than one prepared span (64 for Q4_K, 32 for Q3_K); {3, 40}: five groups.
  const Shape shapes[] = {{1, 8, many}, {3, 40, many}, {8, 16, {1, 4, 8}}, {70, 8, {1, 3, 9}}};
  for (const Shape& shape : shapes) {
    const int64_t k = int64_t{shape.k_blocks} * quant::kQK_K;
    const std::vector<uint8_t> w = RandomWeights(type, shape.n_wrows, k, 500 + shape.k_blocks);
    std::vector<uint8_t> packed(w.size());
    PackRows8(type, w.data(), shape.n_wrows, k, packed.data());
    ExpectNearScalarAndFp32(type, rows8, packed.data(), w, shape.n_wrows, k, shape.k_blocks >= 3,
                            shape.act_rows, 900);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Rows8Test,
                         testing::Combine(testing::Values(GgmlType::kQ4_K, GgmlType::kQ3_K),
                                          testing::Values(Isa::kAvx2, Isa::kAvx512)),
                         Name);

TEST(Rows8LayoutTest, OnlyQ4KAndQ3KOnSimdIsasAndWholeGroups) {
  EXPECT_TRUE(CanPackRows8(GgmlType::kQ4_K, 768));
  EXPECT_TRUE(CanPackRows8(GgmlType::kQ3_K, 2048));
  EXPECT_FALSE(CanPackRows8(GgmlType::kQ4_K, 12));
  EXPECT_FALSE(CanPackRows8(GgmlType::kQ3_K, 0));
  EXPECT_FALSE(CanPackRows8(GgmlType::kQ6_K, 768));
  EXPECT_EQ(GetDotKernel(Isa::kScalar, GgmlType::kQ4_K, WeightLayout::kRows8), nullptr);
  EXPECT_EQ(GetDotKernel(Isa::kScalar, GgmlType::kQ3_K, WeightLayout::kRows8), nullptr);
  EXPECT_EQ(GetDotKernel(Isa::kAvx512, GgmlType::kQ6_K, WeightLayout::kRows8), nullptr);
  EXPECT_EQ(GetDotKernel(Isa::kAvx2, GgmlType::kQ6_K, WeightLayout::kRows8), nullptr);
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    for (GgmlType type : {GgmlType::kQ4_K, GgmlType::kQ3_K}) {
      EXPECT_EQ(GetDotKernel(isa, type, WeightLayout::kRows8) != nullptr, CpuSupports(isa))
          << IsaName(isa) << " " << quant::GetTypeInfo(type).name;
    }
  }
}

// The sums at their bounds against activations of one sign (±127 and -128): Q4_K with every
// quant, scale and min at its largest (int16 halves of 16 · 15 · 128 = 30720); Q3_K with every
// quant at -4 (hmask and low bits clear) and at 3 (all set), scales at -32 (biased 0) and 31 (63):
// the chains near ±8192 and the scaled sums near 2^30.
TEST(Rows8LayoutTest, LargestWeightsAndActivationsMatchScalar) {
  if (!CpuSupports(Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks avx2: no rows8 kernel";
  constexpr int64_t kBlocks = 3, k = kBlocks * quant::kQK_K;
  constexpr int kRows = 16;
  std::vector<uint8_t> q4(kRows * kBlocks * sizeof(quant::BlockQ4K), 0xFF);
  std::vector<uint8_t> q3_high(kRows * kBlocks * sizeof(quant::BlockQ3K), 0xFF);
  std::vector<uint8_t> q3_low = q3_high;
  for (int64_t i = 0; i < kRows * kBlocks; ++i) {
    auto* b4 = reinterpret_cast<quant::BlockQ4K*>(q4.data()) + i;
    b4->d = 0x3C00;     // 1.0
    b4->dmin = 0x3800;  // 0.5
    reinterpret_cast<quant::BlockQ3K*>(q3_high.data())[i].d = 0x3C00;
    auto* b3 = reinterpret_cast<quant::BlockQ3K*>(q3_low.data()) + i;
    b3->d = 0x3C00;
    std::memset(b3->qs, 0, sizeof(b3->qs));
    std::memset(b3->hmask, 0, sizeof(b3->hmask));
    std::memset(b3->scales, 0, sizeof(b3->scales));  // every scale -32
  }
  for (const auto& [type, w] :
       {std::pair{GgmlType::kQ4_K, &q4}, std::pair{GgmlType::kQ3_K, &q3_high},
        std::pair{GgmlType::kQ3_K, &q3_low}}) {
    std::vector<uint8_t> packed(w->size());
    PackRows8(type, w->data(), kRows, k, packed.data());
    const DotFn scalar = GetDotKernel(Isa::kScalar, type);
    for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
      if (!CpuSupports(isa)) continue;
      const DotFn rows8 = GetDotKernel(isa, type, WeightLayout::kRows8);
      for (int n_act = 1; n_act <= kMaxKernelRows; ++n_act) {
        std::vector<float> x(static_cast<size_t>(n_act * k));
        for (int64_t i = 0; i < n_act * k; ++i) x[i] = (i / k) % 2 ? -1.0f : 1.0f;
        const QuantizedRows q = QuantizeRows(type, x, n_act, k);
        std::vector<float> got(static_cast<size_t>(n_act * kRows)), want(got.size());
        rows8(packed.data(), quant::RowBytes(type, k), kRows, k, q.rows.data(), n_act, got.data(),
              kRows);
        scalar(w->data(), quant::RowBytes(type, k), kRows, k, q.rows.data(), n_act, want.data(),
               kRows);
        EXPECT_LT(NormalisedError(got.data(), want.data(), got.size()), kScalarBound)
            << quant::GetTypeInfo(type).name << " " << IsaName(isa) << " act rows " << n_act;
      }
    }
  }
}

}  // namespace
}  // namespace tandem::experts
