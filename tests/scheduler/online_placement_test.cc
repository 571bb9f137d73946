// Placement while serving: auto placement plans after the warm-up and follows the routing it
// observes; a plan.json is applied as written and refused for another model.
#include "scheduler/online_placement.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "runtime/engine/engine.h"
#include "runtime/model/validate.h"

namespace tandem::scheduler {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<model::Model> Describe(const std::string& shape) {
  model::OpenOptions o;
  o.materialize = false;
  auto m = model::OpenModel("synth:" + shape, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// A budget that leaves room for `experts_per_layer` experts in every layer (scratch 0, 64 tokens).
PlacementOptions OptionsFor(const model::Model& m, int experts_per_layer) {
  PlacementOptions o;
  o.source = "auto";
  o.context = 64;
  o.scratch_bytes = 0;
  o.warmup_tokens = 8;
  auto mem = ComputeMemoryBudget(m, uint64_t{1} << 40, o.context, o.kv_cache, 0);
  EXPECT_TRUE(mem.ok());
  const model::TensorMap map(m.hparams());
  const model::ValidationReport report = model::ValidateTensors(map, m.tensors());
  uint64_t experts = 0;
  for (const model::LayerBytes& lb : report.layers) experts += lb.bytes_per_expert * experts_per_layer;
  o.vram_budget = mem->needed_without_experts() + experts;
  return o;
}

void Route(OnlinePlacement& p, int n_layer, std::vector<int32_t> ids, int tokens) {
  const std::vector<float> w(ids.size(), 1.0f / ids.size());
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < n_layer; ++l) p.Observe(l, ids, w);
    ASSERT_TRUE(p.EndToken().ok());
  }
}

TEST(OnlinePlacementTest, AutoPlansAfterWarmupAndFollowsTheRouting) {
  auto m = Describe("tiny-qwen3next");
  ASSERT_NE(m, nullptr);
  const model::HParams& hp = m->hparams();
  ASSERT_EQ(hp.n_expert_used, 2);
  PlacementOptions o = OptionsFor(*m, 2);
  o.replan_every = 4;
  auto p = OnlinePlacement::Create(*m, 1, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->plans_made(), 0);
  EXPECT_LE((*p)->resident_bytes(), (*p)->expert_budget());

  Route(**p, hp.n_layer, {0, 1}, 8);  // the warm-up: every layer routes to experts 0 and 1
  EXPECT_EQ((*p)->plans_made(), 1);
  for (int l = 0; l < hp.n_layer; ++l) {
    EXPECT_TRUE((*p)->IsResident(l, 0) && (*p)->IsResident(l, 1)) << "layer " << l;
  }
  const uint64_t hits_before = (*p)->hits();
  Route(**p, hp.n_layer, {0, 1}, 2);
  EXPECT_EQ((*p)->hits() - hits_before, uint64_t(2 * hp.n_layer * 2));  // every route hits

  // The traffic moves to experts 5 and 6. Right after the move nothing hits; once re-planning
  // (every 4 tokens) has seen enough of it, the planner moves budget to the new experts.
  uint64_t h0 = (*p)->hits();
  Route(**p, hp.n_layer, {5, 6}, 4);
  const uint64_t hits_right_after_move = (*p)->hits() - h0;
  Route(**p, hp.n_layer, {5, 6}, 4);
  h0 = (*p)->hits();
  Route(**p, hp.n_layer, {5, 6}, 4);
  const uint64_t hits_after_replans = (*p)->hits() - h0;
  EXPECT_EQ(hits_right_after_move, 0u);
  EXPECT_GT(hits_after_replans, 0u);
  EXPECT_GE((*p)->plans_made(), 4);
  EXPECT_LE((*p)->resident_bytes(), (*p)->expert_budget());
  EXPECT_EQ((*p)->hits() + (*p)->misses(), uint64_t(22 * hp.n_layer * 2));
}

// With room for every expert, the plan made after the warm-up keeps every expert on the card,
// also those the warm-up never routed to (they cost nothing in the planner's model), so later
// routing to them hits.
TEST(OnlinePlacementTest, AutoKeepsEveryExpertWhenTheBudgetHoldsThemAll) {
  auto m = Describe("tiny-qwen3next");
  ASSERT_NE(m, nullptr);
  const model::HParams& hp = m->hparams();
  auto p = OnlinePlacement::Create(*m, 1, OptionsFor(*m, hp.n_expert));
  ASSERT_TRUE(p.ok()) << p.status();
  Route(**p, hp.n_layer, {0, 1}, 8);  // the warm-up sees two experts a layer
  ASSERT_EQ((*p)->plans_made(), 1);
  for (int l = 0; l < hp.n_layer; ++l) {
    for (int e = 0; e < hp.n_expert; ++e) EXPECT_TRUE((*p)->IsResident(l, e)) << l << "/" << e;
  }
  const uint64_t misses = (*p)->misses();
  Route(**p, hp.n_layer, {5, 6}, 2);
  EXPECT_EQ((*p)->misses(), misses);
}

// A plan for the budget and context of `o` (fingerprint 42) from a census in which every layer
// routes to experts 3 and 4, written to a temporary plan.json.
Plan WritePlan(const model::Model& m, const PlacementOptions& o, const fs::path& path) {
  const model::HParams& hp = m.hparams();
  Census c;
  c.model_name = m.source();
  c.n_layer = hp.n_layer;
  c.n_expert = hp.n_expert;
  c.k = hp.n_expert_used;
  c.tokens = 100;
  c.counts.assign(size_t(hp.n_layer) * hp.n_expert, 0);
  for (int l = 0; l < hp.n_layer; ++l) {
    c.counts[size_t(l) * hp.n_expert + 3] = 100;
    c.counts[size_t(l) * hp.n_expert + 4] = 100;
  }
  c.mass.assign(c.counts.size(), 0.0);
  auto in = MakeCostInputs(m, c, Ceilings());
  EXPECT_TRUE(in.ok()) << in.status();
  auto mem = ComputeMemoryBudget(m, o.vram_budget, o.context, o.kv_cache, 0);
  EXPECT_TRUE(mem.ok()) << mem.status();
  if (!in.ok() || !mem.ok()) return Plan();
  const Plan plan = MakePlan(*in, *mem, Policy::kPlanner, m.source(), 42);
  std::ofstream(path) << PlanToJson(plan).dump();
  return plan;
}

fs::path TempPlanPath(const std::string& tag) {
  return fs::temp_directory_path() /
         ("tandem_plan_" + tag + "_" + std::to_string(::getpid()) + ".json");
}

TEST(OnlinePlacementTest, PlanFileIsAppliedAndRefusedForAnotherModel) {
  auto m = Describe("tiny-qwen3next");
  ASSERT_NE(m, nullptr);
  const model::HParams& hp = m->hparams();
  PlacementOptions o = OptionsFor(*m, 3);
  const fs::path path = TempPlanPath("model");
  const Plan plan = WritePlan(*m, o, path);
  ASSERT_EQ(plan.resident.size(), size_t(hp.n_layer) * hp.n_expert);

  o.source = path.string();
  auto p = OnlinePlacement::Create(*m, 42, o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->residency(), plan.resident);
  for (int l = 0; l < hp.n_layer; ++l) EXPECT_TRUE((*p)->IsResident(l, 3) && (*p)->IsResident(l, 4));

  auto other_fingerprint = OnlinePlacement::Create(*m, 43, o);
  ASSERT_FALSE(other_fingerprint.ok());
  EXPECT_NE(other_fingerprint.status().message().find("was made for"), std::string::npos);

  auto other = Describe("tiny-flash-next");  // 8 layers x 16 experts, top-4
  ASSERT_NE(other, nullptr);
  auto wrong_shape = OnlinePlacement::Create(*other, 42, o);
  ASSERT_FALSE(wrong_shape.ok());
  EXPECT_NE(wrong_shape.status().message().find("the plan is for"), std::string::npos);
  fs::remove(path);
}

// A plan counts the KV cache at its own context and cache type. Where the engine runs another,
// the bytes are counted again, and a plan whose experts no longer fit is refused, naming both.
TEST(OnlinePlacementTest, PlanFileIsCountedAgainForTheEnginesContextAndCache) {
  auto m = Describe("tiny-qwen3next");
  ASSERT_NE(m, nullptr);
  PlacementOptions o = OptionsFor(*m, 2);  // room for 2 experts a layer beside an f32 cache
  auto f32_cache = ComputeMemoryBudget(*m, o.vram_budget, o.context, KvCache::kF32, 0);
  auto f16_cache = ComputeMemoryBudget(*m, o.vram_budget, o.context, KvCache::kF16, 0);
  ASSERT_TRUE(f32_cache.ok() && f16_cache.ok());
  ASSERT_GT(f32_cache->kv_bytes, f16_cache->kv_bytes);
  o.vram_budget -= f32_cache->kv_bytes - f16_cache->kv_bytes;  // ... and beside an f16 cache
  o.kv_cache = KvCache::kF16;
  const fs::path path = TempPlanPath("cache");
  const Plan plan = WritePlan(*m, o, path);  // experts 3 and 4 of every layer: the whole room
  ASSERT_EQ(plan.resident_bytes, plan.memory.expert_budget());
  o.source = path.string();

  auto same = OnlinePlacement::Create(*m, 42, o);  // as planned
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ((*same)->memory().kv_cache, KvCache::kF16);
  EXPECT_EQ((*same)->memory().kv_bytes, plan.memory.kv_bytes);

  o.kv_cache = KvCache::kF32;
  auto f32 = OnlinePlacement::Create(*m, 42, o);
  ASSERT_FALSE(f32.ok());
  const std::string msg(f32.status().message());
  EXPECT_NE(msg.find("the plan keeps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokens of f32 KV cache (the plan counted 64 tokens of f16)"),
            std::string::npos)
      << msg;

  o.kv_cache = KvCache::kF16;
  o.context = 4 * plan.memory.context;
  auto longer = OnlinePlacement::Create(*m, 42, o);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(std::string(longer.status().message()).find("at 256 tokens of f16"), std::string::npos)
      << longer.status();

  o.context = plan.memory.context;
  o.vram_budget *= 2;  // a larger budget recounts and keeps the plan
  auto larger = OnlinePlacement::Create(*m, 42, o);
  ASSERT_TRUE(larger.ok()) << larger.status();
  EXPECT_EQ((*larger)->residency(), plan.resident);
  EXPECT_EQ((*larger)->memory().vram_budget, o.vram_budget);
  fs::remove(path);
}

TEST(OnlinePlacementTest, AutoNeedsABudget) {
  auto m = Describe("tiny-qwen3moe");
  ASSERT_NE(m, nullptr);
  PlacementOptions o;
  o.source = "auto";
  auto p = OnlinePlacement::Create(*m, 1, o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("--vram-budget"), std::string::npos);
}

TEST(OnlinePlacementTest, EngineCountsEveryRoute) {
  engine::EngineOptions o;
  o.model = "synth:tiny-flash-next";
  o.placement = "auto";
  o.vram_budget = uint64_t{1} << 30;
  o.replan_every = 4;
  auto e = engine::Engine::Load(o);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_NE((*e)->placement(), nullptr);
  auto s = (*e)->NewSession();
  std::vector<float> logits;
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9};
  ASSERT_TRUE(s->Prefill(prompt, false, &logits).ok());
  ASSERT_TRUE(s->Decode(10, &logits).ok());
  const model::HParams& hp = (*e)->hparams();
  EXPECT_EQ((*e)->placement()->hits() + (*e)->placement()->misses(),
            uint64_t(6) * hp.n_layer * hp.n_expert_used);

  o.placement = "";
  auto bad = engine::Engine::Load(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--replan-every needs --placement"), std::string::npos);
}

}  // namespace
}  // namespace tandem::scheduler
