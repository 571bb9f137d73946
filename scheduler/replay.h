// Replay: run a routing log against placement policies and count exactly which routes would have
// found their expert in VRAM, with the step time the planner's cost model gives each token. Static
// policies keep one residency table; dynamic ones (per-layer LRU, LFRU, online re-placement) change
// it between tokens and pay for migrations at PCIe bandwidth. Model-based numbers, not timings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "scheduler/planner.h"
#include "scheduler/routing_trace.h"

namespace tandem::scheduler {

struct ReplayOptions {
  int replan_every = 512;       // online re-placement: tokens between re-plans
  int window = 2048;            // online re-placement: recent tokens blended with the census
  double lfru_half_life = 32;   // LFRU: tokens for an access to lose half its weight
};

struct PolicyResult {
  std::string name;
  uint64_t routes = 0;
  uint64_t hits = 0;
  std::vector<double> layer_hit_rate;
  double mean_step_s = 0;      // mean over tokens of the per-token model time
  uint64_t migrated_bytes = 0;
  uint64_t resident_bytes = 0;  // most VRAM the policy held for experts
  double hit_rate() const { return routes ? double(hits) / double(routes) : 0; }
  double tok_s() const { return mean_step_s > 0 ? 1.0 / mean_step_s : 0; }
};

// Per-token time of one decode step: per layer max(GPU, CPU + handoff if any miss), summed, plus
// the LM head; migrations run on the copy engine beside the compute, so a step takes at least
// migrated bytes / PCIe.
PolicyResult ReplayStatic(const CostInputs& in, const std::vector<uint8_t>& resident,
                          const RoutingTrace& trace, const std::string& name);
// Per-layer caches with `capacity[l]` slots, warmed with the census's most probable experts. A miss
// runs on the CPU and brings the expert in, evicting the least recently used (lfru = false) or the
// one with the least exponentially decayed access count (lfru = true).
PolicyResult ReplayCache(const CostInputs& in, const std::vector<int>& capacity,
                         const RoutingTrace& trace, bool lfru, const ReplayOptions& options);
// Starts from `resident` and re-plans every options.replan_every tokens with the planner, on the
// census blended with the last options.window tokens; newly resident experts are migrated.
PolicyResult ReplayOnline(const CostInputs& in, uint64_t expert_budget,
                          const std::vector<uint8_t>& resident, const RoutingTrace& trace,
                          const ReplayOptions& options);

// Checks that a log belongs to the plan's model (layers, experts, k, fingerprint).
absl::Status CheckTraceMatchesPlan(const Plan& plan, const RoutingTrace& trace,
                                   const std::string& trace_name);

// The plan itself, the four static policies at the plan's budget, LRU, LFRU and online
// re-placement with the same expert bytes (caches get the uniform policy's per-layer counts).
std::vector<PolicyResult> ReplayAll(const Plan& plan, const RoutingTrace& trace,
                                    const ReplayOptions& options);

// Report as JSON, ending with "summary": {policy: {hit_rate, expected_tok_s}}.
nlohmann::json ReplayToJson(const Plan& plan, const std::vector<PolicyResult>& results);
std::string ReplayTable(const std::vector<PolicyResult>& results);

struct SweepPoint {
  uint64_t expert_budget = 0;
  std::vector<PolicyResult> results;  // same policy order at every point
};
// Every policy at `points` budgets from 0 to all experts' bytes.
std::vector<SweepPoint> Sweep(const Plan& plan, const RoutingTrace& trace,
                              const ReplayOptions& options, int points);
// Two panels (hit rate, expected tok/s) against the expert budget, one line per policy.
std::string SweepSvg(const std::vector<SweepPoint>& sweep, const std::string& title);

}  // namespace tandem::scheduler
