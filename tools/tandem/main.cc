// The `tandem` command: one binary, one subcommand per job. Errors print one line to stderr and
// exit non-zero; nothing here knows model internals.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "tools/tandem/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Tandem: Mixture-of-Experts inference on one GPU plus host RAM.\n"
      "Models are GGUF files, Hugging Face directories, or synth:NAME (a random-weight model\n"
      "of a named shape, built in memory)."};
  app.require_subcommand(1);
  int exit_code = 0;
  tandem::cli::RegisterRun(app, &exit_code);
  tandem::cli::RegisterLogits(app, &exit_code);
  tandem::cli::RegisterInspect(app, &exit_code);
  tandem::cli::RegisterConvert(app, &exit_code);
  tandem::cli::RegisterSynth(app, &exit_code);
  tandem::cli::RegisterBench(app, &exit_code);
  tandem::cli::RegisterBenchDecode(app, &exit_code);
  tandem::cli::RegisterTraces(app, &exit_code);
  tandem::cli::RegisterCensus(app, &exit_code);
  tandem::cli::RegisterPlan(app, &exit_code);
  tandem::cli::RegisterReplay(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
