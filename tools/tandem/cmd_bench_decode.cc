// `tandem bench decode --backend cuda --json FILE`: decode speed of the CUDA backend against the
// card's own ceiling, measured in the same run (device-to-device copy bandwidth). For each model
// and context: B=1 greedy decode in megakernel, per-phase and per-op mode, and B=4 and B=8 verify
// steps, each timed over many steps after a warm-up. `--backend cpu`: B=1 greedy decode of the cpu
// backend against the host's streaming read bandwidth with as many threads as the pool, measured
// right before and right after each timed run. Not a test: it reports ratios, it asserts nothing.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "experts/topology.h"
#include "nlohmann/json.hpp"
#include "runtime/base/stats.h"
#include "runtime/base/status_macros.h"
#include "runtime/engine/engine.h"
#include "runtime/model/validate.h"
#include "tools/tandem/cli_util.h"
#include "tools/tandem/commands.h"
#include "tools/tandem/stream_probe.h"
#if defined(TANDEM_WITH_CUDA)
#include "megakernel/ceilings.h"
#include "runtime/quant/ggml_type.h"
#include "megakernel/runner.h"
#endif

namespace tandem::cli {
namespace {

struct Options {
  std::vector<std::string> models{"synth:qwen3-30b-a3b", "synth:flash-next-125b"};
  std::string contexts;  // "" : kDefaultContexts of the backend
  int steps = 64;
  std::string json;
};

// cuda: a short and a long context. cpu: the short one only, because the cpu backend fills a
// context at prompt-processing speed (qwen3-30b-a3b on the 16-core host: 74 tok/s from 512 to
// 2048, slower as the context grows).
constexpr const char* kDefaultContextsCuda = "512,16384";
constexpr const char* kDefaultContextsCpu = "512";

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

// Prints "tandem bench decode: [what: ]message" to stderr; the exit code.
int BenchFail(const absl::Status& status, const std::string& what = "") {
  std::fprintf(stderr, "tandem bench decode: %s%s%s\n", what.c_str(), what.empty() ? "" : ": ",
               std::string(status.message()).c_str());
  return 1;
}

// The cpu backend (see the file comment). Steps advance the sequence (a CPU session has no
// rollback), so "context C" times the steps at positions C .. C + steps + 2.
int BenchDecodeCpu(const Options& o, const engine::EngineOptions& base,
                   const std::vector<int>& contexts) {
  const int threads = base.threads > 0 ? base.threads : CPU_COUNT(&experts::StartCpus());
  const size_t probe_bytes = StreamProbeBytes();
  StreamProbe stream(threads, probe_bytes);
  const double stream_first = stream.Measure(5);
  std::printf(
      "stream read, %d threads, %.2f GiB buffer: %.2f GB/s (measured again around every "
      "timed run)\n",
      threads, probe_bytes / 1073741824.0, stream_first);
  nlohmann::json report, runs = nlohmann::json::array(), summary;
  report["date"] = UtcNow();
  report["backend"] = "cpu";
  report["threads"] = threads;
  report["cpu_repack"] = base.cpu_repack;
  report["steps"] = o.steps;
  report["stream_gbps_first"] = stream_first;
  std::vector<double> streams;
  for (const std::string& model : o.models) {
    engine::EngineOptions eo = base;
    eo.model = model;
    eo.backend = "cpu";
    eo.n_ctx = *std::max_element(contexts.begin(), contexts.end()) + o.steps + 8;
    std::printf("loading %s ...\n", model.c_str());
    auto engine = engine::Engine::Load(eo);
    if (!engine.ok()) return BenchFail(engine.status(), model);
    for (const std::string& note : (*engine)->notes()) std::printf("  note: %s\n", note.c_str());
    const model::HParams& hp = (*engine)->hparams();
    const absl::StatusOr<uint64_t> wbytes =
        model::StepWeightBytes(hp, (*engine)->model().tensors(), 1, {});
    if (!wbytes.ok()) return BenchFail(wbytes.status(), model);
    std::unique_ptr<engine::Session> session = (*engine)->NewSession();
    std::mt19937 rng(1);
    std::vector<float> logits;
    for (int ctx : contexts) {
      // Fill the context as a long prompt would, 512 tokens per forward pass, timed: the
      // prompt-processing rate from the previous context (or 0) to this one.
      std::vector<int32_t> chunk;
      const int fill_from = session->n_past();
      const auto fill_start = Clock::now();
      while (session->n_past() < ctx) {
        chunk.resize(std::min(512, ctx - session->n_past()));
        for (int32_t& t : chunk) t = static_cast<int32_t>(rng() % hp.n_vocab);
        if (auto s = session->Prefill(chunk, false, &logits); !s.ok()) return BenchFail(s, model);
      }
      const double fill_s = Seconds(Clock::now() - fill_start);
      const double fill_tok_s = fill_s > 0 ? (session->n_past() - fill_from) / fill_s : 0;
      const double stream_before = stream.Measure(3);
      int32_t token = static_cast<int32_t>(rng() % hp.n_vocab);
      std::vector<double> times;
      for (int i = 0; i < o.steps + 3; ++i) {
        const auto t0 = Clock::now();
        absl::StatusOr<int32_t> next = session->DecodeGreedy(token);
        if (!next.ok()) return BenchFail(next.status(), model);
        if (i >= 3) times.push_back(Seconds(Clock::now() - t0));  // 3 warm-up steps
        token = *next;
      }
      const double stream_after = stream.Measure(3);
      const double gbps = (stream_before + stream_after) / 2;
      streams.push_back(gbps);
      const double t1 = Median(std::move(times));
      nlohmann::json run;
      run["model"] = model;
      run["context"] = ctx;
      run["weight_bytes_per_token"] = *wbytes;
      run["ms_per_token"] = t1 * 1e3;
      run["tok_s"] = 1.0 / t1;
      run["stream_gbps"] = gbps;
      run["fill_from"] = fill_from;
      run["fill_tok_s"] = fill_tok_s;
      run["bandwidth_ratio"] = static_cast<double>(*wbytes) / t1 / (gbps * 1e9);
      std::printf(
          "%-28s ctx %6d: %8.2f tok/s  %.2f ms/token  %.3f of stream (%.1f GB/s: %.1f "
          "before, %.1f after)  %.2f GB/token; filled from %d at %.1f tok/s\n",
          model.c_str(), ctx, 1.0 / t1, t1 * 1e3, run["bandwidth_ratio"].get<double>(), gbps,
          stream_before, stream_after, *wbytes / 1e9, fill_from, fill_tok_s);
      runs.push_back(run);
      if (ctx == contexts.front()) {
        summary["bandwidth_ratio"][model] = run["bandwidth_ratio"];
        summary["tok_s"][model] = run["tok_s"];
      }
    }
  }
  summary["stream_gbps"] = Median(streams);
  report["runs"] = runs;
  return FinishBenchReport("bench decode", o.json, report, summary);
}

#if defined(TANDEM_WITH_CUDA)
// Weight bytes of one 4-row verify step at position `pos` (model::StepWeightBytes over the experts
// its rows chose), rolled back afterwards: a verify step reads the union of its rows' experts, so
// this is the byte floor that verify4/decode1 is judged against.
absl::StatusOr<uint64_t> VerifyStepBytes(megakernel::GpuRunner& gpu, const model::Model& m, int pos,
                                         std::mt19937& rng) {
  const int vocab = m.hparams().n_vocab;
  std::vector<int32_t> tokens(4), argmax, route_ids;
  std::vector<float> route_weights;
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
  TANDEM_RETURN_IF_ERROR(
      gpu.Forward(tokens, pos, false, nullptr, &argmax, &route_ids, &route_weights));
  TANDEM_RETURN_IF_ERROR(gpu.Rollback(4, 1));
  return model::StepWeightBytes(m.hparams(), m.tensors(), 4, route_ids);
}

// Seconds per step of `rows` rows at position `pos` (median of `steps`), rolled back after
// multi-row steps so that every step sees the same context length.
absl::StatusOr<double> TimeSteps(megakernel::GpuRunner& gpu, int rows, int pos, int steps,
                                 std::mt19937& rng, int vocab) {
  std::vector<int32_t> tokens(rows), argmax;
  std::vector<double> times;
  for (int i = 0; i < steps + 3; ++i) {
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
    const auto t0 = Clock::now();
    TANDEM_RETURN_IF_ERROR(gpu.Forward(tokens, pos, false, nullptr, &argmax, nullptr, nullptr));
    if (i >= 3) times.push_back(Seconds(Clock::now() - t0));  // 3 warm-up steps
    if (rows > 1) TANDEM_RETURN_IF_ERROR(gpu.Rollback(rows, 1));
  }
  return Median(std::move(times));
}

// Where a step of `rows` rows goes, from block 0's clock at every phase start (megakernel mode,
// graph replay as in the timed runs): the mean microseconds of each phase per layer of each kind
// (a phase's time includes the grid barrier that ends it), and the mean gap from the end of one
// layer-half launch to the start of the next (the launch's tail on other blocks + launch latency).
// Multi-row steps are rolled back after each, as in TimeSteps.
absl::Status PhaseTimeline(megakernel::GpuRunner& gpu, const model::HParams& hp, int rows, int pos,
                           int steps, std::mt19937& rng, nlohmann::json* out) {
  using megakernel::kTimelineSlots;
  static const char* const kNames[3][kTimelineSlots] = {
      {"projections", "attention_merge", "out_proj"},
      {"projections", "conv_delta_rule", "gated_norm_out"},
      {"router", "route_gate_up", "down", "combine"}};
  static const char* const kKinds[3] = {"attention", "deltanet", "moe"};
  auto phases_of = [](int kind) {
    return megakernel::PhaseCount(kind == 2 ? megakernel::Half::kMoe : megakernel::Half::kMixer,
                                  kind == 1);
  };
  double sum[3][kTimelineSlots] = {}, gap_sum = 0;
  int count[3] = {}, gaps = 0;
  TANDEM_RETURN_IF_ERROR(gpu.set_timeline(true));
  std::vector<int32_t> tokens(rows), argmax;
  for (int i = 0; i <= steps; ++i) {  // step 0 captures the graph
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % hp.n_vocab);
    TANDEM_RETURN_IF_ERROR(gpu.Forward(tokens, pos, false, nullptr, &argmax, nullptr, nullptr));
    if (rows > 1) TANDEM_RETURN_IF_ERROR(gpu.Rollback(rows, 1));
    if (i == 0) continue;
    TANDEM_ASSIGN_OR_RETURN(const std::vector<uint64_t> stamps, gpu.ReadTimeline());
    int64_t prev_end = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
      for (int half = 0; half < 2; ++half) {
        const uint64_t* t = &stamps[static_cast<size_t>(2 * il + half) * kTimelineSlots];
        const int kind = half == 1 ? 2 : (hp.IsRecurrentLayer(il) ? 1 : 0);
        const int phases = phases_of(kind);
        for (int p = 0; p < phases; ++p) {
          sum[kind][p] += static_cast<double>(static_cast<int64_t>(t[p + 1] - t[p]));
        }
        ++count[kind];
        if (prev_end != 0) {
          gap_sum += static_cast<double>(static_cast<int64_t>(t[0]) - prev_end);
          ++gaps;
        }
        prev_end = static_cast<int64_t>(t[phases]);
      }
    }
  }
  TANDEM_RETURN_IF_ERROR(gpu.set_timeline(false));
  std::printf("  phase timeline of %d-row steps, mean us per layer (block 0's clock, %d steps):",
              rows, steps);
  for (int kind = 0; kind < 3; ++kind) {
    if (count[kind] == 0) continue;
    std::printf("\n    %-9s", kKinds[kind]);
    for (int p = 0; p < phases_of(kind); ++p) {
      const double us = sum[kind][p] / count[kind] * 1e-3;
      (*out)[kKinds[kind]][kNames[kind][p]] = us;
      std::printf("  %s %.1f", kNames[kind][p], us);
    }
  }
  const double gap_us = gaps > 0 ? gap_sum / gaps * 1e-3 : 0.0;
  (*out)["launch_gap"] = gap_us;
  std::printf("\n    between layer-half launches: %.1f us\n", gap_us);
  return absl::OkStatus();
}

int BenchDecode(const Options& o, const engine::EngineOptions& base,
                const std::vector<int>& contexts) {
  double hbm = 0;
  if (cudaError_t e = megakernel::MeasureHbmCopyGbps(uint64_t{2} << 30, 20, &hbm); e != cudaSuccess) {
    std::fprintf(stderr, "tandem bench decode: copy bandwidth: %s\n", cudaGetErrorString(e));
    return 1;
  }
  std::printf("HBM device-to-device copy: %.0f GB/s (read + write)\n", hbm);
  double launch_us = 0, barrier_us = 0;
  if (cudaError_t e = megakernel::MeasurePhaseCostsUs(9, &launch_us, &barrier_us); e != cudaSuccess) {
    std::fprintf(stderr, "tandem bench decode: phase costs: %s\n", cudaGetErrorString(e));
    return 1;
  }
  std::printf("empty cooperative launch: %.2f us, grid barrier: %.2f us (one 512-thread block per SM)\n",
              launch_us, barrier_us);
  nlohmann::json report, runs = nlohmann::json::array(), summary;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  report["date"] = UtcNow();
  report["backend"] = "cuda";
  report["device"] = prop.name;
  report["steps"] = o.steps;
  report["cache_type"] = base.cache_type;
  summary["hbm_copy_gbps"] = hbm;
  report["empty_launch_us"] = launch_us;
  report["grid_barrier_us"] = barrier_us;
  // The codec loop alone on one matrix of 2,048 columns: a large one (streaming rate) and one the
  // size of a layer's QKV projection (what a phase can reach at that size).
  nlohmann::json matvec = nlohmann::json::array();
  for (quant::GgmlType type : {quant::GgmlType::kQ8_0, quant::GgmlType::kQ4_K, quant::GgmlType::kQ3_K,
                               quant::GgmlType::kQ6_K, quant::GgmlType::kF32}) {
    for (int64_t bytes : {int64_t{256} << 20, int64_t{11} << 20}) {
      for (int rows : {1, 4}) {
        double gbps = 0;
        if (cudaError_t e = megakernel::MeasureMatVecGbps(static_cast<int>(type), 2048, bytes, rows, 20, &gbps);
            e != cudaSuccess) {
          std::fprintf(stderr, "tandem bench decode: matvec: %s\n", cudaGetErrorString(e));
          return 1;
        }
        const char* name = quant::GetTypeInfo(type).name;
        std::printf("matvec %-6s %4lld MiB x 2048 cols, %d row%s: %7.0f GB/s  %.3f of copy\n", name,
                    static_cast<long long>(bytes >> 20), rows, rows == 1 ? " " : "s", gbps, gbps / hbm);
        matvec.push_back({{"type", name}, {"mib", bytes >> 20}, {"rows", rows}, {"gbps", gbps},
                          {"ratio_to_copy", gbps / hbm}});
      }
    }
  }
  report["matvec"] = matvec;
  for (const std::string& model : o.models) {
    engine::EngineOptions eo = base;
    eo.model = model;
    eo.backend = "cuda";
    eo.n_ctx = *std::max_element(contexts.begin(), contexts.end()) + 16;
    std::printf("loading %s (%s KV cache) ...\n", model.c_str(), eo.cache_type.c_str());
    auto engine = engine::Engine::Load(eo);
    if (!engine.ok()) {
      return BenchFail(engine.status(), model);
    }
    megakernel::GpuRunner& gpu = *(*engine)->gpu();
    const int vocab = (*engine)->hparams().n_vocab;
    const absl::StatusOr<uint64_t> wbytes_or =
        model::StepWeightBytes((*engine)->hparams(), (*engine)->model().tensors(), 1, {});
    if (!wbytes_or.ok()) {
      return BenchFail(wbytes_or.status());
    }
    const uint64_t wbytes = *wbytes_or;
    std::mt19937 rng(1);
    int filled = 0;
    (void)gpu.Reset();
    // Verify steps of more rows than the GPU's kernels fit are not run (null in the JSON); the
    // engine's notes say why.
    const int max_rows = gpu.max_rows();
    for (const std::string& note : (*engine)->notes()) std::printf("  note: %s\n", note.c_str());
    for (int ctx : contexts) {
      // Fill the context with real steps of max_rows rows (the KV cache and states are real data).
      std::vector<int32_t> chunk;
      while (filled < ctx) {
        chunk.resize(std::min(max_rows, ctx - filled));
        for (int32_t& t : chunk) t = static_cast<int32_t>(rng() % vocab);
        if (auto s = gpu.Forward(chunk, filled, false, nullptr, nullptr, nullptr, nullptr); !s.ok()) {
          return BenchFail(s);
        }
        filled += static_cast<int>(chunk.size());
      }
      nlohmann::json run;
      run["model"] = model;
      run["context"] = ctx;
      run["weight_bytes_per_token"] = wbytes;
      for (auto mode : {megakernel::KernelMode::kMegakernel, megakernel::KernelMode::kPerPhase,
                        megakernel::KernelMode::kPerOp}) {
        gpu.set_mode(mode);
        const bool mega = mode == megakernel::KernelMode::kMegakernel;
        auto t1 = TimeSteps(gpu, 1, ctx, o.steps, rng, vocab);
        if (!t1.ok()) {
          return BenchFail(t1.status());
        }
        const std::string p = mega                                        ? ""
                              : mode == megakernel::KernelMode::kPerPhase ? "per_phase_"
                                                                          : "per_op_";
        run[p + "ms_per_token"] = *t1 * 1e3;
        run[p + "tok_s"] = 1.0 / *t1;
        run[p + "bandwidth_ratio"] = static_cast<double>(wbytes) / *t1 / (hbm * 1e9);
        run[p + "launches_per_token"] = gpu.LaunchesPerStep(true);
        run[p + "barriers_per_token"] = gpu.BarriersPerStep(true);
        if (mega && max_rows >= 4) {
          auto t4 = TimeSteps(gpu, 4, ctx, o.steps, rng, vocab);
          if (!t4.ok()) {
            return BenchFail(t4.status());
          }
          run["verify4_ms"] = *t4 * 1e3;
          run["verify4_over_decode1"] = *t4 / *t1;
          auto bytes4 = VerifyStepBytes(gpu, (*engine)->model(), ctx, rng);
          if (!bytes4.ok()) {
            return BenchFail(bytes4.status());
          }
          run["verify4_weight_bytes"] = *bytes4;
          run["verify4_bytes_over_decode1"] =
              static_cast<double>(*bytes4) / static_cast<double>(wbytes);
        }
        if (mega && max_rows >= 8) {
          // The 8-row kernels (verify of 7 drafts, and every prompt block) have their own
          // register allocation; a change can move them alone.
          auto t8 = TimeSteps(gpu, 8, ctx, o.steps, rng, vocab);
          if (!t8.ok()) {
            return BenchFail(t8.status());
          }
          run["verify8_ms"] = *t8 * 1e3;
          run["verify8_over_decode1"] = *t8 / *t1;
        }
      }
      gpu.set_mode(megakernel::KernelMode::kMegakernel);
      nlohmann::json phases, verify4_phases;
      if (auto s = PhaseTimeline(gpu, (*engine)->hparams(), 1, ctx, 8, rng, &phases); !s.ok()) {
        return BenchFail(s);
      }
      if (max_rows >= 4) {
        if (auto s = PhaseTimeline(gpu, (*engine)->hparams(), 4, ctx, 8, rng, &verify4_phases);
            !s.ok()) {
          return BenchFail(s);
        }
      }
      run["phase_us"] = phases;
      run["verify4_phase_us"] = verify4_phases;
      run["speedup_vs_per_op"] = run["per_op_ms_per_token"].get<double>() / run["ms_per_token"].get<double>();
      // A ratio, or "n/a" where its steps were not run (more rows than this GPU's kernels fit).
      auto ratio = [&run](const char* key) {
        return run.contains(key) && run[key].is_number()
                   ? absl::StrFormat("%.2f", run[key].get<double>())
                   : std::string("n/a");
      };
      std::printf(
          "%-28s ctx %6d: %8.1f tok/s  %.3f of HBM  per-op %8.1f tok/s (x%.2f, %d launches)  "
          "per-phase %8.1f tok/s  verify4/decode1 %s (bytes %s)  verify8/decode1 %s  "
          "launches %d barriers %d\n",
          model.c_str(), ctx, run["tok_s"].get<double>(), run["bandwidth_ratio"].get<double>(),
          run["per_op_tok_s"].get<double>(), run["speedup_vs_per_op"].get<double>(),
          run["per_op_launches_per_token"].get<int>(), run["per_phase_tok_s"].get<double>(),
          ratio("verify4_over_decode1").c_str(), ratio("verify4_bytes_over_decode1").c_str(),
          ratio("verify8_over_decode1").c_str(), run["launches_per_token"].get<int>(),
          run["barriers_per_token"].get<int>());
      runs.push_back(run);
      if (ctx == contexts.front()) {
        summary["bandwidth_ratio"][model] = run["bandwidth_ratio"];
        summary["speedup_vs_per_op"][model] = run["speedup_vs_per_op"];
        summary["verify4_over_decode1"][model] = run["verify4_over_decode1"];
        summary["launches_per_token"][model] = run["launches_per_token"];
      }
    }
  }
  report["runs"] = runs;
  return FinishBenchReport("bench decode", o.json, report, summary);
}
#else
int BenchDecode(const Options&, const engine::EngineOptions&, const std::vector<int>&) {
  std::fprintf(stderr, "tandem bench decode: %s\n", engine::CudaBackendUnavailableReason().c_str());
  return 1;
}
#endif

}  // namespace

void RegisterBenchDecode(CLI::App& app, int* exit_code) {
  CLI::App* bench = app.get_subcommand("bench");
  auto options = std::make_shared<Options>();
  auto engine_options = std::make_shared<engine::EngineOptions>();
  CLI::App* dec = bench->add_subcommand(
      "decode",
      "Decode speed against the machine's measured ceiling (not a test). cuda: tok/s and fraction "
      "of HBM copy bandwidth, megakernel vs per-op (and per-phase), verify B=4 and B=8 vs B=1. "
      "cpu: tok/s and fraction of the host's streaming read bandwidth");
  dec->add_option("-m,--model", options->models, "Models to time (repeatable)")->capture_default_str();
  dec->add_option("--contexts", options->contexts,
                  "Comma-separated context lengths to decode at (default: 512,16384 for cuda, "
                  "512 for cpu, which fills a context at prompt-processing speed)");
  dec->add_option("--steps", options->steps, "Timed steps per case (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  engine_options->backend = "cuda";
  dec->add_option("--backend", engine_options->backend, "cuda or cpu")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  dec->add_option("--threads", engine_options->threads,
                  "cpu: pool threads (0: one per CPU the process may run on, e.g. under taskset)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  AddExpertPoolFlags(dec, &engine_options->cpu_isa, &engine_options->cpu_numa,
                     &engine_options->cpu_backup_us, &engine_options->cpu_repack);
  AddCacheTypeFlag(dec, &engine_options->cache_type);
  dec->add_option("--json", options->json, "Write the report here");
  dec->callback([options, engine_options, exit_code] {
    engine_options->progress = nullptr;
    const bool cpu = engine_options->backend == "cpu";
    const std::string list = !options->contexts.empty() ? options->contexts
                             : cpu                      ? kDefaultContextsCpu
                                                        : kDefaultContextsCuda;
    std::vector<int> contexts;
    for (absl::string_view part : absl::StrSplit(list, ',')) {
      int c = 0;
      if (!absl::SimpleAtoi(part, &c) || c < 1) {
        std::fprintf(stderr, "tandem bench decode: bad --contexts entry '%s'\n",
                     std::string(part).c_str());
        *exit_code = 2;
        return;
      }
      contexts.push_back(c);
    }
    *exit_code = cpu ? BenchDecodeCpu(*options, *engine_options, contexts)
                     : BenchDecode(*options, *engine_options, contexts);
  });
}

}  // namespace tandem::cli
