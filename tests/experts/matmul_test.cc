// The cpu backend's dense half on the pool. ExpertPool::MatMul against fp64 over the decoded
// weights: every format, odd shapes, 1..8, 33 and 600 rows of x (past kMaxTileRows: two row
// groups), thread counts 1, 2 and all (bit-identical), each ISA the CPU has, outputs poisoned
// first; then what it refuses. ExpertPool::ParallelFor: every index once, between other jobs.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include "experts/pool.h"
#include "tests/experts/test_util.h"

namespace tandem::experts {
namespace {

using quant::GgmlType;

// One quantised dot product per output, as in kernels_test (kKernelBound there, measured worst
// 0.0136 for Q3_K): the same kernels, called on slices of rows.
constexpr double kProductBound = 0.02;

format::TensorInfo MatrixTensor(GgmlType type, int64_t cols, int64_t rows,
                                const std::vector<uint8_t>& bytes) {
  format::TensorInfo t;
  t.name = "blk.0.attn_q.weight";
  t.dims = {cols, rows};
  t.type = type;
  t.nbytes = bytes.size();
  t.data = bytes.data();
  return t;
}

absl::Status MatMulOne(ExpertPool& pool, const WeightMatrix& w, const float* x, int n_rows,
                       float* y) {
  const MatrixProduct product[] = {{w, y}};
  return pool.MatMul(product, x, n_rows);
}

class PoolMatMulTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(PoolMatMulTest, MatchesFp64ReferenceAcrossRowsThreadsAndIsas) {
  const GgmlType type = GetParam();
  const int block = quant::GetTypeInfo(type).block_elems;
  const int64_t cols = block == 256 ? 768 : 288, rows = 37;
  const uint64_t seed = static_cast<uint64_t>(type) * 91;
  const std::vector<uint8_t> bytes = RandomWeights(type, rows, cols, seed);
  const std::vector<float> wf = DecodeRows(type, bytes.data(), cols, 0, rows);
  auto matrix = WeightMatrix::FromTensor(MatrixTensor(type, cols, rows, bytes), rows);
  ASSERT_TRUE(matrix.ok()) << matrix.status();
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int n_rows : {1, 2, 3, 5, 8, 33, 600}) {
    SCOPED_TRACE(testing::Message() << quant::GetTypeInfo(type).name << " rows " << n_rows);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(n_rows * cols), seed + n_rows);
    std::vector<float> want(static_cast<size_t>(n_rows * rows));
    for (int t = 0; t < n_rows; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t i = 0; i < cols; ++i) acc += double{wf[r * cols + i]} * x[t * cols + i];
        want[t * rows + r] = static_cast<float>(acc);
      }
    }
    for (const char* isa : {"scalar", "avx2", "avx512", "auto"}) {
      if (!ResolveIsa(isa).ok()) continue;  // this CPU lacks it; kernels_test says which
      std::vector<float> first;
      for (int threads : {1, 2, all}) {
        auto pool = ExpertPool::Create({.threads = threads, .isa = isa});
        ASSERT_TRUE(pool.ok()) << pool.status();
        // Twice on one pool: the second call reuses what the first left in the pool.
        for (int pass = 0; pass < 2; ++pass) {
          std::vector<float> y(want.size(), std::numeric_limits<float>::quiet_NaN());
          ASSERT_TRUE(MatMulOne(**pool, *matrix, x.data(), n_rows, y.data()).ok());
          EXPECT_LT(NormalisedError(y.data(), want.data(), y.size()), kProductBound)
              << isa << " threads " << threads;
          if (first.empty()) {
            first = y;
          } else {
            EXPECT_EQ(y, first) << "thread count or reuse changed the result: " << isa << " "
                                << threads;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, PoolMatMulTest, testing::ValuesIn(kAllFormats), FormatName);

// Products and expert layers take turns on one pool (as in a forward pass): each gives what it
// gives on a pool of its own.
TEST(PoolMatMulTest, InterleavesWithExpertLayers) {
  const int64_t hidden = 256, n_ff = 256;
  const std::vector<uint8_t> gate = RandomWeights(GgmlType::kQ4_K, n_ff * 4, hidden, 1);
  const std::vector<uint8_t> up = RandomWeights(GgmlType::kQ4_K, n_ff * 4, hidden, 2);
  const std::vector<uint8_t> down = RandomWeights(GgmlType::kQ4_K, hidden * 4, n_ff, 3);
  const ExpertWeights w = *ExpertWeights::FromBuffers(GgmlType::kQ4_K, GgmlType::kQ4_K, hidden,
                                                      n_ff, 4, gate.data(), up.data(), down.data());
  const std::vector<uint8_t> bytes = RandomWeights(GgmlType::kQ8_0, 300, hidden, 4);
  const WeightMatrix m =
      *WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, hidden, 300, bytes), 300);
  const std::vector<float> x = RandomFloats(2 * hidden, 5);
  const std::vector<ExpertJob> jobs = {{0, 1, 0.5f}, {1, 3, 0.25f}, {1, 1, 0.75f}};

  auto alone = ExpertPool::Create({});
  ASSERT_TRUE(alone.ok());
  std::vector<float> want_y(2 * 300), want_out(2 * hidden, 0.0f);
  ASSERT_TRUE(MatMulOne(**alone, m, x.data(), 2, want_y.data()).ok());
  auto experts_alone = ExpertPool::Create({});
  ASSERT_TRUE(experts_alone.ok());
  ASSERT_TRUE((*experts_alone)->Run(w, jobs, x.data(), 2, want_out.data()).ok());

  auto shared = ExpertPool::Create({});
  ASSERT_TRUE(shared.ok());
  for (int i = 0; i < 40; ++i) {
    std::vector<float> y(want_y.size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> out(want_out.size(), 0.0f);
    ASSERT_TRUE(MatMulOne(**shared, m, x.data(), 2, y.data()).ok());
    ASSERT_TRUE((*shared)->Run(w, jobs, x.data(), 2, out.data()).ok());
    ASSERT_EQ(y, want_y) << "round " << i;
    ASSERT_EQ(out, want_out) << "round " << i;
  }
}

// Several matrices sharing x in one call (a layer's q, k and v): each y as from a call of its own,
// for formats that pair with the same activations (Q8_0 and Q4_0 both take Q8_0 rows).
TEST(PoolMatMulTest, SeveralProductsShareOneJob) {
  const int64_t cols = 512;
  const std::vector<uint8_t> a = RandomWeights(GgmlType::kQ8_0, 300, cols, 1);
  const std::vector<uint8_t> b = RandomWeights(GgmlType::kQ4_0, 20, cols, 2);
  const std::vector<uint8_t> c = RandomWeights(GgmlType::kQ8_0, 37, cols, 3);
  const WeightMatrix ma =
      *WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, cols, 300, a), 300);
  const WeightMatrix mb = *WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ4_0, cols, 20, b), 20);
  const WeightMatrix mc = *WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, cols, 37, c), 37);
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int n_rows : {1, 4, 600}) {
    const std::vector<float> x = RandomFloats(static_cast<size_t>(n_rows) * cols, 4 + n_rows);
    auto pool = ExpertPool::Create({.threads = all});
    ASSERT_TRUE(pool.ok());
    std::vector<float> want_a(n_rows * 300), want_b(n_rows * 20), want_c(n_rows * 37);
    ASSERT_TRUE(MatMulOne(**pool, ma, x.data(), n_rows, want_a.data()).ok());
    ASSERT_TRUE(MatMulOne(**pool, mb, x.data(), n_rows, want_b.data()).ok());
    ASSERT_TRUE(MatMulOne(**pool, mc, x.data(), n_rows, want_c.data()).ok());
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> ya(want_a.size(), nan), yb(want_b.size(), nan), yc(want_c.size(), nan);
    const MatrixProduct products[] = {{ma, ya.data()}, {mb, yb.data()}, {mc, yc.data()}};
    ASSERT_TRUE((*pool)->MatMul(products, x.data(), n_rows).ok());
    EXPECT_EQ(ya, want_a) << "rows " << n_rows;
    EXPECT_EQ(yb, want_b) << "rows " << n_rows;
    EXPECT_EQ(yc, want_c) << "rows " << n_rows;
  }

  // Matrices that cannot share x: other column counts, or other activations (Q4_K takes Q8_K).
  const std::vector<uint8_t> d = RandomWeights(GgmlType::kQ8_0, 4, 256, 5);
  const std::vector<uint8_t> e = RandomWeights(GgmlType::kQ4_K, 4, cols, 6);
  const WeightMatrix md = *WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, 256, 4, d), 4);
  const WeightMatrix me = *WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ4_K, cols, 4, e), 4);
  auto pool = ExpertPool::Create({});
  ASSERT_TRUE(pool.ok());
  std::vector<float> x(cols, 1.0f), y0(300), y1(4);
  const MatrixProduct other_cols[] = {{ma, y0.data()}, {md, y1.data()}};
  EXPECT_EQ((*pool)->MatMul(other_cols, x.data(), 1).code(), absl::StatusCode::kInvalidArgument);
  const MatrixProduct other_act[] = {{ma, y0.data()}, {me, y1.data()}};
  EXPECT_EQ((*pool)->MatMul(other_act, x.data(), 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PoolMatMulTest, RefusesWhatItCannotRun) {
  const std::vector<uint8_t> bytes(quant::RowBytes(GgmlType::kQ4_1, 64) * 4);
  auto q4_1 = WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ4_1, 64, 4, bytes), 4);
  EXPECT_EQ(q4_1.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(q4_1.status().message().find("q4_1"), std::string::npos) << q4_1.status();
  EXPECT_NE(q4_1.status().message().find("blk.0.attn_q.weight"), std::string::npos);

  const std::vector<uint8_t> q8(quant::RowBytes(GgmlType::kQ8_0, 64) * 4);
  EXPECT_FALSE(WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, 64, 4, q8), 5).ok());
  EXPECT_FALSE(WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, 64, 4, q8), 0).ok());
  EXPECT_FALSE(WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, 48, 4, q8), 4).ok());
  format::TensorInfo absent = MatrixTensor(GgmlType::kQ8_0, 64, 4, q8);
  absent.data = nullptr;
  EXPECT_FALSE(WeightMatrix::FromTensor(absent, 4).ok());

  // No rows of x: nothing to do, y untouched.
  const WeightMatrix m = *WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, 64, 4, q8), 4);
  auto pool = ExpertPool::Create({});
  ASSERT_TRUE(pool.ok());
  float y = 7.0f;
  EXPECT_TRUE(MatMulOne(**pool, m, nullptr, 0, &y).ok());
  EXPECT_EQ(y, 7.0f);
}

TEST(PoolParallelForTest, RunsEveryIndexOnceBetweenOtherJobs) {
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<uint8_t> bytes = RandomWeights(GgmlType::kQ8_0, 64, 256, 9);
  const WeightMatrix m =
      *WeightMatrix::FromTensor(MatrixTensor(GgmlType::kQ8_0, 256, 64, bytes), 64);
  const std::vector<float> x = RandomFloats(256, 10);
  for (int threads : {1, 2, all}) {
    auto pool = ExpertPool::Create({.threads = threads});
    ASSERT_TRUE(pool.ok());
    std::vector<float> want(64);
    ASSERT_TRUE(MatMulOne(**pool, m, x.data(), 1, want.data()).ok());
    for (auto [n, grain] : {std::pair<int64_t, int64_t>{10007, 7}, {5, 1}, {3, 100}, {1, 0}}) {
      std::vector<std::atomic<int>> seen(n);
      std::atomic<int> calls{0};
      const std::function<void(int64_t, int64_t)> body = [&](int64_t begin, int64_t end) {
        calls.fetch_add(1);
        EXPECT_LT(begin, end);
        EXPECT_LE(end - begin, std::max<int64_t>(grain, 1));
        for (int64_t i = begin; i < end; ++i) seen[i].fetch_add(1);
      };
      (*pool)->ParallelFor(n, grain, body);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "index " << i << " of " << n;
      EXPECT_EQ(calls.load(), (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1));
      std::vector<float> y(64, std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE(MatMulOne(**pool, m, x.data(), 1, y.data()).ok());
      EXPECT_EQ(y, want) << "threads " << threads;
    }
    int calls = 0;
    (*pool)->ParallelFor(0, 4, [&](int64_t, int64_t) { ++calls; });
    EXPECT_EQ(calls, 0);
  }
}

}  // namespace
}  // namespace tandem::experts
