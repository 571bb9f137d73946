// The placement planner: how many bytes the VRAM budget leaves for routed experts, a cost model of
// one decode step, and policies that choose the resident (layer, expert) set. The cost model:
//   per layer l, GPU time  G_l = (dense_l + b_l * S_res) / HBM
//                CPU time  C_l = b_l * S_off / host + handoff * P(any off-card expert is hit)
//   step time = sum_l max(G_l, C_l) + output_bytes / HBM
// where S_res / S_off are the summed routing probabilities of resident / off-card experts (expected
// experts hit), and P(any off) = 1 - prod_off (1 - p_e) treats experts as independent (a token's
// top-k are not, but the approximation is close when p_e is small). Taking max of expectations is a
// lower bound of the expected max (Jensen); replay measures the exact per-token max.
// Nothing here reads tensor bytes or touches a device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/model/model.h"
#include "scheduler/census.h"

namespace tandem::scheduler {

// Default ceilings: measured on the H200 device machine (docs DESIGN.md, 2026-11-29).
struct Ceilings {
  double hbm_bytes_per_s = 3954e9;   // HBM device-to-device copy
  double host_bytes_per_s = 77e9;    // host RAM read, 16 threads, AVX2 stream
  double pcie_bytes_per_s = 52e9;    // pinned host->device copy (52.4 GB/s measured)
  double handoff_s = 1.7e-6;         // GPU<->CPU flag round trip through mapped pinned memory
};

// Scratch kept free for activations, router outputs and mailboxes: the documented default.
inline constexpr uint64_t kDefaultScratchBytes = uint64_t{512} << 20;

// The attention layers' KV cache element, as the engine's --cache-type sets it (f32 is its
// default): 4 or 2 bytes an element of the budget's KV cache.
enum class KvCache { kF32, kF16 };
absl::StatusOr<KvCache> ParseKvCache(const std::string& name);  // "f32" or "f16"
const char* KvCacheName(KvCache kv);

struct MemoryBudget {
  uint64_t vram_budget = 0;
  uint64_t dense_bytes = 0;     // every non-expert tensor (embeddings, output, dense blocks)
  uint64_t kv_bytes = 0;        // K and V of the attention layers at `context` tokens
  KvCache kv_cache = KvCache::kF32;  // kv_bytes' element
  uint64_t deltanet_bytes = 0;  // fp32 conv + recurrent state of the DeltaNet layers
  uint64_t scratch_bytes = 0;
  int context = 0;
  uint64_t needed_without_experts() const {
    return dense_bytes + kv_bytes + deltanet_bytes + scratch_bytes;
  }
  uint64_t expert_budget() const {
    return vram_budget > needed_without_experts() ? vram_budget - needed_without_experts() : 0;
  }
};

// Byte accounting from the model's ValidationReport; an error naming the needed bytes when the
// dense weights, caches and scratch alone exceed the budget.
absl::StatusOr<MemoryBudget> ComputeMemoryBudget(const model::Model& model, uint64_t vram_budget,
                                                 int context, KvCache kv_cache,
                                                 uint64_t scratch_bytes);

// Everything the objective needs, independent of the model file (stored in plan.json).
struct CostInputs {
  int n_layer = 0;
  int n_expert = 0;
  int k = 0;
  std::vector<double> prob;                 // [layer][expert], sums to k over a layer
  std::vector<uint64_t> bytes_per_expert;   // [layer]
  std::vector<uint64_t> dense_layer_bytes;  // [layer], read every step
  uint64_t output_bytes = 0;                // LM head + final norm, read every step
  Ceilings ceilings;
};

// Fills per-layer bytes from the model and probabilities from the census; checks that they agree.
absl::StatusOr<CostInputs> MakeCostInputs(const model::Model& model, const Census& census,
                                          const Ceilings& ceilings);

// Expected step time (seconds) of a residency table [layer][expert] under the cost model.
double ExpectedStepSeconds(const CostInputs& in, const std::vector<uint8_t>& resident);
// Expected share of routes that land on resident experts.
double ExpectedHitRate(const CostInputs& in, const std::vector<uint8_t>& resident);
uint64_t ResidentBytes(const CostInputs& in, const std::vector<uint8_t>& resident);

enum class Policy { kPlanner, kUniform, kFrequency, kFirstLayersOnCpu };
absl::StatusOr<Policy> ParsePolicy(const std::string& name);
const char* PolicyName(Policy policy);

// The resident set a policy chooses within `expert_budget` bytes (never more). The planner's
// optimum leaves the experts the census never saw off the card (they change nothing in the cost
// model); the budget it leaves over then holds them, the layers in turn.
std::vector<uint8_t> ChooseResidents(const CostInputs& in, uint64_t expert_budget, Policy policy);

struct Plan {
  Policy policy = Policy::kPlanner;
  std::string model_name;
  uint64_t model_fingerprint = 0;
  MemoryBudget memory;
  uint64_t expert_budget = 0;
  CostInputs inputs;
  std::vector<uint8_t> resident;  // [layer][expert]
  uint64_t resident_bytes = 0;
  double expected_hit_rate = 0;
  double expected_step_s = 0;
};

Plan MakePlan(const CostInputs& in, const MemoryBudget& memory, Policy policy,
              const std::string& model_name, uint64_t model_fingerprint);
nlohmann::json PlanToJson(const Plan& plan);
absl::StatusOr<Plan> PlanFromJson(const nlohmann::json& json, const std::string& name);
absl::StatusOr<Plan> ReadPlan(const std::string& path);

}  // namespace tandem::scheduler
