// The CUDA backend's host side: uploads a model's weights to the card (all of them in this
// version: every expert is resident), owns the device state of one sequence (KV caches, DeltaNet
// conv and delta-rule states with per-row snapshots for verify rollback) and runs steps of 1..8
// rows as launches of the layer-half kernels, optionally captured once into CUDA graphs and
// replayed. Host-only C++20; it sees kernels only through launch.h.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "megakernel/launch.h"
#include "megakernel/params.h"
#include "runtime/model/model.h"

namespace tandem::megakernel {

struct RunnerOptions {
  int n_ctx = 4096;
  KernelMode mode = KernelMode::kMegakernel;
  bool graphs = true;            // capture each step shape once, replay it
  uint64_t vram_budget = 0;      // bytes; 0: no limit but the card's
  int max_blocks_per_sm = 2;     // persistent grid: blocks per multiprocessor, at most
  // Attention warps serve a team of one KV group's query heads once the keys fill the grid, one
  // head each before; true uses teams at every context (tests cover both paths with it).
  bool force_attention_teams = false;
  // The attention layers' KV cache in f16 (keys and values rounded to nearest as they are
  // stored; half the bytes), instead of f32.
  bool f16_kv_cache = false;
  std::function<void(uint64_t done, uint64_t total)> progress;  // weight upload
};

// Bytes the runner allocates on the card, by kind.
struct VramUse {
  uint64_t weights = 0, kv_cache = 0, deltanet_state = 0, scratch = 0;
  uint64_t total() const { return weights + kv_cache + deltanet_state + scratch; }
};

// Why a CUDA backend cannot run here (no device, driver error), or "" when it can.
std::string CudaUnavailableReason();

class GpuRunner {
 public:
  static absl::StatusOr<std::unique_ptr<GpuRunner>> Create(const model::Model& model,
                                                           const RunnerOptions& options);
  ~GpuRunner();

  // Runs rows at positions first_pos .. first_pos + n - 1 in steps of at most max_rows(). With
  // `logits`, writes the logits of every row (all_logits) or of the last one. With `argmax`,
  // writes the device's greedy choice for the same rows. Route ids/weights ([row][layer][k])
  // are copied back when `route_ids` is set.
  absl::Status Forward(std::span<const int32_t> tokens, int first_pos, bool all_logits,
                       std::vector<float>* logits, std::vector<int32_t>* argmax,
                       std::vector<int32_t>* route_ids, std::vector<float>* route_weights);

  // After a step of n > 1 rows, keeps the DeltaNet state after row n_keep - 1 (1 <= n_keep < n)
  // as if only the first n_keep rows had run. The KV cache needs nothing: later rows overwrite.
  absl::Status Rollback(int n_rows_in_step, int n_keep);

  // One layer half (mixer or MoE, with its RMSNorm and residual) on n_rows rows of hidden state
  // x (n_rows x n_embd) at positions first_pos.., using and updating the runner's sequence
  // state; writes the updated rows to `out`. For per-half diffs against the reference.
  absl::Status RunLayerHalf(int layer, bool moe, std::span<const float> x, int n_rows,
                            int first_pos, std::vector<float>* out);

  // Zeroes the recurrent state (a new sequence).
  absl::Status Reset();

  const VramUse& vram() const { return vram_; }
  // The most rows one step takes on this GPU: kMaxRows, or fewer where the larger rows variants'
  // kernels need more shared memory a block than the GPU allows (rows_limit() says which).
  // Verify steps (Forward then Rollback) must not exceed it; Forward splits longer inputs.
  int max_rows() const { return max_rows_; }
  const std::string& rows_limit() const { return rows_limit_; }
  const ModelDims& dims() const { return dims_; }
  // Launches (kernels) and grid barriers of one decode step in the current mode.
  int LaunchesPerStep(bool with_head) const;
  int BarriersPerStep(bool with_head) const;
  // Device copies for tests: the DeltaNet delta-rule state of layer `layer` (empty for
  // attention layers).
  absl::StatusOr<std::vector<float>> ReadSsmState(int layer) const;
  // Phase timeline, for the bench: while on, block 0 of every layer kernel writes %globaltimer
  // (ns) at the start of each phase and at the end of the launch. ReadTimeline returns the last
  // step's stamps, [layer][half: 0 mixer, 1 MoE][kTimelineSlots] (PhaseCount's phases, then the
  // end). Both switches drop captured graphs.
  absl::Status set_timeline(bool on);
  absl::StatusOr<std::vector<uint64_t>> ReadTimeline() const;
  // Switch kernel mode / graph replay between steps (captured graphs are dropped).
  void set_mode(KernelMode mode);
  void set_graphs(bool on);

 private:
  struct Graph;
  GpuRunner() = default;
  // Copies the forward pass's tensors to the card; weight_bytes (PlanVram's) is the progress total.
  absl::Status Upload(const model::Model& model, uint64_t weight_bytes);
  absl::Status AllocateState();
  size_t TimelineStamps() const;  // entries of the timeline buffer
  absl::Status Step(int n_rows, bool with_head);
  absl::Status EnqueueStep(int n_rows, bool with_head);
  float* AllocF32(uint64_t count, uint64_t* counter);
  uint8_t* AllocBytes(uint64_t bytes, uint64_t* counter);

  std::string RowsLimitNote() const;  // " (rows_limit_)", or "" when every variant fits

  RunnerOptions options_;
  int max_rows_ = 0;
  std::string rows_limit_;
  model::HParams hp_;
  ModelDims dims_;
  Scratch scratch_;
  std::vector<MixerArgs> mixer_;
  std::vector<MoeArgs> moe_;
  HeadArgs head_;
  StepInput* step_host_ = nullptr;  // pinned
  uint32_t step_seq_ = 0;           // StepInput::seq of the last step enqueued
  StepInput* step_dev_ = nullptr;
  cudaStream_t stream_ = nullptr;
  uint64_t* timeline_ = nullptr;  // set_timeline's buffer (in allocations_)
  std::vector<void*> allocations_;
  // [RowsVariantIndex]
  LaunchShape mixer_shape_[kNumRowsVariants], moe_shape_[kNumRowsVariants],
      head_shape_[kNumRowsVariants];
  std::map<std::pair<int, bool>, std::unique_ptr<Graph>> graphs_;  // (variant, head)
  VramUse vram_;
  uint64_t conv_state_floats_ = 0, ssm_state_floats_ = 0;
};

}  // namespace tandem::megakernel
