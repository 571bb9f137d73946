// The tensors a model of given hyper-parameters must have: llama.cpp GGUF names, ggml dims, what
// each is for, which types it may take, and where it comes from in a Hugging Face checkpoint.
// Validation, synthesis, inspection and loaders all read this one table; nothing else spells out
// tensor names or shapes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/model/hparams.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::model {

// What a tensor is for (inspection, byte accounting).
enum class TensorRole {
  kEmbedding,      // token_embd
  kOutput,         // output (LM head)
  kNorm,           // every RMSNorm weight, incl. output_norm and q/k norms
  kAttention,      // full-attention projections
  kSsm,            // Gated DeltaNet parameters and projections
  kRouter,         // ffn_gate_inp
  kRoutedExperts,  // ffn_{gate,up,down}_exps
  kSharedExpert,   // ffn_{gate,up,down}_shexp and the shared-expert gate vector
  kMtp,            // multi-token-prediction block of qwen35moe: recognised, unused
};
const char* TensorRoleName(TensorRole role);

// Which quant-mix category decides a tensor's type in synthetic models (and in inspection).
// kF32 tensors are always f32: norms, ssm_a, ssm_dt, ssm_conv1d, the shared-expert gate vector.
enum class QuantCategory { kExperts, kSharedExpert, kDense, kRouter, kEmbed, kOutput, kF32 };
const char* QuantCategoryName(QuantCategory category);  // "experts", "shexp", "dense", ...

enum class TypeRule {
  kF32Only,   // vectors and small parameters read in fp32 by every backend
  kAnyCodec,  // any type Tandem has a codec for, block size dividing ne[0]
};

// How a tensor's values derive from its Hugging Face source (for the HF loader); a bit set.
inline constexpr uint32_t kHfAddOne = 1u << 0;       // zero-centred RMSNorm: GGUF stores 1 + w
inline constexpr uint32_t kHfNegExp = 1u << 1;       // ssm_a = -exp(A_log)
inline constexpr uint32_t kHfSqueezeConv = 1u << 2;  // conv1d [C, 1, K] -> ggml {K, C}
inline constexpr uint32_t kHfStackExperts =
    1u << 3;  // per-expert "{e}" tensors stacked (slowest axis)
inline constexpr uint32_t kHfQkvOfQkvz = 1u
                                         << 4;  // qwen3next: q|k|v rows regrouped from in_proj_qkvz
inline constexpr uint32_t kHfZOfQkvz = 1u << 5;  // qwen3next: z rows regrouped from in_proj_qkvz
inline constexpr uint32_t kHfVHeadsTiled = 1u
                                           << 6;  // qwen35moe: value heads grouped -> tiled order

struct TensorSpec {
  std::string name;           // GGUF name, e.g. "blk.3.ffn_up_exps.weight"
  std::vector<int64_t> dims;  // ggml order (ne[0] first)
  int layer = -1;             // block index; -1 for global tensors
  TensorRole role = TensorRole::kNorm;
  QuantCategory category = QuantCategory::kF32;
  TypeRule type_rule = TypeRule::kF32Only;
  bool required = true;  // false: may be absent (MTP tensors)
  // Hugging Face source tensor names ("{e}" stands for the expert index): the first is the
  // primary source, later ones alternatives (a fused form). Torch shape [out, in] == ggml {in,
  // out}.
  std::vector<std::string> hf_names;
  uint32_t hf_transforms = 0;  // kHf* bits

  int64_t elements() const;
  // True when `type` is allowed by type_rule and its block size divides dims[0].
  bool AllowsType(quant::GgmlType type) const;
};

// The full list for one model, in the order synthetic models write it: token_embd, the blocks,
// output_norm, output, then MTP blocks (if any).
class TensorMap {
 public:
  TensorMap() = default;  // empty
  explicit TensorMap(const HParams& hp);

  const HParams& hparams() const { return hp_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const TensorSpec* Find(std::string_view name) const;
  // True for any "blk.L." name with L in the MTP range [n_layer, n_layer + nextn_predict_layers),
  // listed in the map or not (an MTP block may carry optional extras).
  bool IsMtpName(std::string_view name) const;

  int n_recurrent_layers() const;  // Gated DeltaNet layers
  int n_attention_layers() const;  // full-attention layers
  size_t n_required() const;

 private:
  void Add(TensorSpec spec);
  void AddBlock(int il, bool mtp);

  HParams hp_;
  std::vector<TensorSpec> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

// "blk.12.attn_q.weight" -> 12; -1 for names without a block prefix.
int LayerOfTensorName(std::string_view name);

}  // namespace tandem::model
