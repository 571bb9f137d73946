#include "scheduler/online_placement.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/base/sizes.h"
#include "runtime/base/status_macros.h"

namespace tandem::scheduler {

absl::StatusOr<std::unique_ptr<OnlinePlacement>> OnlinePlacement::Create(
    const model::Model& model, uint64_t fingerprint, const PlacementOptions& options) {
  const model::HParams& hp = model.hparams();
  auto p = std::unique_ptr<OnlinePlacement>(new OnlinePlacement(model, options));
  p->n_layer_ = hp.n_layer;
  p->n_expert_ = hp.n_expert;
  p->k_ = hp.n_expert_used;
  p->census_.model_name = model.source();
  p->census_.model_fingerprint = fingerprint;
  p->census_.n_layer = hp.n_layer;
  p->census_.n_expert = hp.n_expert;
  p->census_.k = hp.n_expert_used;
  p->census_.counts.assign(size_t(hp.n_layer) * hp.n_expert, 0);
  p->census_.mass.assign(p->census_.counts.size(), 0.0);
  p->census_.reuse.assign(kMaxReuseDistance, 0);
  if (options.replan_every < 0 || options.warmup_tokens < 1) {
    return absl::InvalidArgumentError("--replan-every must be >= 0 and the warm-up >= 1 token");
  }

  if (options.source == "auto") {
    if (options.vram_budget == 0) {
      return absl::InvalidArgumentError("--placement auto needs --vram-budget (e.g. 24GiB)");
    }
    TANDEM_ASSIGN_OR_RETURN(p->memory_,
                            ComputeMemoryBudget(model, options.vram_budget, options.context,
                                                options.kv_cache, options.scratch_bytes));
    // Until the warm-up has been observed every expert is equally likely: the uniform policy.
    Census flat = p->census_;
    flat.tokens = 1;
    for (uint64_t& c : flat.counts) c = 1;
    TANDEM_ASSIGN_OR_RETURN(CostInputs in, MakeCostInputs(model, flat, options.ceilings));
    p->bytes_per_expert_ = in.bytes_per_expert;
    p->residency_ = ChooseResidents(in, p->memory_.expert_budget(), Policy::kUniform);
    p->description_ = absl::StrCat("auto (uniform for the first ", options.warmup_tokens,
                                   " tokens, then planned", options.replan_every > 0
                                       ? absl::StrCat(" every ", options.replan_every, " tokens")
                                       : std::string(), ")");
    return p;
  }

  TANDEM_ASSIGN_OR_RETURN(Plan plan, ReadPlan(options.source));
  const CostInputs& in = plan.inputs;
  if (in.n_layer != hp.n_layer || in.n_expert != hp.n_expert || in.k != hp.n_expert_used) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.source, ": the plan is for ", in.n_layer, " layers x ", in.n_expert,
        " experts (top-", in.k, "), but ", model.source(), " has ", hp.n_layer, " x ",
        hp.n_expert, " (top-", hp.n_expert_used, ")"));
  }
  if (plan.model_fingerprint != 0 && plan.model_fingerprint != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.source, ": the plan was made for ", plan.model_name,
        ", whose tensors differ from ", model.source(), " (fingerprint ",
        absl::StrFormat("%016x", plan.model_fingerprint), " vs ",
        absl::StrFormat("%016x", fingerprint), ")"));
  }
  // The plan's byte accounting holds where the engine runs as the plan assumed; otherwise it is
  // recounted for the engine's budget (the plan's unless given), context and KV cache, so that a
  // plan made for a shorter context or an f16 cache cannot over-commit the card.
  p->memory_ = plan.memory;
  const uint64_t budget = options.vram_budget != 0 ? options.vram_budget : plan.memory.vram_budget;
  if (budget != plan.memory.vram_budget || options.context != plan.memory.context ||
      options.kv_cache != plan.memory.kv_cache) {
    TANDEM_ASSIGN_OR_RETURN(p->memory_,
                            ComputeMemoryBudget(model, budget, options.context, options.kv_cache,
                                                plan.memory.scratch_bytes));
  }
  p->bytes_per_expert_ = in.bytes_per_expert;
  p->residency_ = plan.resident;
  if (p->resident_bytes() > p->memory_.expert_budget()) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.source, ": the plan keeps ", FormatBytes(p->resident_bytes()),
        " of experts resident but the budget leaves ", FormatBytes(p->memory_.expert_budget()),
        " at ", p->memory_.context, " tokens of ", KvCacheName(p->memory_.kv_cache),
        " KV cache (the plan counted ", plan.memory.context, " tokens of ",
        KvCacheName(plan.memory.kv_cache),
        "); make it again with the engine's --context and --cache-type"));
  }
  p->description_ = absl::StrCat(options.source, " (", PolicyName(plan.policy), ")",
                                 options.replan_every > 0
                                     ? absl::StrCat(", re-planned every ", options.replan_every,
                                                    " tokens")
                                     : std::string());
  p->plans_made_ = 1;
  return p;
}

uint64_t OnlinePlacement::resident_bytes() const {
  uint64_t total = 0;
  for (int l = 0; l < n_layer_; ++l) {
    for (int e = 0; e < n_expert_; ++e) total += IsResident(l, e) ? bytes_per_expert_[l] : 0;
  }
  return total;
}

void OnlinePlacement::Observe(int layer, std::span<const int32_t> experts,
                              std::span<const float> weights) {
  for (size_t i = 0; i < experts.size(); ++i) {
    const size_t at = static_cast<size_t>(layer) * n_expert_ + experts[i];
    (residency_[at] ? hits_ : misses_) += 1;
    census_.counts[at] += 1;
    census_.mass[at] += i < weights.size() ? weights[i] : 0.0f;
  }
}

absl::Status OnlinePlacement::EndToken() {
  census_.tokens += 1;
  tokens_since_plan_ += 1;
  const bool auto_mode = options_.source == "auto";
  const bool warmup_done = auto_mode && plans_made_ == 0 &&
                           census_.tokens >= static_cast<uint64_t>(options_.warmup_tokens);
  const bool periodic = options_.replan_every > 0 &&
                        tokens_since_plan_ >= static_cast<uint64_t>(options_.replan_every) &&
                        (plans_made_ > 0 || !auto_mode);
  if (warmup_done || periodic) return Replan();
  return absl::OkStatus();
}

absl::Status OnlinePlacement::Replan() {
  TANDEM_ASSIGN_OR_RETURN(CostInputs in, MakeCostInputs(model_, census_, options_.ceilings));
  residency_ = ChooseResidents(in, memory_.expert_budget(), Policy::kPlanner);
  tokens_since_plan_ = 0;
  plans_made_ += 1;
  return absl::OkStatus();
}

}  // namespace tandem::scheduler
