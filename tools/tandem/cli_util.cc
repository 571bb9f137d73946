#include "tools/tandem/cli_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "runtime/base/progress.h"
#include "runtime/base/sizes.h"

namespace tandem::cli {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "tandem: %s\n", std::string(status.message()).c_str());
  return 1;
}

void AddExpertPoolFlags(CLI::App* cmd, std::string* isa, bool* numa, int* backup_us, bool* repack) {
  cmd->add_option("--cpu-isa", *isa,
                  "CPU expert pool: kernels auto, avx512, avx2 or scalar (forcing an ISA this "
                  "CPU lacks is an error)")
      ->capture_default_str();
  cmd->add_flag("!--no-cpu-numa", *numa,
                "CPU expert pool: one arena over every core, and expert weights left where the OS "
                "put them, instead of an arena per NUMA node with each node's share of the experts "
                "bound to its memory (the default; same results either way)");
  cmd->add_option("--cpu-backup-us,--backup-us", *backup_us,
                  "CPU expert pool: rerun an expert work item of a decode or verify layer on an "
                  "idle thread once it has run this long, and use whichever run finishes first, so "
                  "that a descheduled thread does not hold the layer (same results; negative: "
                  "never)")
      ->capture_default_str();
  cmd->add_flag("!--no-cpu-repack", *repack,
                "CPU expert pool: read Q4_K and Q3_K experts in place from the model, instead of "
                "a copy repacked at load into the 8-row layout of the pool's fastest kernels (the "
                "default with avx512 or avx2: the same sums, less time a layer; the copy takes as "
                "much RAM as those experts, and is skipped with a note when that is not "
                "available)");
}

void AddCacheTypeFlag(CLI::App* cmd, std::string* cache_type) {
  cmd->add_option("--cache-type", *cache_type,
                  "Element type of the attention layers' KV cache: f32 (exact against the "
                  "reference) or f16 (half the cache's VRAM and half the bytes attention reads at "
                  "long contexts; keys and values are rounded to nearest f16 as they enter the "
                  "cache, which changes logits slightly, as llama.cpp's f16 cache does). The CPU "
                  "backends round the same way but keep f32 storage")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
}

void AddEngineFlags(CLI::App* cmd, engine::EngineOptions* options) {
  cmd->add_option("-m,--model", options->model,
                  "Model: a .gguf file, a Hugging Face directory (config.json + safetensors), or "
                  "synth:NAME for a random-weight model of a named shape built in memory")
      ->required();
  cmd->add_option("--backend", options->backend,
                  "Compute backend: auto (cuda when this build has it and a GPU can run the model, "
                  "else cpu when its expert formats have CPU kernels, else reference; the load "
                  "notes say which), reference (fp32 CPU oracle), cpu (the same forward pass with "
                  "the experts "
                  "and every weight matrix product on the quantised CPU expert pool), cuda "
                  "(layer-half megakernels, every weight on the card)")
      ->capture_default_str();
  cmd->add_option("--kernels", options->kernels,
                  "cuda: auto (= megakernel), megakernel (one persistent cooperative launch per "
                  "layer half), per-phase (the megakernel's phases, one ordinary launch each: "
                  "what its grid barriers cost) or per-op (one ordinary launch per operation: "
                  "norm, quantisation, each matrix product, RoPE, attention, routing...). All "
                  "three give the same logits; the last two exist to measure the megakernel's "
                  "gain")
      ->capture_default_str();
  cmd->add_flag("!--no-cuda-graphs", options->cuda_graphs,
                "cuda: launch kernels directly instead of replaying a captured CUDA graph per step");
  cmd->add_option("--ctx", options->n_ctx,
                  "Context length in tokens (0: the model's training context, at most 4096; the "
                  "cuda backend takes at most 1048576)")
      ->capture_default_str();
  AddCacheTypeFlag(cmd, &options->cache_type);
  AddExpertPoolFlags(cmd, &options->cpu_isa, &options->cpu_numa, &options->cpu_backup_us,
                     &options->cpu_repack);
  cmd->add_option("--threads", options->threads,
                  "CPU threads (0: one per CPU the process may run on, e.g. under taskset)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--tokenizer", options->tokenizer,
                  "A tokenizer.json to use instead of the model's own tokenizer");
  cmd->add_option("--routing-log", options->routing_log,
                  "Append every token's expert choices to this file (docs/formats/routing-log.md)");
  cmd->add_option("--placement", options->placement,
                  "Expert residency: auto (planned from the routing seen while serving, uniform "
                  "during a 256-token warm-up) or a plan.json from `tandem plan`. The CPU backends "
                  "compute every expert anyway and report the hit rate the placement would get");
  cmd->add_option("--replan-every", options->replan_every,
                  "With --placement: re-plan from the observed routing every N tokens (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option_function<std::string>(
      "--vram-budget",
      [options](const std::string& text) {
        auto bytes = ParseBytes(text);
        if (!bytes.ok()) throw CLI::ValidationError("--vram-budget", std::string(bytes.status().message()));
        options->vram_budget = *bytes;
      },
      "VRAM budget for expert placement, e.g. 24GiB (dense weights, caches, scratch and resident "
      "experts together)");
}

absl::StatusOr<std::unique_ptr<engine::Engine>> LoadEngine(engine::EngineOptions options) {
  std::unique_ptr<ProgressBar> bar;
  uint64_t bar_total = 0;
  // Loading may report several passes (a synthesis, then placing expert weights on NUMA nodes),
  // each with its own total: a new total starts a new bar.
  options.progress = [&bar, &bar_total](uint64_t done, uint64_t total) {
    if (!bar || total != bar_total) {
      bar.reset();
      bar = std::make_unique<ProgressBar>("loading", total);
      bar_total = total;
    }
    bar->Update(done);
  };
  auto engine = engine::Engine::Load(options);
  bar.reset();
  return engine;
}

absl::StatusOr<std::vector<int32_t>> ParseTokenList(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad token id '", part, "' in --tokens (expected e.g. 1,2,3)"));
    }
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--tokens is empty");
  return ids;
}

absl::Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp-", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::NotFoundError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return absl::InternalError(absl::StrCat(path, ": write failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": rename failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int FinishBenchReport(const std::string& command, const std::string& json_path,
                      nlohmann::json& report, const nlohmann::json& summary) {
  report["summary"] = summary;
  std::printf("summary: %s\n", summary.dump().c_str());
  if (json_path.empty()) return 0;
  const std::string text = report.dump(2) + "\n";
  const absl::Status s =
      WriteFileAtomically(json_path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  if (!s.ok()) {
    std::fprintf(stderr, "tandem %s: cannot write %s\n", command.c_str(),
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace tandem::cli
