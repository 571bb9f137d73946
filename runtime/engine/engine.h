// The public engine API: load a model once (Engine), run sequences on it (Session). A session owns
// its caches and statistics; the engine owns weights, tokenizer and the backend. Backends:
// `reference` (the fp32 oracle of runtime/reference), `cpu` (the same forward pass with the routed
// experts and the dense half computed by the quantised CPU expert pool of experts/) and `cuda`
// (the layer-half megakernels of megakernel/, every weight on the card). `auto` takes cuda when
// this build has it and a device can run the model, else cpu when the pool has kernels for the
// model's experts, else reference, and says which and why in notes(). An explicit backend that
// cannot run fails with a clear message; nothing falls back silently to different math.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experts/attention.h"
#include "experts/pool.h"
#include "oneapi/tbb/global_control.h"
#include "runtime/model/model.h"
#include "runtime/reference/forward.h"
#include "runtime/text/tokenizer.h"
#include "scheduler/online_placement.h"
#include "scheduler/routing_log.h"

namespace tandem::megakernel {
class GpuRunner;
}

namespace tandem::engine {
// Deletes a GpuRunner where its type is complete (engine.cc), so that builds without CUDA,
// where it never is, still compile.
struct GpuRunnerDeleter {
  void operator()(megakernel::GpuRunner* runner) const;
};
}  // namespace tandem::engine

namespace tandem::engine {

struct EngineOptions {
  std::string model;               // path, HF directory or synth:NAME
  std::string backend = "auto";    // auto (cuda, else cpu, else reference) | reference | cpu | cuda
  std::string kernels = "auto";    // cuda: auto (= megakernel) | megakernel | per-phase | per-op
  bool cuda_graphs = true;         // cuda: capture each step shape once and replay it
  int n_ctx = 0;                   // 0: the smaller of the model's training context and 4096
  // Attention layers' KV cache elements: f32 (exact against the reference) or f16 (half the
  // cache's bytes; keys and values rounded to nearest as they enter it). The CPU backends round
  // the same way but keep f32 storage.
  std::string cache_type = "f32";
  int threads = 0;  // CPU threads for the whole process; 0: one per CPU it started on
  std::string cpu_isa = "auto";    // cpu backend kernels: auto | avx512 | avx2 | scalar
  bool cpu_numa = true;  // cpu backend: a pool arena per NUMA node, experts bound to nodes
  // cpu backend: experts the pool's kernels read faster in another layout are copied into it at
  // load (experts/packed_experts.h); false reads every expert in place.
  bool cpu_repack = true;
  // cpu backend: rerun a late expert work item on an idle thread after this many µs (same
  // results; negative: never).
  int cpu_backup_us = experts::kDefaultBackupMicros;
  std::string tokenizer;           // optional tokenizer.json overriding the model's own
  std::string routing_log;         // append routing decisions to this file when set
  // Expert placement: "" (none), "auto" (planned from the routing seen while serving) or a
  // plan.json from `tandem plan`. The residency table is what a GPU backend reads; with the CPU
  // backends it only counts how many routes would have hit resident experts.
  std::string placement;
  int replan_every = 0;            // re-plan from observed routing every N tokens; 0: never
  uint64_t vram_budget = 0;        // bytes; needed by placement auto and re-planning
  model::ProgressFn progress;      // long loads and syntheses report here
};

struct SessionStats {
  int prompt_tokens = 0;
  double prompt_seconds = 0;
  int decode_steps = 0;             // single-token forward passes after the prompt
  double decode_seconds = 0;        // their total time
  double time_to_first_token = 0;   // from the start of the prompt to the first sampled token
  double prompt_tok_s() const { return prompt_seconds > 0 ? prompt_tokens / prompt_seconds : 0; }
  double decode_tok_s() const {
    return decode_seconds > 0 ? decode_steps / decode_seconds : 0;
  }
};

class Session;

// Why `--backend cuda` cannot run in this process ("" when it can): no CUDA in this build, or no
// usable device.
std::string CudaBackendUnavailableReason();

// The cpu backend's attention of up to experts::kMaxAttendRows rows: `rows`, from the reference's
// forward pass (reference::DenseComputer::Attend), on the pool's threads (experts::Attend).
absl::Status AttendOnPool(experts::ExpertPool& pool, const reference::AttentionRows& rows,
                          experts::AttentionScratch& scratch);

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Load(const EngineOptions& options);
  ~Engine();

  const model::Model& model() const { return *model_; }
  const model::HParams& hparams() const { return model_->hparams(); }
  // Null when the model carries no tokenizer (token-id interfaces still work).
  const text::Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const std::string& backend_name() const { return backend_name_; }
  int n_ctx() const { return n_ctx_; }
  bool f16_kv_cache() const { return f16_kv_cache_; }
  double load_seconds() const { return load_seconds_; }
  // Notes for the user gathered while loading (tokenizer warnings, context clamping).
  const std::vector<std::string>& notes() const { return notes_; }

  std::unique_ptr<Session> NewSession();
  // Null without --placement.
  const scheduler::OnlinePlacement* placement() const { return placement_.get(); }
  // The cuda backend's runner (null for the CPU backends).
  megakernel::GpuRunner* gpu() const { return gpu_.get(); }

 private:
  friend class Session;
  Engine() = default;
  std::unique_ptr<model::Model> model_;
  std::optional<text::Tokenizer> tokenizer_;
  std::unique_ptr<reference::ReferenceForward> forward_;
  // cpu backend: routed experts and dense products on the expert pool (null for the reference
  // backend). One session runs at a time, as with the reference backend.
  std::unique_ptr<experts::ExpertPool> pool_;
  std::unique_ptr<reference::ExpertComputer> expert_computer_;
  std::unique_ptr<reference::DenseComputer> dense_computer_;
  // cuda backend: weights and the state of one sequence live on the card (one session at a time).
  std::unique_ptr<megakernel::GpuRunner, GpuRunnerDeleter> gpu_;
  std::unique_ptr<scheduler::RoutingLogWriter> routing_log_;
  std::unique_ptr<scheduler::OnlinePlacement> placement_;
  std::unique_ptr<tbb::global_control> thread_limit_;
  std::string backend_name_;
  int n_ctx_ = 0;
  bool f16_kv_cache_ = false;
  double load_seconds_ = 0;
  uint32_t next_sequence_id_ = 0;
  std::vector<std::string> notes_;
};

class Session {
 public:
  // Runs `tokens` after what the session has seen. logits: T x vocab with all_logits, else the
  // last position's row.
  absl::Status Prefill(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits);
  // One token (a decode step): logits of that position.
  absl::Status Decode(int32_t token, std::vector<float>* logits);
  // One token, returning the greedy next token without the logits (on the cuda backend the
  // argmax runs on the device and only the id is copied back).
  absl::StatusOr<int32_t> DecodeGreedy(int32_t token);
  int n_past() const { return state_.n_past; }
  int n_ctx() const { return state_.n_ctx; }
  // Forgets the sequence (a new sequence id for the routing log).
  void Reset();

  const Engine& engine() const { return *engine_; }
  SessionStats& stats() { return stats_; }
  const SessionStats& stats() const { return stats_; }

 private:
  friend class Engine;
  explicit Session(Engine* engine);
  absl::Status Run(std::span<const int32_t> tokens, bool all_logits, std::vector<float>* logits,
                   std::vector<int32_t>* argmax = nullptr);

  Engine* engine_;
  reference::SequenceState state_;
  uint32_t sequence_id_ = 0;
  SessionStats stats_;
  // Routing decisions of the current batch: [row][layer][k].
  std::vector<int32_t> route_ids_;
  std::vector<float> route_weights_;
};

// A stable 64-bit fingerprint of a model's architecture, shapes and tensor types.
uint64_t ModelFingerprint(const model::Model& model);

}  // namespace tandem::engine
