// `tandem census LOG... -o census.json`: expert popularity and reuse of routing logs, as JSON for
// `tandem plan` and as a table on stdout.
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "scheduler/census.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {
namespace {

struct CensusArgs {
  std::vector<std::string> logs;
  std::string output;
  std::string sequences = "all";
};

}  // namespace

// Reads and merges logs, keeping all, even or odd sequences (for held-out evaluation).
absl::StatusOr<scheduler::RoutingTrace> ReadLogsForCli(const std::vector<std::string>& logs,
                                                       const std::string& sequences) {
  auto trace = scheduler::ReadRoutingLogs(logs);
  if (!trace.ok()) return trace.status();
  for (const std::string& w : trace->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (sequences == "even" || sequences == "odd") {
    return scheduler::SplitBySequence(*trace, sequences == "odd");
  }
  if (sequences != "all") {
    return absl::InvalidArgumentError(
        absl::StrCat("--sequences ", sequences, ": choose all, even or odd"));
  }
  return trace;
}

void AddSequencesFlag(CLI::App* cmd, std::string* sequences) {
  cmd->add_option("--sequences", *sequences,
                  "Use all sequences, or only the even / odd ones (in order of first appearance): "
                  "plan on one half, replay on the other")
      ->capture_default_str();
}

void RegisterCensus(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<CensusArgs>();
  CLI::App* cmd = app.add_subcommand(
      "census", "Count expert routes in routing logs: per-expert counts and router-weight mass, "
                "per-layer concentration, reuse distances (JSON with -o, a table on stdout).");
  cmd->add_option("logs", args->logs, "Routing logs of one model (merged)")->required();
  cmd->add_option("-o,--output", args->output, "Write the census JSON here")->required();
  AddSequencesFlag(cmd, &args->sequences);
  cmd->callback([args, exit_code] {
    auto trace = ReadLogsForCli(args->logs, args->sequences);
    if (!trace.ok()) {
      *exit_code = Fail(trace.status());
      return;
    }
    if (trace->n_tokens() == 0) {
      *exit_code = Fail(absl::FailedPreconditionError("the routing logs hold no tokens"));
      return;
    }
    const scheduler::Census census = scheduler::ComputeCensus(*trace);
    const std::string text = scheduler::CensusToJson(census).dump(1);
    absl::Status s = WriteFileAtomically(
        args->output, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    if (!s.ok()) {
      *exit_code = Fail(s);
      return;
    }
    std::fputs(scheduler::CensusSummary(census).c_str(), stdout);
    *exit_code = 0;
  });
}

}  // namespace tandem::cli
