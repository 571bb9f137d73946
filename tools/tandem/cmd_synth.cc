// `tandem synth`: writes a random-weight GGUF of a named shape, streamed tensor by tensor (a 50 GB
// file never needs 50 GB of RAM), with a progress bar; `--list` shows the shapes.
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "runtime/base/progress.h"
#include "runtime/base/sizes.h"
#include "runtime/model/synth.h"
#include "tools/tandem/commands.h"

namespace tandem::cli {
namespace {

struct Options {
  std::string shape;
  std::string output;
  std::string quant;
  uint64_t seed = model::kDefaultSynthSeed;
  bool list = false;
};

int List() {
  std::printf("%-18s %-10s %6s %8s %8s  %-62s %s\n", "shape", "arch", "layers", "experts", "size",
              "default quant", "description");
  for (const model::SynthShape& shape : model::SynthShapes()) {
    absl::StatusOr<std::unique_ptr<model::SynthPlan>> plan = model::PlanSynth(shape.name, {});
    const std::string size = plan.ok() ? FormatBytes((*plan)->total_bytes) : "?";
    std::printf("%-18s %-10s %6d %8d %8s  %-62s %s\n", shape.name.c_str(),
                model::ArchGgufName(shape.hparams.arch), shape.hparams.n_layer,
                shape.hparams.n_expert, size.c_str(),
                model::QuantMixToString(shape.default_mix).c_str(), shape.description.c_str());
  }
  return 0;
}

int Run(const Options& opt) {
  if (opt.list) return List();
  if (opt.shape.empty() || opt.output.empty()) {
    std::fprintf(stderr, "tandem synth: --shape and -o are required (or --list)\n");
    return 1;
  }
  model::SynthOptions options;
  options.quant = opt.quant;
  options.seed = opt.seed;
  std::unique_ptr<ProgressBar> bar;
  std::mutex mu;
  options.progress = [&](uint64_t done, uint64_t total) {
    std::lock_guard<std::mutex> lock(mu);
    if (!bar) bar = std::make_unique<ProgressBar>("synth " + opt.shape, total);
    bar->Update(done);
  };
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = model::WriteSynthGguf(opt.shape, options, opt.output);
  bar.reset();  // final line of the bar before anything else is printed
  if (!status.ok()) {
    std::fprintf(stderr, "tandem synth: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<model::SynthPlan>> plan = model::PlanSynth(opt.shape, options);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s, %zu tensors, %s (%s), seed %llu, %.1f s\n", opt.output.c_str(),
              opt.shape.c_str(), plan.ok() ? (*plan)->tensors.size() : size_t{0},
              plan.ok() ? FormatBytes((*plan)->total_bytes).c_str() : "?",
              plan.ok() ? model::QuantMixToString((*plan)->mix).c_str() : "?",
              static_cast<unsigned long long>(opt.seed), secs);
  return 0;
}

}  // namespace

void RegisterSynth(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "synth",
      "Write a random-weight GGUF model of a named shape (valid blocks, weights scaled so that\n"
      "activations stay finite). The same shape, quant mix and seed always give the same bytes.");
  cmd->add_option("--shape", opt->shape,
                  "Shape to generate; `--list` shows them (tiny-* for tests, full-size ones such "
                  "as flash-next-125b).");
  cmd->add_option("-o,--output", opt->output,
                  "Output .gguf path; the file appears only when complete.");
  cmd->add_option(
      "--quant", opt->quant,
      "Quant types per category, overriding the shape's defaults, e.g.\n"
      "experts=q3_k,dense=q8_0,embed=q6_k. Categories: experts (routed experts), shexp (shared\n"
      "expert), dense (attention and DeltaNet matrices), router (ffn_gate_inp), embed\n"
      "(token_embd), output (output.weight). Norms, ssm_a, ssm_dt, ssm_conv1d and the\n"
      "shared-expert gate stay f32. A type's block size must divide each tensor's ne[0].");
  cmd->add_option("--seed", opt->seed, "Random seed.")->capture_default_str();
  cmd->add_flag("--list", opt->list,
                "List the shapes with their default quant mix and size, then exit.");
  cmd->callback([opt, exit_code] { *exit_code = Run(*opt); });
}

}  // namespace tandem::cli
