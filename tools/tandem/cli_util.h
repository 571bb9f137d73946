// Small helpers shared by the subcommands: one-line errors, engine flags, atomic file output, the
// benchmarks' report.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "runtime/engine/engine.h"

namespace tandem::cli {

// Prints "tandem: <message>" on one line to stderr and returns exit code 1.
int Fail(const absl::Status& status);

// Adds -m/--model, --backend, --ctx, --tokenizer, --routing-log to `cmd`, bound to `options`,
// --cache-type (AddCacheTypeFlag) and the CPU expert pool's flags (AddExpertPoolFlags).
void AddEngineFlags(CLI::App* cmd, engine::EngineOptions* options);

// Adds --cache-type (EngineOptions::cache_type) to `cmd`: the engine commands and `bench decode`
// share it.
void AddCacheTypeFlag(CLI::App* cmd, std::string* cache_type);

// Adds the CPU expert pool's --cpu-isa, --no-cpu-numa, --cpu-backup-us (also spelled
// --backup-us) and --no-cpu-repack to `cmd`: the engine's --backend cpu and `tandem bench
// experts` share them.
void AddExpertPoolFlags(CLI::App* cmd, std::string* isa, bool* numa, int* backup_us, bool* repack);

// Loads the engine with a progress bar on stderr for long loads.
absl::StatusOr<std::unique_ptr<engine::Engine>> LoadEngine(engine::EngineOptions options);

// "1,2,3" -> {1,2,3}; clear error on anything else.
absl::StatusOr<std::vector<int32_t>> ParseTokenList(const std::string& text);

// Wall-clock timing for the benchmarks.
using Clock = std::chrono::steady_clock;
inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Writes bytes to `path` through a temporary file and a rename, so no half-written file is left.
absl::Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes);

// The end of a `tandem bench` subcommand: adds `summary` to `report`, prints "summary: {...}" and
// writes the report as indented JSON to `json_path` (none when empty). Returns the exit code: 1,
// with "tandem <command>: ..." on stderr, when the file cannot be written.
int FinishBenchReport(const std::string& command, const std::string& json_path,
                      nlohmann::json& report, const nlohmann::json& summary);

}  // namespace tandem::cli
