// The fp32 reference forward pass of qwen3moe, qwen3next and qwen35moe: the definition of correct
// output that every fast path is diffed against. Written for clarity, not speed: weights are
// decoded row by row from their block format, all arithmetic is fp32, rows of matrix products,
// attention over the cache and DeltaNet's heads run in parallel with oneTBB (split so that no
// result depends on it). It reads weights in llama.cpp's
// GGUF conventions (norms with +1 baked in, ssm_a = -exp(A_log), qwen35moe value heads tiled),
// whatever file the model came from.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/format/tensor_info.h"
#include "runtime/model/model.h"
#include "runtime/reference/state.h"

namespace tandem::reference {

// Called for every token and layer with the chosen experts and their (renormalised) weights.
// `row` is the token's index within the Forward call.
using RoutingHook = std::function<void(int layer, int row, std::span<const int32_t> experts,
                                       std::span<const float> weights)>;

// One routed expert of one token in a layer: out[row] += weight · expert(x[row]).
struct ExpertJob {
  int32_t row = 0;
  int32_t expert = 0;
  float weight = 0;
};

// A faster computer of the routed experts (the CPU expert pool, wired in by the engine); the
// reference itself knows nothing of how it works. It must add Σ weight · expert(x[row]) into
// out (T x n_embd, zeroed by the caller) for the stacked expert tensors of `layer`.
class ExpertComputer {
 public:
  virtual ~ExpertComputer() = default;
  virtual absl::Status ComputeExperts(int layer, const format::TensorInfo& gate_exps,
                                      const format::TensorInfo& up_exps,
                                      const format::TensorInfo& down_exps,
                                      std::span<const ExpertJob> jobs, const float* x, int T,
                                      float* out) = 0;
};

// One product of DenseComputer::MatMul: y = x · Wᵀ over the first n_rows rows of the 2-D tensor
// w, for T rows of x, into y (T x n_rows, overwritten).
struct DenseProduct {
  const format::TensorInfo* w = nullptr;
  int64_t n_rows = 0;
  float* y = nullptr;
};

// One attention over the cache for a few rows (DenseComputer::Attend): for row t < n_rows (at
// position n_past + t, seeing positions 0 .. n_past + t) and query head h, out[t][h] =
// softmax_j(scale · q·k_j) · v_j over key-value head h / (n_head / n_head_kv), before any gate.
struct AttentionRows {
  const float* q = nullptr;  // row t, head h at q + t * q_row_stride + h * q_head_stride
  int64_t q_row_stride = 0, q_head_stride = 0;
  const float* k_cache = nullptr;  // position j, key-value head g at + j * kv_stride + g * head_dim
  const float* v_cache = nullptr;
  int64_t kv_stride = 0;
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_past = 0, n_rows = 0;
  float scale = 0;
  float* out = nullptr;  // row t, head h at out + (t * n_head + h) * head_dim
};

// A faster computer of the dense half (the expert pool's threads, wired in by the engine).
class DenseComputer {
 public:
  virtual ~DenseComputer() = default;
  // The products of one x (T x dims[0], every w of the same dims[0]), which it may run together
  // (a layer's q, k and v projections).
  virtual absl::Status MatMul(std::span<const DenseProduct> products, const float* x, int T) = 0;
  // Calls body(begin, end) over ranges covering [0, n), concurrently, and returns when all have
  // run: the per-head loops (attention over the cache, DeltaNet's state update).
  virtual void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& body) = 0;
  // Most rows one Attend call takes (0: no Attend: the reference's own loop runs through
  // ParallelFor); longer batches (prefill) come in blocks of this many rows.
  virtual int MaxAttendRows() const { return 0; }
  // The attention of a few rows, equal to the reference's loop up to float rounding.
  virtual absl::Status Attend(const AttentionRows& /*rows*/) {
    return absl::UnimplementedError("this dense computer has no attention");
  }
};

struct ForwardOptions {
  // Which positions of the batch get logits: all of them, or only the last.
  bool all_logits = false;
  RoutingHook routing_hook;
  // When set, routed experts run here instead of in fp32.
  ExpertComputer* experts = nullptr;
  // When set, every product with a whole weight matrix (attention and DeltaNet projections,
  // router, shared expert, output) runs here instead of in fp32, the attention too where it has
  // Attend (fp32 in its own order), and the other per-head loops run on its threads (same
  // arithmetic). The routed experts' fp32 path (experts unset) stays in fp32.
  DenseComputer* dense = nullptr;
};

class ReferenceForward {
 public:
  // Resolves every tensor of `model` (which must outlive this object and be materialised).
  static absl::StatusOr<std::unique_ptr<ReferenceForward>> Create(const model::Model& model);

  const model::HParams& hparams() const { return hp_; }

  // Runs tokens at positions state.n_past .. n_past+T-1, updating `state`. Writes logits
  // (T x n_vocab, or 1 x n_vocab for the last position) to `logits`.
  absl::Status Forward(std::span<const int32_t> tokens, SequenceState& state,
                       const ForwardOptions& options, std::vector<float>* logits) const;

  // One layer half on T rows of hidden state x (T x n_embd, updated in place) at positions
  // n_past..: RMSNorm, then the mixer (attention or DeltaNet, using and updating `state`) or the
  // MoE, then the residual. Per-half diffs of the fast paths start from here; Forward is a loop
  // of these. Does not advance state.n_past.
  absl::Status LayerHalf(int layer, bool moe, SequenceState& state, int n_past, int T,
                         float* x) const;

 private:
  struct Layer {
    const format::TensorInfo* attn_norm = nullptr;
    const format::TensorInfo* post_norm = nullptr;  // ffn_norm (qwen3moe) / post_attention_norm
    // Attention.
    const format::TensorInfo* wq = nullptr;  // query (and, for gated attention, gate) rows
    const format::TensorInfo* wk = nullptr;
    const format::TensorInfo* wv = nullptr;
    const format::TensorInfo* wo = nullptr;
    const format::TensorInfo* q_norm = nullptr;
    const format::TensorInfo* k_norm = nullptr;
    // DeltaNet.
    const format::TensorInfo* ssm_qkv = nullptr;    // attn_qkv
    const format::TensorInfo* ssm_z = nullptr;      // attn_gate
    const format::TensorInfo* ssm_ba = nullptr;     // qwen3next: grouped [b | a] per key head
    const format::TensorInfo* ssm_beta = nullptr;   // qwen35moe
    const format::TensorInfo* ssm_alpha = nullptr;  // qwen35moe
    const format::TensorInfo* ssm_conv = nullptr;
    const format::TensorInfo* ssm_dt = nullptr;
    const format::TensorInfo* ssm_a = nullptr;
    const format::TensorInfo* ssm_norm = nullptr;
    const format::TensorInfo* ssm_out = nullptr;
    // MoE.
    const format::TensorInfo* router = nullptr;
    const format::TensorInfo* gate_exps = nullptr;
    const format::TensorInfo* up_exps = nullptr;
    const format::TensorInfo* down_exps = nullptr;
    const format::TensorInfo* shexp_gate_inp = nullptr;
    const format::TensorInfo* gate_shexp = nullptr;
    const format::TensorInfo* up_shexp = nullptr;
    const format::TensorInfo* down_shexp = nullptr;
  };

  ReferenceForward() = default;
  absl::Status RunHalf(int il, bool moe, SequenceState& state, int n_past, int T,
                       const ForwardOptions& options, float* x, float* h, float* tmp) const;
  absl::Status Attention(const Layer& w, LayerState& ls, bool f16_kv_cache, int n_past, int T,
                         const ForwardOptions& options, const float* x, float* out) const;
  absl::Status DeltaNet(const Layer& w, LayerState& ls, int T, const ForwardOptions& options,
                        const float* x, float* out) const;
  absl::Status Moe(const Layer& w, int il, int T, const float* x, const ForwardOptions& options,
                   float* out) const;

  model::HParams hp_;
  std::vector<float> rope_inv_freq_;  // theta^(-2i/n_rot), i < n_rot/2
  const format::TensorInfo* token_embd_ = nullptr;
  const format::TensorInfo* output_norm_ = nullptr;
  const format::TensorInfo* output_ = nullptr;
  std::vector<Layer> layers_;
};

}  // namespace tandem::reference
