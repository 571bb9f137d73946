// `tandem replay --plan plan.json LOG...`: exact hit rates and model-based step times of the plan,
// the static baselines and the dynamic policies on routing logs; --json and --sweep for reports.
#include <cstdio>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "scheduler/replay.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {

absl::StatusOr<scheduler::RoutingTrace> ReadLogsForCli(const std::vector<std::string>& logs,
                                                       const std::string& sequences);
void AddSequencesFlag(CLI::App* cmd, std::string* sequences);

namespace {

struct ReplayArgs {
  std::string plan;
  std::vector<std::string> logs;
  std::string json;
  std::string sweep;
  int sweep_points = 9;
  std::string sequences = "all";
  scheduler::ReplayOptions options;
};

absl::Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

int RunReplay(const ReplayArgs& a) {
  auto plan = scheduler::ReadPlan(a.plan);
  if (!plan.ok()) return Fail(plan.status());
  auto trace = ReadLogsForCli(a.logs, a.sequences);
  if (!trace.ok()) return Fail(trace.status());
  absl::Status match = scheduler::CheckTraceMatchesPlan(*plan, *trace, a.logs[0]);
  if (!match.ok()) return Fail(match);
  if (trace->n_tokens() == 0) return Fail(absl::FailedPreconditionError("the routing logs hold no tokens"));
  const std::vector<scheduler::PolicyResult> results = scheduler::ReplayAll(*plan, *trace, a.options);
  std::printf("replay of %zu tokens against %s (%s policy, expert budget %.2f GiB)\n",
              trace->n_tokens(), a.plan.c_str(), scheduler::PolicyName(plan->policy),
              plan->expert_budget / double(1ull << 30));
  std::fputs(scheduler::ReplayTable(results).c_str(), stdout);
  std::printf("per-layer hit rate of the plan:");
  for (size_t l = 0; l < results[0].layer_hit_rate.size(); ++l) {
    std::printf(" %zu:%.0f%%", l, 100 * results[0].layer_hit_rate[l]);
  }
  std::printf("\n");
  if (!a.json.empty()) {
    absl::Status s = WriteText(a.json, scheduler::ReplayToJson(*plan, results).dump(1));
    if (!s.ok()) return Fail(s);
  }
  if (!a.sweep.empty()) {
    const auto sweep = scheduler::Sweep(*plan, *trace, a.options, a.sweep_points);
    absl::Status s = WriteText(
        a.sweep, scheduler::SweepSvg(sweep, absl::StrCat("placement of ", plan->model_name, ", ",
                                                         trace->n_tokens(), " tokens")));
    if (!s.ok()) return Fail(s);
  }
  return 0;
}

}  // namespace

void RegisterReplay(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "Replay routing logs against a plan and the other policies (static baselines, "
                "per-layer LRU and LFRU, online re-placement): exact hit rates, expected tok/s.");
  cmd->add_option("--plan", args->plan, "plan.json from `tandem plan`")->required();
  cmd->add_option("logs", args->logs, "Routing logs of the plan's model")->required();
  cmd->add_option("--json", args->json, "Write the report here (ends with a summary object)");
  cmd->add_option("--sweep", args->sweep, "Write an SVG of hit rate and tok/s against budget");
  cmd->add_option("--sweep-points", args->sweep_points, "Budgets in the sweep")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
  cmd->add_option("--replan-every", args->options.replan_every,
                  "Online re-placement: tokens between re-plans")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--window", args->options.window,
                  "Online re-placement: recent tokens blended with the census")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--lfru-half-life", args->options.lfru_half_life, "LFRU half-life in tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  AddSequencesFlag(cmd, &args->sequences);
  cmd->callback([args, exit_code] { *exit_code = RunReplay(*args); });
}

}  // namespace tandem::cli
