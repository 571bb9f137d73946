// Subcommands of the `tandem` binary. Each Register* adds one subcommand with its flags and sets
// its callback; the callback returns the process exit code through `*exit_code`.
#pragma once

#include "CLI/CLI.hpp"

namespace tandem::cli {

void RegisterInspect(CLI::App& app, int* exit_code);
void RegisterSynth(CLI::App& app, int* exit_code);
void RegisterRun(CLI::App& app, int* exit_code);
void RegisterLogits(CLI::App& app, int* exit_code);
void RegisterConvert(CLI::App& app, int* exit_code);
void RegisterBench(CLI::App& app, int* exit_code);
// Adds `decode` to the bench subcommand (call after RegisterBench).
void RegisterBenchDecode(CLI::App& app, int* exit_code);
void RegisterCensus(CLI::App& app, int* exit_code);
void RegisterPlan(CLI::App& app, int* exit_code);
void RegisterReplay(CLI::App& app, int* exit_code);
void RegisterTraces(CLI::App& app, int* exit_code);

}  // namespace tandem::cli
