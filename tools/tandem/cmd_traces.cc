// `tandem traces`: synthetic routing logs of a named synth shape, in the engine's log format, with
// calibrated popularity skew, temporal reuse and domain shift.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/engine/engine.h"
#include "scheduler/routing_log.h"
#include "runtime/model/synth.h"
#include "scheduler/trace_synth.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {
namespace {

struct TracesArgs {
  std::string shape;
  uint64_t tokens = 4096;
  std::string preset = "census-skewed";
  uint64_t seed = 1;
  std::string output;
};

int RunTraces(const TracesArgs& a) {
  auto preset = scheduler::FindTracePreset(a.preset);
  if (!preset.ok()) return Fail(preset.status());
  model::OpenOptions open;
  open.materialize = false;
  auto model = model::OpenModel(absl::StrCat("synth:", a.shape), open);
  if (!model.ok()) return Fail(model.status());
  const model::HParams& hp = (*model)->hparams();
  if (hp.n_expert <= 0) return Fail(absl::InvalidArgumentError(absl::StrCat(a.shape, " has no experts")));
  scheduler::RoutingLogHeader header;
  header.n_layer = hp.n_layer;
  header.n_expert = hp.n_expert;
  header.n_expert_used = hp.n_expert_used;
  header.model_fingerprint = engine::ModelFingerprint(**model);
  header.model_name = (*model)->source();
  const scheduler::RoutingTrace trace = scheduler::SynthesizeTrace(header, a.tokens, *preset, a.seed);
  std::error_code ec;
  std::filesystem::remove(a.output, ec);  // a fresh log, not an append
  auto writer = scheduler::RoutingLogWriter::Open(a.output, header);
  if (!writer.ok()) return Fail(writer.status());
  std::vector<int32_t> ids(hp.n_expert_used);
  for (size_t t = 0; t < trace.n_tokens(); ++t) {
    for (int l = 0; l < hp.n_layer; ++l) {
      std::span<const uint16_t> src = trace.Ids(t, l);
      std::copy(src.begin(), src.end(), ids.begin());
      (*writer)->SetLayer(l, ids, trace.Weights(t, l));
    }
    absl::Status s = (*writer)->WriteToken(trace.sequence[t], trace.position[t], trace.token[t]);
    if (!s.ok()) return Fail(s);
  }
  const scheduler::CalibrationReport r = scheduler::Calibrate(trace);
  std::printf(
      "%s: %zu tokens of %s (%s, seed %llu)\ntop 41%% of experts carry %.1f%% of routes; 90%% of "
      "routes need %.1f%% of experts; median reuse distance %d; a static 40%% set learned on "
      "other prompts covers %.1f%%, a per-prompt 40%% set %.1f%%\n",
      a.output.c_str(), trace.n_tokens(), header.model_name.c_str(), a.preset.c_str(),
      (unsigned long long)a.seed, 100 * r.top41_share, 100 * r.experts_for_90,
      r.median_reuse_distance, 100 * r.static_cover_40, 100 * r.per_prompt_cover_40);
  return 0;
}

}  // namespace

void RegisterTraces(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TracesArgs>();
  CLI::App* cmd = app.add_subcommand(
      "traces", "Synthesise a routing log for a synth shape (calibrated presets) for planning "
                "experiments when no real log is at hand.");
  cmd->add_option("--shape", args->shape, "Synth shape name (e.g. flash-next-125b)")->required();
  cmd->add_option("--tokens", args->tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--preset", args->preset, "census-skewed or mild-skew-high-reuse")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Random seed")->capture_default_str();
  cmd->add_option("-o,--output", args->output, "Write the routing log here (overwritten)")->required();
  cmd->callback([args, exit_code] { *exit_code = RunTraces(*args); });
}

}  // namespace tandem::cli
