// Hyper-parameters of the three supported architectures, read from GGUF metadata (llama.cpp keys)
// or from a Hugging Face config.json, and written back as llama.cpp keys. Everything downstream
// (tensor map, reference forward, kernels) takes its shapes from here; nothing else hard-codes
// them.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/format/metadata.h"
#include "runtime/format/tensor_info.h"

namespace tandem::model {

enum class Arch {
  kQwen3Moe,   // GGUF "qwen3moe", HF "qwen3_moe": full attention everywhere, no shared expert
  kQwen3Next,  // GGUF "qwen3next", HF "qwen3_next": DeltaNet + gated attention, shared expert
  kQwen35Moe,  // GGUF "qwen35moe", HF "qwen3_5_moe": as qwen3next with split projections, MRoPE
};

const char* ArchGgufName(Arch arch);
// "qwen3moe" -> kQwen3Moe; anything else is an error that lists the supported names.
absl::StatusOr<Arch> ArchFromGgufName(const std::string& name);
// Hugging Face model_type of the architecture ("qwen3_moe", "qwen3_next", "qwen3_5_moe").
const char* ArchHfName(Arch arch);

struct HParams {
  Arch arch = Arch::kQwen3Moe;
  int n_layer = 0;  // decoder blocks (MTP blocks excluded)
  int n_embd = 0;   // hidden size
  int n_vocab = 0;
  int n_ctx_train = 0;  // context_length
  int n_head = 0;       // attention query heads
  int n_head_kv = 0;
  int head_dim = 0;  // attention.key_length (== value_length for these models)
  int n_rot = 0;     // rotary dims (rope.dimension_count)
  float rope_theta = 0;
  float rms_eps = 1e-6f;
  std::array<int, 4> rope_sections{};  // qwen35moe MRoPE sections; text-only positions make it NeoX

  int n_expert = 0;
  int n_expert_used = 0;
  int n_ff = 0;        // dense FFN width (intermediate_size); unused by all-MoE models, kept
                       // so that metadata round-trips (0 = not written)
  int n_ff_exp = 0;    // routed expert FFN width
  int n_ff_shexp = 0;  // shared expert FFN width; 0 = no shared expert
  bool norm_topk_prob = true;
  float expert_weights_scale = 0;  // 0 or 1 = unused

  // Hybrid (qwen3next / qwen35moe) only.
  int full_attention_interval = 0;  // layer il is full attention iff (il + 1) % interval == 0
  int ssm_conv_kernel = 0;          // 4
  int ssm_d_state = 0;              // key head dim (also value head dim): 128
  int ssm_n_group = 0;              // DeltaNet key heads
  int ssm_dt_rank = 0;              // DeltaNet value heads
  int ssm_d_inner = 0;              // value dim = dt_rank * head_v_dim
  int nextn_predict_layers = 0;     // MTP blocks stored after the decoder blocks (qwen35moe)

  bool is_hybrid() const { return arch != Arch::kQwen3Moe; }
  bool IsRecurrentLayer(int il) const {
    return is_hybrid() && (il + 1) % full_attention_interval != 0;
  }
  int head_v_dim() const { return ssm_dt_rank > 0 ? ssm_d_inner / ssm_dt_rank : 0; }
  int ssm_key_dim() const { return ssm_n_group * ssm_d_state; }
  int ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_d_inner; }

  // Checks ranges and divisibility; names the offending field.
  absl::Status Validate() const;
  bool operator==(const HParams&) const = default;
};

// From GGUF metadata written with llama.cpp's keys ("{arch}.block_count", ...). n_vocab comes from
// the token list when present, else from "{arch}.vocab_size", else from dims[1] of
// token_embd.weight in `tensors`. A missing required key is an error naming the key. The result is
// validated.
absl::StatusOr<HParams> HParamsFromGguf(const format::Metadata& metadata,
                                        std::span<const format::TensorInfo> tensors = {});
// From a Hugging Face config.json (text_config nested for qwen3_5_moe). Keys the config omits take
// the transformers class defaults. The result is validated.
absl::StatusOr<HParams> HParamsFromHfConfig(const nlohmann::json& config);
// Writes general.architecture and every "{arch}.*" key llama.cpp reads for this architecture.
void HParamsToGguf(const HParams& hp, format::Metadata* metadata);

}  // namespace tandem::model
