// Expert residency while serving: the table (layer, expert) -> resident on the card or not that a
// GPU/offload backend consumes, chosen from a plan.json or planned online ("auto") from the routing
// decisions the engine observes, and re-planned every N tokens. It also counts how many routes
// landed on resident experts. It computes nothing and moves no bytes itself.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/model/model.h"
#include "scheduler/census.h"
#include "scheduler/planner.h"

namespace tandem::scheduler {

struct PlacementOptions {
  std::string source;        // "auto" or a plan.json path
  uint64_t vram_budget = 0;  // bytes; required for auto and for re-planning
  int context = 4096;        // tokens of KV cache the budget must hold
  KvCache kv_cache = KvCache::kF32;  // the engine's --cache-type
  uint64_t scratch_bytes = kDefaultScratchBytes;
  int replan_every = 0;      // re-plan from the observed census every N tokens; 0: never (file plan)
  // auto: tokens observed before the first plan; until then the residency is the uniform policy's.
  int warmup_tokens = 256;
  Ceilings ceilings;
};

class OnlinePlacement {
 public:
  // `fingerprint` identifies the model (a plan for another model is refused).
  static absl::StatusOr<std::unique_ptr<OnlinePlacement>> Create(const model::Model& model,
                                                                 uint64_t fingerprint,
                                                                 const PlacementOptions& options);

  // One layer's routing for the current token; counts hits against the current residency.
  void Observe(int layer, std::span<const int32_t> experts, std::span<const float> weights);
  // Closes the current token; re-plans at warm-up end and every replan_every tokens.
  absl::Status EndToken();

  bool IsResident(int layer, int expert) const {
    return residency_[static_cast<size_t>(layer) * n_expert_ + expert] != 0;
  }
  const std::vector<uint8_t>& residency() const { return residency_; }  // [layer][expert]
  uint64_t resident_bytes() const;
  uint64_t expert_budget() const { return memory_.expert_budget(); }
  const MemoryBudget& memory() const { return memory_; }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  double hit_rate() const {
    return hits_ + misses_ > 0 ? double(hits_) / double(hits_ + misses_) : 0.0;
  }
  int plans_made() const { return plans_made_; }
  const std::string& description() const { return description_; }

 private:
  OnlinePlacement(const model::Model& model, PlacementOptions options)
      : model_(model), options_(std::move(options)) {}
  absl::Status Replan();

  const model::Model& model_;
  PlacementOptions options_;
  MemoryBudget memory_;
  int n_layer_ = 0, n_expert_ = 0, k_ = 0;
  std::vector<uint64_t> bytes_per_expert_;  // [layer]
  std::vector<uint8_t> residency_;
  Census census_;  // routing observed so far (counts, mass, tokens)
  uint64_t hits_ = 0, misses_ = 0;
  uint64_t tokens_since_plan_ = 0;
  int plans_made_ = 0;
  std::string description_;
};

}  // namespace tandem::scheduler
