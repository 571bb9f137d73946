// Synthetic routing traces for tests and benchmarks when no real log is at hand. Each layer has a
// global expert popularity (log-normal), each domain and each sequence perturb it, and experts
// chosen in the last few tokens get a bonus (temporal reuse). A token's k experts are drawn without
// replacement in proportion to exp(logit) (Gumbel top-k). Presets are calibrated against published
// shapes of real routing (see CalibrationReport and tests/scheduler/trace_synth_test.cc).
// It produces records in memory; writing them is the routing-log writer's job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/census.h"
#include "scheduler/routing_trace.h"

namespace tandem::scheduler {

struct TracePreset {
  std::string name;
  double sigma_global = 1;    // log-popularity spread shared by every prompt
  double sigma_domain = 0;    // spread of a domain's shift (domain shift between prompts)
  double sigma_sequence = 0;  // spread of one prompt's own shift
  double reuse_bonus = 0;     // logit bonus for an expert chosen 1 token ago
  double reuse_decay = 1;     // tokens over which the bonus decays by e
  int reuse_window = 8;       // tokens of history that can earn a bonus
  int n_domains = 1;
  int sequence_tokens = 256;  // tokens per sequence (prompt)
};

// "census-skewed" and "mild-skew-high-reuse"; an error lists the names.
absl::StatusOr<TracePreset> FindTracePreset(const std::string& name);
std::vector<std::string> TracePresetNames();

// Generates `tokens` tokens of a model with the given header's layers/experts/k.
RoutingTrace SynthesizeTrace(const RoutingLogHeader& header, uint64_t tokens,
                             const TracePreset& preset, uint64_t seed);

// The calibration targets measured on a trace.
struct CalibrationReport {
  double top41_share = 0;        // mean over layers: routes covered by the top 41% of experts
  double experts_for_90 = 0;     // mean over layers: share of experts needed for 90% of routes
  int median_reuse_distance = 0;
  double static_cover_40 = 0;    // top 40% learned on even sequences, coverage on odd ones
  double per_prompt_cover_40 = 0;  // each odd sequence's own top 40%, coverage on itself
};
CalibrationReport Calibrate(const RoutingTrace& trace);

}  // namespace tandem::scheduler
