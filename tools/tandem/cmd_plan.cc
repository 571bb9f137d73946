// `tandem plan`: choose the resident experts for a VRAM budget from a census and a model's byte
// accounting (no weights are generated or read), and write plan.json.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/base/sizes.h"
#include "runtime/engine/engine.h"
#include "scheduler/planner.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {
namespace {

struct PlanArgs {
  std::string census;
  std::string model;
  std::string budget = "24GiB";
  int context = 4096;
  std::string cache_type = "f32";
  std::string policy = "planner";
  std::string scratch = "512MiB";
  std::string output;
  double hbm_gbps = 3954, host_gbps = 77, pcie_gbps = 52, handoff_us = 1.7;
};

int RunPlan(const PlanArgs& a) {
  auto census = scheduler::ReadCensus(a.census);
  if (!census.ok()) return Fail(census.status());
  auto policy = scheduler::ParsePolicy(a.policy);
  if (!policy.ok()) return Fail(policy.status());
  auto budget = ParseBytes(a.budget);
  if (!budget.ok()) return Fail(budget.status());
  auto scratch = ParseBytes(a.scratch);
  if (!scratch.ok()) return Fail(scratch.status());
  auto kv_cache = scheduler::ParseKvCache(a.cache_type);
  if (!kv_cache.ok()) return Fail(kv_cache.status());
  model::OpenOptions open;
  open.materialize = false;
  auto model = model::OpenModel(a.model, open);
  if (!model.ok()) return Fail(model.status());
  const uint64_t fingerprint = engine::ModelFingerprint(**model);
  if (census->model_fingerprint != fingerprint) {
    std::fprintf(stderr,
                 "warning: the census was taken on %s (fingerprint %016llx), not on %s "
                 "(fingerprint %016llx); planning with its counts anyway\n",
                 census->model_name.c_str(), (unsigned long long)census->model_fingerprint,
                 (*model)->source().c_str(), (unsigned long long)fingerprint);
  }
  auto memory = scheduler::ComputeMemoryBudget(**model, *budget, a.context, *kv_cache, *scratch);
  if (!memory.ok()) return Fail(memory.status());
  scheduler::Ceilings ceilings;
  ceilings.hbm_bytes_per_s = a.hbm_gbps * 1e9;
  ceilings.host_bytes_per_s = a.host_gbps * 1e9;
  ceilings.pcie_bytes_per_s = a.pcie_gbps * 1e9;
  ceilings.handoff_s = a.handoff_us * 1e-6;
  auto inputs = scheduler::MakeCostInputs(**model, *census, ceilings);
  if (!inputs.ok()) return Fail(inputs.status());
  const scheduler::Plan plan =
      scheduler::MakePlan(*inputs, *memory, *policy, (*model)->source(), fingerprint);
  const std::string text = scheduler::PlanToJson(plan).dump(1);
  absl::Status s = WriteFileAtomically(
      a.output, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  if (!s.ok()) return Fail(s);
  const int64_t n_resident = std::count(plan.resident.begin(), plan.resident.end(), 1);
  std::printf(
      "%s plan for %s at %s: dense %s + KV %s (%d tokens, %s) + DeltaNet %s + scratch %s leave %s "
      "for experts\nresident %lld of %lld experts (%s), expected hit rate %.1f%%, expected step "
      "%.3f ms (%.1f tok/s)\n",
      scheduler::PolicyName(plan.policy), (*model)->source().c_str(), FormatBytes(*budget).c_str(),
      FormatBytes(memory->dense_bytes).c_str(), FormatBytes(memory->kv_bytes).c_str(), a.context,
      scheduler::KvCacheName(memory->kv_cache), FormatBytes(memory->deltanet_bytes).c_str(),
      FormatBytes(memory->scratch_bytes).c_str(), FormatBytes(plan.expert_budget).c_str(),
      (long long)n_resident, (long long)plan.resident.size(),
      FormatBytes(plan.resident_bytes).c_str(), 100 * plan.expected_hit_rate,
      1e3 * plan.expected_step_s, plan.expected_step_s > 0 ? 1 / plan.expected_step_s : 0.0);
  return 0;
}

}  // namespace

void RegisterPlan(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Choose which experts live in VRAM for a budget, from a census (tandem census) and "
              "the model's sizes; writes plan.json.");
  cmd->add_option("--census", args->census, "census.json from `tandem census`")->required();
  cmd->add_option("-m,--model", args->model, "Model: .gguf, HF directory or synth:NAME")->required();
  cmd->add_option("--vram-budget", args->budget, "All VRAM Tandem may use (e.g. 24GiB)")
      ->capture_default_str();
  cmd->add_option("--context", args->context, "Context tokens the KV cache must hold")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cache-type", args->cache_type,
                  "KV cache element the engine will run with (its --cache-type): f32 counts 4 "
                  "bytes an element, f16 2. When the engine loads a plan made for another "
                  "context or cache type, it counts the bytes again and refuses the plan if its "
                  "experts no longer fit")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  cmd->add_option("--policy", args->policy,
                  "planner (cost model), uniform (same count per layer), frequency (global top "
                  "counts), first-layers-on-cpu (llama.cpp --n-cpu-moe)")
      ->capture_default_str();
  cmd->add_option("--scratch", args->scratch, "VRAM kept for activations and mailboxes")
      ->capture_default_str();
  cmd->add_option("--hbm-gbps", args->hbm_gbps, "GPU memory bandwidth ceiling (GB/s)")
      ->capture_default_str();
  cmd->add_option("--host-gbps", args->host_gbps, "Host RAM read bandwidth of the CPU pool (GB/s)")
      ->capture_default_str();
  cmd->add_option("--pcie-gbps", args->pcie_gbps, "Host-to-device copy bandwidth (GB/s)")
      ->capture_default_str();
  cmd->add_option("--handoff-us", args->handoff_us, "GPU<->CPU handoff round trip (microseconds)")
      ->capture_default_str();
  cmd->add_option("-o,--output", args->output, "Write plan.json here")->required();
  cmd->callback([args, exit_code] { *exit_code = RunPlan(*args); });
}

}  // namespace tandem::cli
