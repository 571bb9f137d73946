#include "scheduler/replay.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <vector>

#include "tests/scheduler/test_logs.h"

namespace tandem::scheduler {
namespace {

using testing::HandToken;
using testing::SmallHeader;
using testing::TempPath;
using testing::WriteLog;

// 2 layers x 8 experts, top-2, 1 MiB experts, no dense bytes; ceilings chosen for easy arithmetic.
Plan SmallPlan(std::vector<uint8_t> resident) {
  Plan plan;
  CostInputs& in = plan.inputs;
  in.n_layer = 2;
  in.n_expert = 8;
  in.k = 2;
  in.prob.assign(16, 0.25);
  in.bytes_per_expert = {1 << 20, 1 << 20};
  in.dense_layer_bytes = {0, 0};
  in.ceilings.hbm_bytes_per_s = 1e12;
  in.ceilings.host_bytes_per_s = 1e11;
  in.ceilings.pcie_bytes_per_s = 5e10;
  in.ceilings.handoff_s = 1e-6;
  plan.resident = std::move(resident);
  plan.model_fingerprint = 0xfeed;
  plan.expert_budget = 4 << 20;
  return plan;
}

RoutingTrace HandTrace(const std::vector<HandToken>& tokens) {
  const std::string path = TempPath("sched_replay");
  WriteLog(path, SmallHeader(), tokens);
  auto trace = ReadRoutingLog(path);
  std::filesystem::remove(path);
  EXPECT_TRUE(trace.ok());
  return *trace;
}

TEST(ReplayTest, StaticCountsEveryRouteExactly) {
  // Resident: layer 0 experts 0,1; layer 1 expert 2.
  std::vector<uint8_t> r(16, 0);
  r[0] = r[1] = r[8 + 2] = 1;
  const Plan plan = SmallPlan(r);
  const RoutingTrace trace = HandTrace({{0, 0, {{0, 5}, {2, 3}}}, {0, 1, {{1, 0}, {4, 5}}}});
  const PolicyResult res = ReplayStatic(plan.inputs, plan.resident, trace, "plan");
  EXPECT_EQ(res.routes, 8u);
  EXPECT_EQ(res.hits, 4u);  // token 0: 0 and 2; token 1: 1 and 0
  ASSERT_EQ(res.layer_hit_rate.size(), 2u);
  EXPECT_DOUBLE_EQ(res.layer_hit_rate[0], 0.75);
  EXPECT_DOUBLE_EQ(res.layer_hit_rate[1], 0.25);
  // Token 0: layer 0 max(1 MiB/1e12, 1 MiB/1e11 + 1 us), layer 1 the same; token 1: layer 0 all
  // hits (2 MiB / 1e12), layer 1 two misses (2 MiB / 1e11 + 1 us).
  const double mib = 1 << 20;
  const double t0 = 2 * (mib / 1e11 + 1e-6);
  const double t1 = 2 * mib / 1e12 + 2 * mib / 1e11 + 1e-6;
  EXPECT_NEAR(res.mean_step_s, (t0 + t1) / 2, 1e-15);
}

TEST(ReplayTest, LruAndLfruEvictExactly) {
  Plan plan = SmallPlan(std::vector<uint8_t>(16, 0));
  // Make expert 0 the census favourite of each layer so the warm cache holds it.
  plan.inputs.prob[0] = plan.inputs.prob[8] = 0.9;
  const std::vector<int> cap = {1, 1};
  // Layer 0 sequence (k=2): {0,1} {2,0} {0,3}; layer 1 always {4,5}.
  const RoutingTrace trace = HandTrace({{0, 0, {{0, 1}, {4, 5}}}, {0, 1, {{2, 0}, {4, 5}}},
                                        {0, 2, {{0, 3}, {4, 5}}}});
  ReplayOptions options;
  const PolicyResult lru = ReplayCache(plan.inputs, cap, trace, false, options);
  // Hits are judged at the start of a token; then hits refresh, then misses come in.
  // Layer 0, capacity 1, warm {0}: t0 hit 0, miss 1 -> {1}; t1 miss 2 -> {2}, miss 0 -> {0};
  // t2 hit 0, miss 3 -> {3}. Layer 1 warm {0}: t0 miss 4, 5 -> {5}; t1 hit 5, miss 4 -> {4};
  // t2 hit 4, miss 5 -> {5}. Hits 4 of 12; migrations 4 + 4 experts of 1 MiB.
  EXPECT_EQ(lru.hits, 4u);
  EXPECT_EQ(lru.routes, 12u);
  EXPECT_EQ(lru.migrated_bytes, 8u << 20);
  const PolicyResult lfru = ReplayCache(plan.inputs, cap, trace, true, options);
  EXPECT_EQ(lfru.routes, 12u);
  EXPECT_GE(lfru.hits, 4u);
}

TEST(ReplayTest, ForeignLogIsRefused) {
  const Plan plan = SmallPlan(std::vector<uint8_t>(16, 0));
  const std::string path = TempPath("sched_foreign");
  scheduler::RoutingLogHeader other = SmallHeader(0xbad);
  other.model_name = "synth:other";
  WriteLog(path, other, {{0, 0, {{0, 1}, {2, 3}}}});
  auto trace = ReadRoutingLog(path);
  ASSERT_TRUE(trace.ok());
  absl::Status s = CheckTraceMatchesPlan(plan, *trace, path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("synth:other"), std::string::npos) << s;
  std::filesystem::remove(path);
}

TEST(ReplayTest, AllPoliciesStayInBudgetAndJsonEndsWithSummary) {
  std::vector<uint8_t> r(16, 0);
  r[0] = r[9] = 1;
  const Plan plan = SmallPlan(r);
  std::vector<HandToken> tokens;
  for (uint32_t t = 0; t < 40; ++t) {
    tokens.push_back({t / 10, t % 10, {{int(t % 8), int((t + 3) % 8)}, {int(t % 3), 7}}});
  }
  const RoutingTrace trace = HandTrace(tokens);
  ReplayOptions options;
  options.replan_every = 8;
  const std::vector<PolicyResult> results = ReplayAll(plan, trace, options);
  ASSERT_EQ(results.size(), 8u);
  for (const PolicyResult& res : results) {
    EXPECT_EQ(res.routes, 160u) << res.name;
    EXPECT_LE(res.resident_bytes, plan.expert_budget) << res.name;
    EXPECT_GT(res.tok_s(), 0) << res.name;
  }
  const nlohmann::json j = ReplayToJson(plan, results);
  ASSERT_TRUE(j.contains("summary"));
  EXPECT_TRUE(j["summary"].contains("lru"));
  EXPECT_TRUE(j["summary"]["online"].contains("expected_tok_s"));
  EXPECT_EQ(std::prev(j.end()).key(), "summary");
}

// Minimal well-formedness: tags nest and close, every number in an attribute is finite.
TEST(ReplayTest, SweepSvgIsWellFormed) {
  std::vector<uint8_t> r(16, 0);
  const Plan plan = SmallPlan(r);
  std::vector<HandToken> tokens;
  for (uint32_t t = 0; t < 20; ++t) tokens.push_back({0, t, {{int(t % 8), 1}, {2, int(t % 5)}}});
  const RoutingTrace trace = HandTrace(tokens);
  const std::string svg = SweepSvg(Sweep(plan, trace, ReplayOptions{}, 5), "test <&> sweep");
  std::vector<std::string> stack;
  std::regex tag(R"(<(/?)([a-z]+)([^>]*?)(/?)>)");
  int tags = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tag); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    ++tags;
    if (m[1] == "/") {
      ASSERT_FALSE(stack.empty());
      ASSERT_EQ(stack.back(), m[2].str());
      stack.pop_back();
    } else if (m[4] != "/") {
      stack.push_back(m[2]);
    }
    const std::string attrs = m[3];
    std::regex number(R"(-?[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?|nan|inf)");
    for (auto n = std::sregex_iterator(attrs.begin(), attrs.end(), number); n != std::sregex_iterator(); ++n) {
      const std::string s = n->str();
      ASSERT_NE(s, "nan");
      ASSERT_NE(s, "inf");
      ASSERT_TRUE(std::isfinite(std::stod(s))) << s;
    }
  }
  EXPECT_TRUE(stack.empty());
  EXPECT_GT(tags, 20);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("&lt;&amp;&gt;"), std::string::npos);
}

}  // namespace
}  // namespace tandem::scheduler
