// Hyper-parameters from and to GGUF metadata (llama.cpp keys) and from Hugging Face config.json.
// Key names and defaults follow llama.cpp's loader and transformers' config classes; nothing here
// touches tensors beyond reading the vocabulary size off token_embd when no other source has it.
#include "runtime/model/hparams.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"

namespace tandem::model {
namespace {

constexpr Arch kAllArchs[] = {Arch::kQwen3Moe, Arch::kQwen3Next, Arch::kQwen35Moe};

// llama.cpp's default when a hybrid file omits {arch}.full_attention_interval.
constexpr int kDefaultFullAttentionInterval = 4;
// llama.cpp's default rope base when {arch}.rope.freq_base is absent.
constexpr float kLlamaDefaultRopeTheta = 10000.0f;
// Qwen3.5 MRoPE sections written by the converter when the checkpoint omits them.
constexpr std::array<int, 4> kDefaultRopeSections = {11, 11, 10, 0};

// Reads "{arch}.<suffix>" keys and names the full key in every error.
class GgufKeys {
 public:
  GgufKeys(const format::Metadata& md, std::string prefix) : md_(md), prefix_(std::move(prefix)) {}

  std::string Key(std::string_view suffix) const { return prefix_ + std::string(suffix); }
  bool Has(std::string_view suffix) const { return md_.Find(Key(suffix)) != nullptr; }

  absl::StatusOr<int> Int(std::string_view suffix) const {
    std::string key = Key(suffix);
    const format::Value* v = md_.Find(key);
    if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing metadata key ", key));
    return ToInt(key, *v);
  }
  absl::StatusOr<int> IntOr(std::string_view suffix, int fallback) const {
    if (!Has(suffix)) return fallback;
    return Int(suffix);
  }
  absl::StatusOr<float> Float(std::string_view suffix) const {
    std::string key = Key(suffix);
    const format::Value* v = md_.Find(key);
    if (v == nullptr) return absl::NotFoundError(absl::StrCat("missing metadata key ", key));
    std::optional<double> f = v->AsFloat();
    if (!f || !std::isfinite(*f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key ", key, " must be a finite number, found ", v->ToString()));
    }
    return static_cast<float>(*f);
  }
  absl::StatusOr<float> FloatOr(std::string_view suffix, float fallback) const {
    if (!Has(suffix)) return fallback;
    return Float(suffix);
  }

  static absl::StatusOr<int> ToInt(const std::string& key, const format::Value& v) {
    std::optional<int64_t> i = v.AsInt();
    if (!i || *i < 0 || *i > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metadata key ", key, " must be a non-negative integer, found ", v.ToString()));
    }
    return static_cast<int>(*i);
  }

 private:
  const format::Metadata& md_;
  std::string prefix_;
};

// Integer elements of a metadata array (any integer element type).
std::optional<std::vector<int64_t>> IntArray(const format::Value& v) {
  const format::Array* array = v.AsArray();
  if (array == nullptr) return std::nullopt;
  return std::visit(
      [](const auto& elems) -> std::optional<std::vector<int64_t>> {
        using E = typename std::decay_t<decltype(elems)>::value_type;
        if constexpr (std::is_integral_v<E> && !std::is_same_v<E, bool>) {
          return std::vector<int64_t>(elems.begin(), elems.end());
        } else {
          return std::nullopt;
        }
      },
      array->values);
}

absl::Status Invalid(const std::string& field, const auto& value, const std::string& rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("hyper-parameter ", field, " = ", value, ": ", rule));
}

// --- Hugging Face config.json -------------------------------------------------------------------

// Reads typed keys of one JSON object and names the key in every error.
class JsonKeys {
 public:
  explicit JsonKeys(const nlohmann::json& j) : j_(j) {}
  bool Has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  absl::StatusOr<int> IntOr(const char* key, int fallback) const {
    if (!Has(key)) return fallback;
    const nlohmann::json& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", key, " must be a non-negative integer, found ", v.dump()));
    }
    return static_cast<int>(v.get<int64_t>());
  }
  absl::StatusOr<double> FloatOr(const char* key, double fallback) const {
    if (!Has(key)) return fallback;
    const nlohmann::json& v = j_[key];
    if (!v.is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", key, " must be a number, found ", v.dump()));
    }
    return v.get<double>();
  }
  absl::StatusOr<bool> BoolOr(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    const nlohmann::json& v = j_[key];
    if (!v.is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", key, " must be true or false, found ", v.dump()));
    }
    return v.get<bool>();
  }

 private:
  const nlohmann::json& j_;
};

// transformers class defaults of the three config classes (model-math §2.1, §3.1, §4.2 and the
// configuration_*.py files): used only for keys that a config.json leaves out.
struct HfDefaults {
  int vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
      num_key_value_heads, head_dim, max_position_embeddings, moe_intermediate_size,
      shared_expert_intermediate_size, num_experts_per_tok, num_experts;
  double rope_theta, partial_rotary_factor;
  bool norm_topk_prob;
};

HfDefaults DefaultsFor(Arch arch) {
  switch (arch) {
    case Arch::kQwen3Moe:  // head_dim 0 = hidden_size / num_attention_heads
      return {151936, 2048, 6144, 24, 32, 4, 0, 32768, 768, 0, 8, 128, 10000.0, 1.0, false};
    case Arch::kQwen3Next:
      return {151936, 2048, 5632, 48, 16, 2, 256, 32768, 512, 512, 10, 512, 10000.0, 0.25, true};
    case Arch::kQwen35Moe:
      return {248320, 2048, 0, 40, 16, 2, 256, 32768, 512, 512, 8, 256, 10000000.0, 0.25, true};
  }
  return {};
}

// The interval of a layer_types list ("linear_attention"/"full_attention"), or an error when the
// pattern is not "full attention iff (i + 1) % interval == 0".
absl::StatusOr<int> IntervalFromLayerTypes(const nlohmann::json& types, int n_layer) {
  if (!types.is_array() || static_cast<int>(types.size()) != n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: layer_types must be a list of num_hidden_layers (", n_layer, ") strings"));
  }
  std::vector<bool> full(n_layer);
  for (int i = 0; i < n_layer; ++i) {
    const nlohmann::json& t = types[i];
    if (!t.is_string()) {
      return absl::InvalidArgumentError("config.json: layer_types entries must be strings");
    }
    const std::string s = t.get<std::string>();
    if (s == "full_attention" || s == "attention") {
      full[i] = true;
    } else if (s == "linear_attention") {
      full[i] = false;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: layer_types[", i, "] = \"", s,
                       "\" (supported: linear_attention, full_attention)"));
    }
  }
  int interval = 0;
  for (int i = 0; i < n_layer; ++i) {
    if (full[i]) {
      interval = i + 1;
      break;
    }
  }
  if (interval == 0) interval = n_layer + 1;  // no attention layer at all
  for (int i = 0; i < n_layer; ++i) {
    if (full[i] != ((i + 1) % interval == 0)) {
      return absl::UnimplementedError(
          absl::StrCat("config.json: layer_types is not periodic (full attention every ", interval,
                       " layers breaks at layer ", i,
                       "); Tandem supports only a fixed full_attention_interval"));
    }
  }
  return interval;
}

}  // namespace

const char* ArchGgufName(Arch arch) {
  switch (arch) {
    case Arch::kQwen3Moe:
      return "qwen3moe";
    case Arch::kQwen3Next:
      return "qwen3next";
    case Arch::kQwen35Moe:
      return "qwen35moe";
  }
  return "unknown";
}

const char* ArchHfName(Arch arch) {
  switch (arch) {
    case Arch::kQwen3Moe:
      return "qwen3_moe";
    case Arch::kQwen3Next:
      return "qwen3_next";
    case Arch::kQwen35Moe:
      return "qwen3_5_moe";
  }
  return "unknown";
}

absl::StatusOr<Arch> ArchFromGgufName(const std::string& name) {
  std::vector<std::string> supported;
  for (Arch arch : kAllArchs) {
    if (name == ArchGgufName(arch)) return arch;
    supported.push_back(ArchGgufName(arch));
  }
  return absl::UnimplementedError(absl::StrCat(
      "unsupported architecture \"", name, "\" (supported: ", absl::StrJoin(supported, ", "), ")"));
}

absl::Status HParams::Validate() const {
  if (n_layer <= 0) return Invalid("n_layer", n_layer, "must be positive");
  if (n_embd <= 0) return Invalid("n_embd", n_embd, "must be positive");
  if (n_vocab <= 0) return Invalid("n_vocab", n_vocab, "must be positive");
  if (n_ctx_train <= 0) return Invalid("n_ctx_train", n_ctx_train, "must be positive");
  if (n_head <= 0) return Invalid("n_head", n_head, "must be positive");
  if (n_head_kv <= 0) return Invalid("n_head_kv", n_head_kv, "must be positive");
  if (n_head % n_head_kv != 0) {
    return Invalid("n_head", n_head,
                   absl::StrCat("must be a multiple of n_head_kv (", n_head_kv, ")"));
  }
  if (head_dim <= 0) return Invalid("head_dim", head_dim, "must be positive");
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0) {
    return Invalid("n_rot", n_rot,
                   absl::StrCat("must be even and in (0, head_dim = ", head_dim, "]"));
  }
  if (arch == Arch::kQwen3Moe && n_rot != head_dim) {
    return Invalid("n_rot", n_rot,
                   absl::StrCat("qwen3moe rotates the whole head (", head_dim, ")"));
  }
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) {
    return Invalid("rope_theta", rope_theta, "must be positive");
  }
  if (!(rms_eps > 0) || !std::isfinite(rms_eps))
    return Invalid("rms_eps", rms_eps, "must be positive");
  if (n_expert <= 0) return Invalid("n_expert", n_expert, "must be positive (every layer is MoE)");
  if (n_expert_used <= 0 || n_expert_used > n_expert) {
    return Invalid("n_expert_used", n_expert_used,
                   absl::StrCat("must be in [1, n_expert = ", n_expert, "]"));
  }
  if (n_ff_exp <= 0) return Invalid("n_ff_exp", n_ff_exp, "must be positive");
  if (n_ff < 0) return Invalid("n_ff", n_ff, "must not be negative");
  if (!std::isfinite(expert_weights_scale) || expert_weights_scale < 0) {
    return Invalid("expert_weights_scale", expert_weights_scale, "must be a non-negative number");
  }
  if (nextn_predict_layers < 0) {
    return Invalid("nextn_predict_layers", nextn_predict_layers, "must not be negative");
  }
  if (!is_hybrid()) {
    if (n_ff_shexp != 0) return Invalid("n_ff_shexp", n_ff_shexp, "qwen3moe has no shared expert");
    return absl::OkStatus();
  }
  if (n_ff_shexp <= 0)
    return Invalid("n_ff_shexp", n_ff_shexp, "hybrid models have a shared expert");
  if (full_attention_interval <= 0) {
    return Invalid("full_attention_interval", full_attention_interval, "must be positive");
  }
  if (ssm_conv_kernel <= 1)
    return Invalid("ssm_conv_kernel", ssm_conv_kernel, "must be at least 2");
  if (ssm_d_state <= 0) return Invalid("ssm_d_state", ssm_d_state, "must be positive");
  if (ssm_n_group <= 0) return Invalid("ssm_n_group", ssm_n_group, "must be positive");
  if (ssm_dt_rank <= 0) return Invalid("ssm_dt_rank", ssm_dt_rank, "must be positive");
  if (ssm_dt_rank % ssm_n_group != 0) {
    return Invalid("ssm_dt_rank", ssm_dt_rank,
                   absl::StrCat("value heads must be a multiple of key heads (ssm_n_group = ",
                                ssm_n_group, ")"));
  }
  if (ssm_d_inner <= 0 || ssm_d_inner % ssm_dt_rank != 0) {
    return Invalid("ssm_d_inner", ssm_d_inner,
                   absl::StrCat("must be a positive multiple of ssm_dt_rank (", ssm_dt_rank, ")"));
  }
  if (head_v_dim() != ssm_d_state) {
    return Invalid("ssm_d_inner", ssm_d_inner,
                   absl::StrCat("value head dim ", head_v_dim(),
                                " must equal the key head dim ssm_d_state (", ssm_d_state, ")"));
  }
  if (arch == Arch::kQwen35Moe) {
    int sum = 0;
    for (int s : rope_sections) {
      if (s < 0) return Invalid("rope_sections", s, "sections must not be negative");
      sum += s;
    }
    if (sum == 0 || sum > n_rot / 2) {
      return Invalid("rope_sections", sum,
                     absl::StrCat("section sum must be in [1, n_rot / 2 = ", n_rot / 2, "]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HParams> HParamsFromGguf(const format::Metadata& metadata,
                                        std::span<const format::TensorInfo> tensors) {
  std::optional<std::string> arch_name = metadata.GetString("general.architecture");
  if (!arch_name) return absl::NotFoundError("missing metadata key general.architecture");
  HParams hp;
  TANDEM_ASSIGN_OR_RETURN(hp.arch, ArchFromGgufName(*arch_name));
  GgufKeys k(metadata, absl::StrCat(*arch_name, "."));

  TANDEM_ASSIGN_OR_RETURN(int block_count, k.Int("block_count"));
  TANDEM_ASSIGN_OR_RETURN(hp.nextn_predict_layers, k.IntOr("nextn_predict_layers", 0));
  if (hp.nextn_predict_layers >= block_count) {
    return absl::InvalidArgumentError(
        absl::StrCat(k.Key("nextn_predict_layers"), " = ", hp.nextn_predict_layers,
                     " leaves no decoder block out of ", k.Key("block_count"), " = ", block_count));
  }
  hp.n_layer = block_count - hp.nextn_predict_layers;
  TANDEM_ASSIGN_OR_RETURN(hp.n_embd, k.Int("embedding_length"));
  TANDEM_ASSIGN_OR_RETURN(hp.n_ctx_train, k.Int("context_length"));
  TANDEM_ASSIGN_OR_RETURN(hp.n_ff, k.IntOr("feed_forward_length", 0));
  TANDEM_ASSIGN_OR_RETURN(hp.n_head, k.Int("attention.head_count"));
  TANDEM_ASSIGN_OR_RETURN(hp.n_head_kv, k.IntOr("attention.head_count_kv", hp.n_head));
  int default_head_dim = hp.n_head > 0 ? hp.n_embd / hp.n_head : 0;
  TANDEM_ASSIGN_OR_RETURN(hp.head_dim, k.IntOr("attention.key_length", default_head_dim));
  TANDEM_ASSIGN_OR_RETURN(int value_length, k.IntOr("attention.value_length", hp.head_dim));
  if (value_length != hp.head_dim) {
    return absl::UnimplementedError(absl::StrCat(k.Key("attention.value_length"), " = ",
                                                 value_length, " differs from ",
                                                 k.Key("attention.key_length"), " = ", hp.head_dim,
                                                 "; Tandem needs equal key and value heads"));
  }
  TANDEM_ASSIGN_OR_RETURN(hp.n_rot, k.IntOr("rope.dimension_count", hp.head_dim));
  TANDEM_ASSIGN_OR_RETURN(hp.rope_theta, k.FloatOr("rope.freq_base", kLlamaDefaultRopeTheta));
  TANDEM_ASSIGN_OR_RETURN(hp.rms_eps, k.Float("attention.layer_norm_rms_epsilon"));
  TANDEM_ASSIGN_OR_RETURN(hp.n_expert, k.Int("expert_count"));
  TANDEM_ASSIGN_OR_RETURN(hp.n_expert_used, k.Int("expert_used_count"));
  TANDEM_ASSIGN_OR_RETURN(hp.n_ff_exp, k.Int("expert_feed_forward_length"));
  TANDEM_ASSIGN_OR_RETURN(hp.expert_weights_scale, k.FloatOr("expert_weights_scale", 0.0f));
  // llama.cpp renormalises the top-k weights for all three architectures.
  hp.norm_topk_prob = true;

  if (hp.is_hybrid()) {
    if (k.Has("expert_shared_feed_forward_length")) {
      TANDEM_ASSIGN_OR_RETURN(hp.n_ff_shexp, k.Int("expert_shared_feed_forward_length"));
    } else if (hp.n_ff > 0) {
      hp.n_ff_shexp = hp.n_ff;  // llama.cpp's fallback
    } else {
      return absl::NotFoundError(
          absl::StrCat("missing metadata key ", k.Key("expert_shared_feed_forward_length")));
    }
    TANDEM_ASSIGN_OR_RETURN(hp.full_attention_interval,
                            k.IntOr("full_attention_interval", kDefaultFullAttentionInterval));
    TANDEM_ASSIGN_OR_RETURN(hp.ssm_conv_kernel, k.Int("ssm.conv_kernel"));
    TANDEM_ASSIGN_OR_RETURN(hp.ssm_d_state, k.Int("ssm.state_size"));
    TANDEM_ASSIGN_OR_RETURN(hp.ssm_n_group, k.Int("ssm.group_count"));
    TANDEM_ASSIGN_OR_RETURN(hp.ssm_dt_rank, k.Int("ssm.time_step_rank"));
    TANDEM_ASSIGN_OR_RETURN(hp.ssm_d_inner, k.Int("ssm.inner_size"));
    if (const format::Value* v = metadata.Find(k.Key("attention.recurrent_layers"))) {
      // An explicit per-layer list overrides the interval rule in llama.cpp; accept it only when
      // it says the same thing.
      const format::Array* array = v->AsArray();
      const auto* flags = array ? std::get_if<std::vector<bool>>(&array->values) : nullptr;
      if (flags == nullptr || static_cast<int>(flags->size()) < hp.n_layer) {
        return absl::InvalidArgumentError(absl::StrCat(
            k.Key("attention.recurrent_layers"), " must be a bool array of block_count entries"));
      }
      for (int il = 0; il < hp.n_layer; ++il) {
        bool by_interval =
            hp.full_attention_interval > 0 && (il + 1) % hp.full_attention_interval != 0;
        if ((*flags)[il] != by_interval) {
          return absl::UnimplementedError(absl::StrCat(k.Key("attention.recurrent_layers"),
                                                       " disagrees with full_attention_interval ",
                                                       hp.full_attention_interval, " at layer ", il,
                                                       "; only periodic layouts are supported"));
        }
      }
    }
  }
  if (hp.arch == Arch::kQwen35Moe) {
    hp.rope_sections = kDefaultRopeSections;
    if (const format::Value* v = metadata.Find(k.Key("rope.dimension_sections"))) {
      std::optional<std::vector<int64_t>> sections = IntArray(*v);
      if (!sections || sections->empty() || sections->size() > 4) {
        return absl::InvalidArgumentError(
            absl::StrCat(k.Key("rope.dimension_sections"),
                         " must be an integer array of at most 4 entries, found ", v->ToString()));
      }
      hp.rope_sections = {0, 0, 0, 0};
      for (size_t i = 0; i < sections->size(); ++i)
        hp.rope_sections[i] = static_cast<int>((*sections)[i]);
    }
  }

  // Vocabulary size: token list, then {arch}.vocab_size, then the embedding table.
  if (const format::Value* tokens = metadata.Find("tokenizer.ggml.tokens")) {
    const format::Array* array = tokens->AsArray();
    if (array == nullptr) {
      return absl::InvalidArgumentError("metadata key tokenizer.ggml.tokens must be an array");
    }
    hp.n_vocab = static_cast<int>(array->size());
  } else if (k.Has("vocab_size")) {
    TANDEM_ASSIGN_OR_RETURN(hp.n_vocab, k.Int("vocab_size"));
  } else {
    for (const format::TensorInfo& t : tensors) {
      if (t.name == "token_embd.weight" && t.dims.size() == 2) {
        hp.n_vocab = static_cast<int>(t.dims[1]);
      }
    }
    if (hp.n_vocab == 0) {
      return absl::NotFoundError(
          "cannot tell the vocabulary size: no tokenizer.ggml.tokens, no vocab_size key and no "
          "token_embd.weight");
    }
  }
  TANDEM_RETURN_IF_ERROR(hp.Validate());
  return hp;
}

absl::StatusOr<HParams> HParamsFromHfConfig(const nlohmann::json& config) {
  if (!config.is_object()) return absl::InvalidArgumentError("config.json: not a JSON object");
  const nlohmann::json* text = &config;
  std::string model_type = config.value("model_type", "");
  Arch arch;
  if (model_type == "qwen3_moe") {
    arch = Arch::kQwen3Moe;
  } else if (model_type == "qwen3_next") {
    arch = Arch::kQwen3Next;
  } else if (model_type == "qwen3_5_moe" || model_type == "qwen3_5_moe_text") {
    arch = Arch::kQwen35Moe;
    if (config.contains("text_config")) {
      if (!config["text_config"].is_object()) {
        return absl::InvalidArgumentError("config.json: text_config must be an object");
      }
      text = &config["text_config"];
    }
  } else {
    return absl::UnimplementedError(
        absl::StrCat("config.json: unsupported model_type \"", model_type,
                     "\" (supported: qwen3_moe, qwen3_next, qwen3_5_moe)"));
  }
  const HfDefaults d = DefaultsFor(arch);
  JsonKeys j(*text);
  HParams hp;
  hp.arch = arch;
  TANDEM_ASSIGN_OR_RETURN(hp.n_vocab, j.IntOr("vocab_size", d.vocab_size));
  TANDEM_ASSIGN_OR_RETURN(hp.n_embd, j.IntOr("hidden_size", d.hidden_size));
  TANDEM_ASSIGN_OR_RETURN(hp.n_ff, j.IntOr("intermediate_size", d.intermediate_size));
  TANDEM_ASSIGN_OR_RETURN(hp.n_layer, j.IntOr("num_hidden_layers", d.num_hidden_layers));
  TANDEM_ASSIGN_OR_RETURN(hp.n_head, j.IntOr("num_attention_heads", d.num_attention_heads));
  TANDEM_ASSIGN_OR_RETURN(hp.n_head_kv, j.IntOr("num_key_value_heads", d.num_key_value_heads));
  int default_head_dim = d.head_dim > 0 ? d.head_dim : (hp.n_head > 0 ? hp.n_embd / hp.n_head : 0);
  TANDEM_ASSIGN_OR_RETURN(hp.head_dim, j.IntOr("head_dim", default_head_dim));
  TANDEM_ASSIGN_OR_RETURN(hp.n_ctx_train,
                          j.IntOr("max_position_embeddings", d.max_position_embeddings));
  TANDEM_ASSIGN_OR_RETURN(double eps, j.FloatOr("rms_norm_eps", 1e-6));
  hp.rms_eps = static_cast<float>(eps);
  // transformers 5 writes qwen3_moe's expert count as num_local_experts.
  TANDEM_ASSIGN_OR_RETURN(hp.n_expert, j.IntOr("num_experts", d.num_experts));
  if (!j.Has("num_experts")) {
    TANDEM_ASSIGN_OR_RETURN(hp.n_expert, j.IntOr("num_local_experts", d.num_experts));
  }
  TANDEM_ASSIGN_OR_RETURN(hp.n_expert_used, j.IntOr("num_experts_per_tok", d.num_experts_per_tok));
  TANDEM_ASSIGN_OR_RETURN(hp.n_ff_exp, j.IntOr("moe_intermediate_size", d.moe_intermediate_size));
  if (arch == Arch::kQwen35Moe) {
    hp.norm_topk_prob = true;  // Qwen3_5MoeTopKRouter always renormalises
  } else {
    TANDEM_ASSIGN_OR_RETURN(hp.norm_topk_prob, j.BoolOr("norm_topk_prob", d.norm_topk_prob));
  }

  // Every layer must be MoE: Tandem has no dense-MLP layers.
  if (arch != Arch::kQwen35Moe) {
    TANDEM_ASSIGN_OR_RETURN(int sparse_step, j.IntOr("decoder_sparse_step", 1));
    if (sparse_step != 1) {
      return absl::UnimplementedError(
          absl::StrCat("config.json: decoder_sparse_step = ", sparse_step,
                       " (only 1, every layer MoE, is supported)"));
    }
    if (j.Has("mlp_only_layers") &&
        !((*text)["mlp_only_layers"].is_array() && (*text)["mlp_only_layers"].empty())) {
      return absl::UnimplementedError(
          "config.json: mlp_only_layers must be empty (dense-MLP layers are not supported)");
    }
  }

  // RoPE: rope_parameters (transformers v5) or rope_theta / partial_rotary_factor at top level.
  double theta = d.rope_theta;
  double partial = d.partial_rotary_factor;
  std::vector<int> mrope_section;
  auto read_rope = [&](const nlohmann::json& obj) -> absl::Status {
    JsonKeys r(obj);
    TANDEM_ASSIGN_OR_RETURN(theta, r.FloatOr("rope_theta", theta));
    TANDEM_ASSIGN_OR_RETURN(partial, r.FloatOr("partial_rotary_factor", partial));
    if (obj.contains("rope_type") && obj["rope_type"].is_string()) {
      std::string type = obj["rope_type"].get<std::string>();
      if (type != "default" && type != "mrope") {
        return absl::UnimplementedError(
            absl::StrCat("config.json: rope_type \"", type, "\" is not supported"));
      }
    }
    if (obj.contains("mrope_section") && obj["mrope_section"].is_array()) {
      mrope_section.clear();
      for (const nlohmann::json& s : obj["mrope_section"]) {
        if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > 1024) {
          return absl::InvalidArgumentError(
              "config.json: mrope_section entries must be small non-negative integers");
        }
        mrope_section.push_back(static_cast<int>(s.get<int64_t>()));
      }
    }
    return absl::OkStatus();
  };
  TANDEM_RETURN_IF_ERROR(read_rope(*text));
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (text->contains(key) && (*text)[key].is_object())
      TANDEM_RETURN_IF_ERROR(read_rope((*text)[key]));
  }
  hp.rope_theta = static_cast<float>(theta);
  if (!(partial > 0 && partial <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: partial_rotary_factor = ", partial, " must be in (0, 1]"));
  }
  hp.n_rot = static_cast<int>(hp.head_dim * partial);

  if (arch != Arch::kQwen3Moe) {
    TANDEM_ASSIGN_OR_RETURN(hp.n_ff_shexp, j.IntOr("shared_expert_intermediate_size",
                                                   d.shared_expert_intermediate_size));
    TANDEM_ASSIGN_OR_RETURN(hp.ssm_conv_kernel, j.IntOr("linear_conv_kernel_dim", 4));
    TANDEM_ASSIGN_OR_RETURN(int key_head_dim, j.IntOr("linear_key_head_dim", 128));
    TANDEM_ASSIGN_OR_RETURN(int value_head_dim, j.IntOr("linear_value_head_dim", 128));
    TANDEM_ASSIGN_OR_RETURN(hp.ssm_n_group, j.IntOr("linear_num_key_heads", 16));
    TANDEM_ASSIGN_OR_RETURN(hp.ssm_dt_rank, j.IntOr("linear_num_value_heads", 32));
    if (key_head_dim != value_head_dim) {
      return absl::UnimplementedError(absl::StrCat(
          "config.json: linear_key_head_dim (", key_head_dim, ") != linear_value_head_dim (",
          value_head_dim, "); GGUF stores one state size for both"));
    }
    hp.ssm_d_state = key_head_dim;
    hp.ssm_d_inner = hp.ssm_dt_rank * value_head_dim;
    if (text->contains("layer_types") && !(*text)["layer_types"].is_null()) {
      TANDEM_ASSIGN_OR_RETURN(hp.full_attention_interval,
                              IntervalFromLayerTypes((*text)["layer_types"], hp.n_layer));
    } else {
      TANDEM_ASSIGN_OR_RETURN(hp.full_attention_interval,
                              j.IntOr("full_attention_interval", kDefaultFullAttentionInterval));
    }
  }
  if (arch == Arch::kQwen35Moe) {
    hp.rope_sections = kDefaultRopeSections;
    if (!mrope_section.empty()) {
      if (mrope_section.size() > 4) {
        return absl::InvalidArgumentError("config.json: mrope_section has more than 4 entries");
      }
      hp.rope_sections = {0, 0, 0, 0};
      for (size_t i = 0; i < mrope_section.size(); ++i) hp.rope_sections[i] = mrope_section[i];
    }
    // The converter keeps the MTP block after the decoder blocks (qwen3next drops it).
    TANDEM_ASSIGN_OR_RETURN(hp.nextn_predict_layers, j.IntOr("mtp_num_hidden_layers", 1));
  }
  TANDEM_RETURN_IF_ERROR(hp.Validate());
  return hp;
}

void HParamsToGguf(const HParams& hp, format::Metadata* md) {
  using format::Value;
  const std::string a = ArchGgufName(hp.arch);
  auto key = [&](const char* suffix) { return absl::StrCat(a, ".", suffix); };
  auto u32 = [](int v) { return Value::U32(static_cast<uint32_t>(v)); };
  md->Set("general.architecture", Value::Str(a));
  md->Set(key("vocab_size"), u32(hp.n_vocab));
  md->Set(key("block_count"), u32(hp.n_layer + hp.nextn_predict_layers));
  md->Set(key("context_length"), u32(hp.n_ctx_train));
  md->Set(key("embedding_length"), u32(hp.n_embd));
  if (hp.n_ff > 0) md->Set(key("feed_forward_length"), u32(hp.n_ff));
  md->Set(key("attention.head_count"), u32(hp.n_head));
  md->Set(key("attention.head_count_kv"), u32(hp.n_head_kv));
  md->Set(key("attention.key_length"), u32(hp.head_dim));
  md->Set(key("attention.value_length"), u32(hp.head_dim));
  md->Set(key("attention.layer_norm_rms_epsilon"), Value::F32(hp.rms_eps));
  md->Set(key("rope.freq_base"), Value::F32(hp.rope_theta));
  md->Set(key("rope.dimension_count"), u32(hp.n_rot));
  md->Set(key("expert_count"), u32(hp.n_expert));
  md->Set(key("expert_used_count"), u32(hp.n_expert_used));
  md->Set(key("expert_feed_forward_length"), u32(hp.n_ff_exp));
  if (hp.expert_weights_scale != 0) {
    md->Set(key("expert_weights_scale"), Value::F32(hp.expert_weights_scale));
  }
  if (hp.is_hybrid()) {
    md->Set(key("expert_shared_feed_forward_length"), u32(hp.n_ff_shexp));
    md->Set(key("ssm.conv_kernel"), u32(hp.ssm_conv_kernel));
    md->Set(key("ssm.state_size"), u32(hp.ssm_d_state));
    md->Set(key("ssm.group_count"), u32(hp.ssm_n_group));
    md->Set(key("ssm.time_step_rank"), u32(hp.ssm_dt_rank));
    md->Set(key("ssm.inner_size"), u32(hp.ssm_d_inner));
    md->Set(key("full_attention_interval"), u32(hp.full_attention_interval));
  }
  if (hp.arch == Arch::kQwen35Moe) {
    format::Array sections;
    sections.elem_type = format::ValueType::kInt32;
    sections.values = std::vector<int32_t>(hp.rope_sections.begin(), hp.rope_sections.end());
    md->Set(key("rope.dimension_sections"), Value::Arr(std::move(sections)));
    md->Set(key("nextn_predict_layers"), u32(hp.nextn_predict_layers));
  }
}

}  // namespace tandem::model
