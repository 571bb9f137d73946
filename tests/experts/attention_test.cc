#include "experts/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "experts/isa.h"
#include "tests/experts/test_util.h"

namespace tandem::experts {
namespace {

struct Shape {
  int n_head, n_head_kv, head_dim, n_past, n_rows;
};

// softmax(scale · q·K) · V per row and head in double, each row seeing positions 0..n_past + t.
std::vector<float> ReferenceAttention(const AttentionProblem& p) {
  std::vector<float> out(static_cast<size_t>(p.n_rows) * p.n_head * p.head_dim);
  const int group = p.n_head / p.n_head_kv;
  for (int t = 0; t < p.n_rows; ++t) {
    for (int h = 0; h < p.n_head; ++h) {
      const float* q = p.q + t * p.q_row_stride + h * p.q_head_stride;
      const int g = h / group, keys = p.n_past + t + 1;
      std::vector<double> s(keys);
      double max_s = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < keys; ++j) {
        const float* k = p.k + j * p.kv_stride + g * p.head_dim;
        double dot = 0;
        for (int d = 0; d < p.head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
        s[j] = dot * p.scale;
        max_s = std::max(max_s, s[j]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - max_s));
      for (int d = 0; d < p.head_dim; ++d) {
        double o = 0;
        for (int j = 0; j < keys; ++j) o += s[j] * p.v[j * p.kv_stride + g * p.head_dim + d];
        out[(static_cast<size_t>(t) * p.n_head + h) * p.head_dim + d] = static_cast<float>(o / sum);
      }
    }
  }
  return out;
}

// Every ISA this CPU runs, thread counts 1, 2 and all, shapes with one key-value head for all
// query heads and one per query head, head dims that the AVX2 kernel takes (multiples of 8) and
// one that falls back to scalar (36), a first token (no past), contexts shorter and longer than
// one chunk, and 1..8 rows. Queries come with gate rows in between (the gated models' layout) and
// the output is poisoned first. fp32 in another order than the double reference: measured worst
// 6.9e-7 (2-core VM, scalar, AVX2 and AVX-512 pools); the bound leaves ~15x room.
TEST(AttentionTest, MatchesDoubleReferenceAcrossShapesThreadsAndIsas) {
  const Shape shapes[] = {{4, 1, 64, 0, 1},  {8, 2, 128, 37, 1},   {32, 4, 128, 700, 1},
                          {6, 6, 36, 90, 3}, {16, 2, 256, 300, 4}, {4, 2, 64, 1500, 8},
                          {8, 8, 128, 5, 8}, {12, 4, 80, 129, 2}};
  const int all = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!CpuSupports(isa)) continue;
    for (const int threads : {1, 2, all}) {
      auto pool = ExpertPool::Create({.threads = threads, .isa = IsaName(isa)});
      ASSERT_TRUE(pool.ok()) << pool.status();
      AttentionScratch scratch;
      for (const Shape& s : shapes) {
        SCOPED_TRACE(testing::Message() << IsaName(isa) << ", " << threads << " threads, heads "
                                        << s.n_head << "/" << s.n_head_kv << ", dim " << s.head_dim
                                        << ", past " << s.n_past << ", rows " << s.n_rows);
        const int64_t q_stride = 2 * s.head_dim;  // query then gate, as gated attention lays out
        const int64_t kv_stride = static_cast<int64_t>(s.n_head_kv) * s.head_dim;
        const int positions = s.n_past + s.n_rows;
        const std::vector<float> q =
            RandomFloats(static_cast<size_t>(s.n_rows) * s.n_head * q_stride, s.n_past + 1);
        const std::vector<float> k =
            RandomFloats(static_cast<size_t>(positions) * kv_stride, s.n_past + 2);
        const std::vector<float> v =
            RandomFloats(static_cast<size_t>(positions) * kv_stride, s.n_past + 3);
        std::vector<float> out(static_cast<size_t>(s.n_rows) * s.n_head * s.head_dim,
                               std::numeric_limits<float>::quiet_NaN());
        const AttentionProblem p{.q = q.data(),
                                 .q_row_stride = s.n_head * q_stride,
                                 .q_head_stride = q_stride,
                                 .k = k.data(),
                                 .v = v.data(),
                                 .kv_stride = kv_stride,
                                 .n_head = s.n_head,
                                 .n_head_kv = s.n_head_kv,
                                 .head_dim = s.head_dim,
                                 .n_past = s.n_past,
                                 .n_rows = s.n_rows,
                                 .scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim)),
                                 .out = out.data()};
        ASSERT_TRUE(Attend(**pool, isa, p, scratch).ok());
        const std::vector<float> want = ReferenceAttention(p);
        EXPECT_LT(NormalisedError(out.data(), want.data(), out.size()), 1e-5);
      }
    }
  }
}

TEST(AttentionTest, RefusesBadShapesAndIsasTheCpuLacks) {
  auto pool = ExpertPool::Create({.threads = 2});
  ASSERT_TRUE(pool.ok());
  AttentionScratch scratch;
  std::vector<float> buf(4096, 1.0f);
  const AttentionProblem good{.q = buf.data(),
                              .q_row_stride = 256,
                              .q_head_stride = 64,
                              .k = buf.data(),
                              .v = buf.data(),
                              .kv_stride = 64,
                              .n_head = 4,
                              .n_head_kv = 1,
                              .head_dim = 64,
                              .n_past = 3,
                              .n_rows = 1,
                              .scale = 0.125f,
                              .out = buf.data() + 2048};
  EXPECT_TRUE(Attend(**pool, Isa::kScalar, good, scratch).ok());
  AttentionProblem bad = good;
  bad.n_rows = kMaxAttendRows + 1;
  EXPECT_FALSE(Attend(**pool, Isa::kScalar, bad, scratch).ok());
  bad = good;
  bad.n_head_kv = 3;  // 4 heads do not split into 3 groups
  EXPECT_FALSE(Attend(**pool, Isa::kScalar, bad, scratch).ok());
  bad = good;
  bad.kv_stride = 32;  // narrower than one key-value head
  EXPECT_FALSE(Attend(**pool, Isa::kScalar, bad, scratch).ok());
  bad = good;
  bad.out = nullptr;
  EXPECT_FALSE(Attend(**pool, Isa::kScalar, bad, scratch).ok());
  for (const Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    EXPECT_EQ(Attend(**pool, isa, good, scratch).ok(), CpuSupports(isa)) << IsaName(isa);
  }
}

}  // namespace
}  // namespace tandem::experts
