#include "scheduler/planner.h"

#include <gtest/gtest.h>

#include <random>

#include "runtime/model/synth.h"

namespace tandem::scheduler {
namespace {

// A random instance: per-layer probabilities summing to k (Dirichlet-like, skewed), per-layer
// expert bytes that differ (as different quant types would), dense bytes per layer.
CostInputs RandomInputs(std::mt19937_64& rng, int layers, int experts, int k) {
  CostInputs in;
  in.n_layer = layers;
  in.n_expert = experts;
  in.k = k;
  std::gamma_distribution<double> gamma(0.5, 1.0);
  // Sizes in whole MiB, as quant types give (sizes share a common divisor).
  std::uniform_int_distribution<uint64_t> mib(1, 8);
  auto bytes = [&mib](std::mt19937_64& r) { return mib(r) << 20; };
  for (int l = 0; l < layers; ++l) {
    std::vector<double> w(experts);
    double sum = 0;
    for (double& x : w) sum += (x = gamma(rng) + 1e-6);
    for (double x : w) in.prob.push_back(std::min(1.0, k * x / sum));
    in.bytes_per_expert.push_back(bytes(rng));
    in.dense_layer_bytes.push_back(bytes(rng) * (rng() % 20));
  }
  in.output_bytes = 100 << 20;
  return in;
}

TEST(PlannerTest, NeverExceedsTheBudget) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    const CostInputs in = RandomInputs(rng, 1 + rng() % 6, 2 + rng() % 40, 1 + rng() % 2);
    uint64_t all = 0;
    for (int l = 0; l < in.n_layer; ++l) all += in.bytes_per_expert[l] * in.n_expert;
    const uint64_t budget = rng() % (all + all / 4 + 1);
    for (Policy p : {Policy::kPlanner, Policy::kUniform, Policy::kFrequency, Policy::kFirstLayersOnCpu}) {
      const std::vector<uint8_t> r = ChooseResidents(in, budget, p);
      ASSERT_EQ(r.size(), size_t(in.n_layer) * in.n_expert);
      ASSERT_LE(ResidentBytes(in, r), budget) << PolicyName(p) << " iteration " << iter;
    }
  }
}

// On instances small enough to enumerate every residency table, the planner reaches the optimum
// of its own objective.
TEST(PlannerTest, EqualsBruteForceOnSmallInstances) {
  std::mt19937_64 rng(3);
  int checked = 0;
  for (int iter = 0; iter < 400; ++iter) {
    const int layers = 1 + rng() % 3;
    const int experts = 2 + rng() % (layers == 3 ? 3 : 5);
    CostInputs in = RandomInputs(rng, layers, experts, 1 + rng() % 2);
    // Vary the regime: sometimes a fast host or slow HBM so the GPU side can be the bottleneck.
    if (iter % 3 == 1) in.ceilings.host_bytes_per_s = 600e9;
    if (iter % 3 == 2) in.ceilings.handoff_s = 50e-6;
    const int n = layers * experts;
    uint64_t all = 0;
    for (int l = 0; l < layers; ++l) all += in.bytes_per_expert[l] * experts;
    const uint64_t budget = rng() % (all + 1);
    double best = 1e300;
    std::vector<uint8_t> r(n);
    for (uint32_t mask = 0; mask < (1u << n); ++mask) {
      for (int i = 0; i < n; ++i) r[i] = (mask >> i) & 1;
      if (ResidentBytes(in, r) > budget) continue;
      best = std::min(best, ExpectedStepSeconds(in, r));
    }
    const std::vector<uint8_t> plan = ChooseResidents(in, budget, Policy::kPlanner);
    ASSERT_LE(ResidentBytes(in, plan), budget);
    EXPECT_NEAR(ExpectedStepSeconds(in, plan), best, best * 1e-9)
        << "iteration " << iter << ": " << layers << " layers x " << experts << " experts";
    ++checked;
  }
  EXPECT_EQ(checked, 400);
}

TEST(PlannerTest, CostModelMatchesHandComputation) {
  CostInputs in;
  in.n_layer = 1;
  in.n_expert = 2;
  in.k = 1;
  in.prob = {0.75, 0.25};
  in.bytes_per_expert = {77'000'000};
  in.dense_layer_bytes = {0};
  in.ceilings.hbm_bytes_per_s = 7.7e9;
  in.ceilings.host_bytes_per_s = 77e9;
  in.ceilings.handoff_s = 1e-3;
  // Expert 0 resident: GPU 0.75 * 10 ms = 7.5 ms; CPU 0.25 * 1 ms + 1 ms * 0.25 = 0.5 ms.
  EXPECT_NEAR(ExpectedStepSeconds(in, {1, 0}), 7.5e-3, 1e-12);
  // Nothing resident: CPU 1 ms + handoff * (1 - 0.25 * 0.75) = 1.8125 ms.
  EXPECT_NEAR(ExpectedStepSeconds(in, {0, 0}), 1e-3 + 1e-3 * (1 - 0.25 * 0.75), 1e-12);
  EXPECT_DOUBLE_EQ(ExpectedHitRate(in, {1, 0}), 0.75);
  // Here the GPU is the slow side: the planner keeps everything on the CPU.
  EXPECT_EQ(ChooseResidents(in, 1ull << 40, Policy::kPlanner), (std::vector<uint8_t>{0, 0}));
}

TEST(PlannerTest, BaselinesDoWhatTheirNamesSay) {
  CostInputs in;
  in.n_layer = 3;
  in.n_expert = 4;
  in.k = 1;
  in.prob = {0.7, 0.1, 0.1, 0.1, 0.4, 0.3, 0.2, 0.1, 0.25, 0.25, 0.25, 0.25};
  in.bytes_per_expert = {10, 10, 10};
  in.dense_layer_bytes = {0, 0, 0};
  EXPECT_EQ(ChooseResidents(in, 65, Policy::kUniform),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(ChooseResidents(in, 30, Policy::kFrequency),
            (std::vector<uint8_t>{1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ChooseResidents(in, 85, Policy::kFirstLayersOnCpu),
            (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
}

// Experts with no routes in the census cost nothing either way in the objective: the planner's
// choice among the seen ones is its optimum, and the budget left over holds the unseen ones, the
// layers in turn, so that a budget with room for every expert puts every expert on the card.
TEST(PlannerTest, UnseenExpertsTakeTheBudgetLeftOver) {
  CostInputs in;
  in.n_layer = 2;
  in.n_expert = 4;
  in.k = 1;
  in.prob = {0.6, 0.4, 0, 0, 1.0, 0, 0, 0};
  in.bytes_per_expert = {10, 10};
  in.dense_layer_bytes = {0, 0};
  EXPECT_EQ(ChooseResidents(in, 80, Policy::kPlanner), std::vector<uint8_t>(8, 1));
  // 50 bytes: the three seen experts, then the first unseen of layer 1 and of layer 0.
  const std::vector<uint8_t> partial = ChooseResidents(in, 55, Policy::kPlanner);
  EXPECT_EQ(partial, (std::vector<uint8_t>{1, 1, 1, 0, 1, 1, 0, 0}));
  EXPECT_DOUBLE_EQ(ExpectedStepSeconds(in, partial),
                   ExpectedStepSeconds(in, {1, 1, 0, 0, 1, 0, 0, 0}));
  // Only seen experts compete for a budget too small for them all.
  EXPECT_EQ(ChooseResidents(in, 25, Policy::kPlanner),
            (std::vector<uint8_t>{1, 0, 0, 0, 1, 0, 0, 0}));
}

TEST(PlannerTest, MemoryBudgetCountsDenseCachesAndScratch) {
  model::OpenOptions open;
  open.materialize = false;
  auto m = model::OpenModel("synth:flash-next-125b", open);
  ASSERT_TRUE(m.ok()) << m.status();
  const model::HParams& hp = (*m)->hparams();
  auto budget =
      ComputeMemoryBudget(**m, uint64_t{24} << 30, 4096, KvCache::kF32, kDefaultScratchBytes);
  ASSERT_TRUE(budget.ok()) << budget.status();
  // 12 attention layers x 4096 tokens x K,V x 2 kv heads x 256 x 4 bytes (f32, the engine's
  // default cache).
  EXPECT_EQ(budget->kv_bytes, uint64_t{12} * 4096 * 2 * 2 * 256 * 4);
  EXPECT_EQ(budget->kv_cache, KvCache::kF32);
  const uint64_t conv = uint64_t(hp.ssm_conv_kernel - 1) * hp.ssm_conv_dim() * 4;
  const uint64_t ssm = uint64_t(hp.ssm_dt_rank) * hp.ssm_d_state * hp.head_v_dim() * 4;
  EXPECT_EQ(budget->deltanet_bytes, 36 * (conv + ssm));
  EXPECT_GT(budget->dense_bytes, 0u);
  EXPECT_EQ(budget->expert_budget(), (uint64_t{24} << 30) - budget->needed_without_experts());
  // An f16 cache takes half the KV bytes and leaves the difference to experts; nothing else moves.
  auto f16 =
      ComputeMemoryBudget(**m, uint64_t{24} << 30, 4096, KvCache::kF16, kDefaultScratchBytes);
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(f16->kv_cache, KvCache::kF16);
  EXPECT_EQ(2 * f16->kv_bytes, budget->kv_bytes);
  EXPECT_EQ(f16->dense_bytes, budget->dense_bytes);
  EXPECT_EQ(f16->deltanet_bytes, budget->deltanet_bytes);
  EXPECT_EQ(f16->expert_budget() - budget->expert_budget(), f16->kv_bytes);
  // Too small a budget names the bytes it needs and the cache type it counted.
  auto small =
      ComputeMemoryBudget(**m, uint64_t{1} << 30, 4096, KvCache::kF32, kDefaultScratchBytes);
  ASSERT_FALSE(small.ok());
  const std::string msg(small.status().message());
  EXPECT_NE(msg.find(std::to_string(budget->needed_without_experts())), std::string::npos) << msg;
  EXPECT_NE(msg.find("(f32)"), std::string::npos) << msg;
}

TEST(PlannerTest, CacheTypesParseByTheEnginesNames) {
  EXPECT_EQ(*ParseKvCache("f32"), KvCache::kF32);
  EXPECT_EQ(*ParseKvCache("f16"), KvCache::kF16);
  EXPECT_STREQ(KvCacheName(KvCache::kF16), "f16");
  auto bad = ParseKvCache("q8_0");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown --cache-type 'q8_0' (choose f32 or f16)");
}

TEST(PlannerTest, PlanJsonRoundTrips) {
  std::mt19937_64 rng(9);
  const CostInputs in = RandomInputs(rng, 3, 6, 2);
  MemoryBudget mem;
  mem.vram_budget = 40 << 20;
  mem.context = 128;
  mem.kv_cache = KvCache::kF16;
  const Plan plan = MakePlan(in, mem, Policy::kPlanner, "synth:x", 0x1234);
  auto back = PlanFromJson(PlanToJson(plan), "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->resident, plan.resident);
  EXPECT_EQ(back->memory.kv_cache, KvCache::kF16);
  EXPECT_EQ(PlanToJson(plan)["memory"]["cache_type"], "f16");
  // A plan written before memory.cache_type existed counted an f16 cache.
  nlohmann::json old = PlanToJson(plan);
  old["memory"].erase("cache_type");
  auto old_back = PlanFromJson(old, "old");
  ASSERT_TRUE(old_back.ok()) << old_back.status();
  EXPECT_EQ(old_back->memory.kv_cache, KvCache::kF16);
  nlohmann::json bad = PlanToJson(plan);
  bad["memory"]["cache_type"] = "q4";
  auto refused = PlanFromJson(bad, "bad.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "bad.json: memory.cache_type 'q4' is neither f32 nor f16");
  EXPECT_EQ(back->model_fingerprint, 0x1234u);
  EXPECT_NEAR(back->expected_step_s, plan.expected_step_s, 1e-15);
  nlohmann::json over = PlanToJson(plan);
  over["expert_budget"] = 0;
  if (plan.resident_bytes > 0) {
    EXPECT_FALSE(PlanFromJson(over, "over").ok());
  }
}

}  // namespace
}  // namespace tandem::scheduler
