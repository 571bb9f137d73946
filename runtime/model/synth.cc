// Named synthetic shapes, quant mixes, and the random-weight generator behind `synth:NAME` and
// `tandem synth`. Each tensor is cut into fixed-size row chunks whose random stream is seeded from
// (model seed, tensor index, chunk index), so chunks can run on any thread in any order and the
// bytes never depend on the thread count. No global state besides the constant shape table.
#include "runtime/model/synth.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_for.h"
#include "runtime/base/status_macros.h"
#include "runtime/format/gguf.h"
#include "runtime/model/synth_vocab.h"
#include "runtime/quant/codec.h"

namespace tandem::model {
namespace {

using quant::GgmlType;

// Rows per chunk are chosen so that a chunk is about this many bytes: large enough to amortise task
// scheduling, small enough that many threads share a mid-size tensor and progress moves smoothly.
constexpr uint64_t kChunkBytes = uint64_t{1} << 20;

// --- Shapes ---------------------------------------------------------------------------------

HParams TinyCommon(Arch arch) {
  HParams hp;
  hp.arch = arch;
  hp.n_layer = 4;
  hp.n_embd = 256;
  hp.n_vocab = TinyVocabSize();
  hp.n_ctx_train = 4096;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 64;
  hp.rms_eps = 1e-6f;
  hp.n_expert = 8;
  hp.n_expert_used = 2;
  hp.n_ff_exp = 128;
  return hp;
}

// DeltaNet part of the tiny hybrid shapes: 2 key heads, 4 value heads of 64.
void TinyHybrid(HParams* hp) {
  hp->n_rot = hp->head_dim / 4;  // partial rotary 0.25
  hp->rope_theta = 1e7f;
  hp->n_ff_shexp = hp->n_ff_exp;
  hp->full_attention_interval = 4;
  hp->ssm_conv_kernel = 4;
  hp->ssm_d_state = 64;
  hp->ssm_n_group = 2;
  hp->ssm_dt_rank = 4;
  hp->ssm_d_inner = 4 * 64;
}

std::vector<SynthShape> BuildShapes() {
  std::vector<SynthShape> shapes;
  const QuantMix tiny_mix{};  // q8_0 everywhere: every tiny dim is a multiple of 32

  {
    HParams hp = TinyCommon(Arch::kQwen3Moe);
    hp.n_rot = hp.head_dim;
    hp.rope_theta = 1e6f;
    hp.n_ff = 768;
    shapes.push_back(
        {"tiny-qwen3moe", "qwen3moe, 4 layers, hidden 256, 8 experts top-2", hp, tiny_mix});
  }
  {
    HParams hp = TinyCommon(Arch::kQwen3Next);
    TinyHybrid(&hp);
    hp.full_attention_interval = 2;  // layers 1 and 3 attend
    hp.n_ff = 512;
    shapes.push_back(
        {"tiny-qwen3next",
         "qwen3next, 4 layers (attention every 2nd), hidden 256, 8 experts top-2 + shared", hp,
         tiny_mix});
  }
  {
    HParams hp = TinyCommon(Arch::kQwen35Moe);
    TinyHybrid(&hp);
    hp.rope_sections = {3, 3, 2, 0};  // 8 rotary pairs, as [11, 11, 10] for 32
    hp.nextn_predict_layers = 1;
    shapes.push_back(
        {"tiny-qwen35moe",
         "qwen35moe, 4 layers (attention every 4th) + 1 MTP block, hidden 256, 8 experts top-2 "
         "+ shared",
         hp, tiny_mix});
  }
  {
    HParams hp = TinyCommon(Arch::kQwen3Next);
    TinyHybrid(&hp);
    hp.n_layer = 8;
    hp.n_expert = 16;
    hp.n_expert_used = 4;
    hp.n_ff_exp = 64;
    hp.n_ff_shexp = 64;
    hp.n_ff = 512;
    shapes.push_back(
        {"tiny-flash-next",
         "flash-next in miniature: qwen3next, 8 layers (attention every 4th), hidden 256, 16 "
         "experts top-4 + shared",
         hp, tiny_mix});
  }

  QuantMix big_mix;
  big_mix.experts = GgmlType::kQ4_K;
  big_mix.shexp = GgmlType::kQ8_0;
  big_mix.dense = GgmlType::kQ8_0;
  big_mix.router = GgmlType::kF32;
  big_mix.embed = GgmlType::kQ6_K;
  big_mix.output = GgmlType::kQ6_K;
  {
    HParams hp;  // model-math §2.1
    hp.arch = Arch::kQwen3Moe;
    hp.n_layer = 48;
    hp.n_embd = 2048;
    hp.n_vocab = 151936;
    hp.n_ctx_train = 40960;
    hp.n_head = 32;
    hp.n_head_kv = 4;
    hp.head_dim = 128;
    hp.n_rot = 128;
    hp.rope_theta = 1e6f;
    hp.n_ff = 6144;
    hp.n_expert = 128;
    hp.n_expert_used = 8;
    hp.n_ff_exp = 768;
    shapes.push_back(
        {"qwen3-30b-a3b", "Qwen3-30B-A3B: qwen3moe, 48 layers, 128 experts top-8", hp, big_mix});
  }
  auto next_like = [](HParams* hp) {  // model-math §3.1 defaults shared by the hybrid shapes
    hp->n_layer = 48;
    hp->n_embd = 2048;
    hp->n_ctx_train = 262144;
    hp->n_head = 16;
    hp->n_head_kv = 2;
    hp->head_dim = 256;
    hp->n_rot = 64;
    hp->rope_theta = 1e7f;
    hp->full_attention_interval = 4;
    hp->ssm_conv_kernel = 4;
    hp->ssm_d_state = 128;
    hp->ssm_n_group = 16;
    hp->ssm_dt_rank = 32;
    hp->ssm_d_inner = 32 * 128;
  };
  {
    HParams hp;
    hp.arch = Arch::kQwen3Next;
    next_like(&hp);
    hp.n_vocab = 151936;
    hp.n_ff = 5120;
    hp.n_expert = 512;
    hp.n_expert_used = 10;
    hp.n_ff_exp = 512;
    hp.n_ff_shexp = 512;
    shapes.push_back(
        {"qwen3next-80b-a3b",
         "Qwen3-Next-80B-A3B: qwen3next, 48 layers (12 attention, 36 DeltaNet), 512 experts top-10",
         hp, big_mix});
  }
  {
    HParams hp;  // model-math §4.2, 35B column
    hp.arch = Arch::kQwen35Moe;
    next_like(&hp);
    hp.n_layer = 40;
    hp.n_vocab = 248320;
    hp.n_expert = 256;
    hp.n_expert_used = 8;
    hp.n_ff_exp = 512;
    hp.n_ff_shexp = 512;
    hp.rope_sections = {11, 11, 10, 0};
    hp.nextn_predict_layers = 1;
    shapes.push_back({"qwen35-35b-a3b",
                      "Qwen3.5-35B-A3B: qwen35moe, 40 layers (10 attention, 30 DeltaNet) + MTP, "
                      "256 experts top-8",
                      hp, big_mix});
  }
  {
    HParams hp;
    hp.arch = Arch::kQwen3Next;
    next_like(&hp);
    hp.n_vocab = 248320;
    hp.n_ff = 5120;
    hp.n_expert = 512;
    hp.n_expert_used = 10;
    hp.n_ff_exp = 768;
    hp.n_ff_shexp = 768;
    QuantMix mix = big_mix;
    mix.experts = GgmlType::kQ3_K;
    shapes.push_back(
        {"flash-next-125b",
         "Flash-Next 125B: qwen3next, 48 layers (12 attention, 36 DeltaNet), 512 experts top-10, "
         "expert FFN 768",
         hp, mix});
  }
  return shapes;
}

// llama_ftype for general.file_type, by the routed experts' type (the bulk of the bytes).
uint32_t FileTypeFor(GgmlType experts) {
  switch (experts) {
    case GgmlType::kF32:
      return 0;
    case GgmlType::kF16:
      return 1;
    case GgmlType::kQ4_0:
      return 2;
    case GgmlType::kQ4_1:
      return 3;
    case GgmlType::kQ8_0:
      return 7;
    case GgmlType::kQ5_0:
      return 8;
    case GgmlType::kQ5_1:
      return 9;
    case GgmlType::kQ2_K:
      return 10;
    case GgmlType::kQ3_K:
      return 12;  // Q3_K_M
    case GgmlType::kQ4_K:
      return 15;  // Q4_K_M
    case GgmlType::kQ5_K:
      return 17;  // Q5_K_M
    case GgmlType::kQ6_K:
      return 18;
    case GgmlType::kIQ4_NL:
      return 25;
    case GgmlType::kIQ4_XS:
      return 30;
    case GgmlType::kBF16:
      return 32;
    case GgmlType::kMXFP4:
      return 38;  // MXFP4_MOE
    default:
      return 0;
  }
}

// --- Random numbers -------------------------------------------------------------------------

uint64_t Mix64(uint64_t x) {  // SplitMix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t ChunkSeed(uint64_t model_seed, size_t tensor_index, int64_t chunk_index) {
  uint64_t h = Mix64(model_seed);
  h = Mix64(h ^ (static_cast<uint64_t>(tensor_index) + 1) * 0xD1B54A32D192ED03ull);
  return Mix64(h ^ (static_cast<uint64_t>(chunk_index) + 1) * 0x8CB92BA72F3D8DD7ull);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // [0, 1)
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  // Mean 0, variance 1: the sum of four 16-bit uniforms, rescaled (bounded tails, |z| < 3.47,
  // which suits random weights; one 64-bit draw per value).
  float Normal() {
    const uint64_t r = Next();
    const float sum =
        static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    constexpr float kMean = 4 * 32767.5f;
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 65536: var of 4 U(0,1) is 1/3
    return (sum - kMean) * kScale;
  }

 private:
  uint64_t state_;
};

// How a tensor's values are drawn: Gaussian(a, b) = mean a, std b; uniform on [a, b).
struct Init {
  bool uniform = false;
  float a = 0;
  float b = 0;
};

Init InitFor(const TensorSpec& spec, const HParams& hp) {
  const std::string& n = spec.name;
  const float inv_sqrt_embd = 1.0f / std::sqrt(static_cast<float>(hp.n_embd));
  if (n.ends_with("norm.weight")) return {false, 1.0f, 0.1f};  // gains near 1 (GGUF holds 1 + w)
  if (n.ends_with(".ssm_a")) return {true, -16.0f, -1.0f};     // -exp(A_log), A_log = log U(1, 16)
  if (n.ends_with("ssm_dt.bias")) return {true, 0.5f, 1.5f};
  if (n.ends_with("ssm_conv1d.weight")) {
    return {false, 0.0f, 1.0f / std::sqrt(static_cast<float>(spec.dims[0]))};  // N(0, 1/kernel)
  }
  if (spec.role == TensorRole::kEmbedding) return {false, 0.0f, 1.0f};  // rows of RMS 1
  if (spec.role == TensorRole::kOutput) return {false, 0.0f, 2.0f * inv_sqrt_embd};  // logit std ~2
  if (n.ends_with("ffn_gate_inp.weight")) {
    // Router logits with std 1.5: probabilities clearly uneven but far from one-hot.
    return {false, 0.0f, 1.5f * inv_sqrt_embd};
  }
  if (n.ends_with("ffn_gate_inp_shexp.weight")) return {false, 0.0f, inv_sqrt_embd};
  // Projections: N(0, 1/fan_in), fan_in = ne[0], so outputs keep the RMS of their inputs.
  return {false, 0.0f, 1.0f / std::sqrt(static_cast<float>(spec.dims[0]))};
}

void FillValues(const Init& init, Rng& rng, float* out, int64_t n) {
  if (init.uniform) {
    const float span = init.b - init.a;
    for (int64_t i = 0; i < n; ++i) out[i] = init.a + span * rng.Uniform();
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = init.a + init.b * rng.Normal();
  }
}

std::string TypeName(GgmlType type) { return quant::GetTypeInfo(type).name; }

absl::StatusOr<GgmlType> ParseCodecType(std::string_view name) {
  TANDEM_ASSIGN_OR_RETURN(GgmlType type, quant::ParseTypeName(name));
  if (!quant::CanQuantize(type)) {
    std::vector<std::string> names;
    for (const quant::TypeInfo& info : quant::kTypeInfos) {
      if (info.has_codec) names.push_back(info.name);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("quant type ", TypeName(type),
                     " has no codec (types with a codec: ", absl::StrJoin(names, ", "), ")"));
  }
  return type;
}

constexpr std::pair<const char*, QuantCategory> kMixCategories[] = {
    {"experts", QuantCategory::kExperts}, {"shexp", QuantCategory::kSharedExpert},
    {"dense", QuantCategory::kDense},     {"router", QuantCategory::kRouter},
    {"embed", QuantCategory::kEmbed},     {"output", QuantCategory::kOutput},
};

GgmlType* MixField(QuantMix* mix, QuantCategory category) {
  switch (category) {
    case QuantCategory::kExperts:
      return &mix->experts;
    case QuantCategory::kSharedExpert:
      return &mix->shexp;
    case QuantCategory::kDense:
      return &mix->dense;
    case QuantCategory::kRouter:
      return &mix->router;
    case QuantCategory::kEmbed:
      return &mix->embed;
    case QuantCategory::kOutput:
      return &mix->output;
    case QuantCategory::kF32:
      return nullptr;
  }
  return nullptr;
}

// Sums the bytes that worker threads finish and reports the running total, in increasing order,
// to a ProgressFn (which need not be thread-safe).
class ProgressCounter {
 public:
  ProgressCounter(const ProgressFn& progress, uint64_t total)
      : progress_(progress), total_(total) {}
  void Add(uint64_t bytes) {
    if (!progress_) return;
    std::lock_guard<std::mutex> lock(mu_);
    done_ += bytes;
    progress_(done_, total_);
  }

 private:
  const ProgressFn& progress_;
  const uint64_t total_;
  std::mutex mu_;
  uint64_t done_ = 0;
};

class SynthModel : public Model {
 public:
  SynthModel(const SynthPlan& plan, std::string source) {
    source_ = std::move(source);
    hparams_ = plan.hparams;
    metadata_ = plan.metadata;
    tensors_ = plan.tensors;
    IndexTensors();
  }
  absl::Status Materialize(const SynthPlan& plan, uint64_t randomize_threshold,
                           const ProgressFn& progress) {
    buffers_.resize(tensors_.size());
    ProgressCounter counter(progress, plan.total_bytes);
    auto on_bytes = [&counter](uint64_t bytes) { counter.Add(bytes); };
    for (size_t i = 0; i < tensors_.size(); ++i) {
      buffers_[i] =
          std::make_unique_for_overwrite<uint8_t[]>(std::max<uint64_t>(tensors_[i].nbytes, 1));
      TANDEM_RETURN_IF_ERROR(
          GenerateSynthTensor(plan, i, randomize_threshold,
                              std::span<uint8_t>(buffers_[i].get(), tensors_[i].nbytes), on_bytes));
      tensors_[i].data = buffers_[i].get();
    }
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
};

std::string SourceName(const SynthPlan& plan, const SynthOptions& options) {
  std::string source = absl::StrCat("synth:", plan.shape->name);
  std::vector<std::string> params;
  if (options.expert_ff > 0) params.push_back(absl::StrCat("expert_ff=", options.expert_ff));
  if (options.attention_heads > 0) {
    params.push_back(absl::StrCat("attention=", options.attention_heads, "/",
                                  options.attention_kv_heads, "/", options.attention_head_dim));
  }
  if (options.deltanet_key_heads > 0) {
    params.push_back(absl::StrCat("deltanet=", options.deltanet_key_heads, "/",
                                  options.deltanet_value_heads, "/", options.deltanet_head_dim));
  }
  if (!options.quant.empty()) params.push_back(absl::StrCat("quant=", options.quant));
  if (options.seed != kDefaultSynthSeed) params.push_back(absl::StrCat("seed=", options.seed));
  if (!params.empty()) absl::StrAppend(&source, "?", absl::StrJoin(params, "&"));
  return source;
}

}  // namespace

GgmlType QuantMix::TypeFor(QuantCategory category) const {
  QuantMix copy = *this;
  GgmlType* field = MixField(&copy, category);
  return field ? *field : GgmlType::kF32;
}

absl::Status ApplyQuantMix(std::string_view text_view, QuantMix* mix) {
  const std::string text(text_view);
  if (text.empty()) return absl::OkStatus();
  std::vector<std::string> names;
  for (const auto& [name, category] : kMixCategories) names.push_back(name);
  std::vector<QuantCategory> seen;
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  for (const std::string& part : parts) {
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == part.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quant mix \"", text, "\": \"", part, "\" is not CATEGORY=TYPE (e.g. experts=q4_k)"));
    }
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    const QuantCategory* category = nullptr;
    for (const auto& entry : kMixCategories) {
      if (key == entry.first) category = &entry.second;
    }
    if (category == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("quant mix: unknown category \"", key,
                                                     "\" (categories: ", absl::StrJoin(names, ", "),
                                                     ")"));
    }
    if (std::find(seen.begin(), seen.end(), *category) != seen.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("quant mix: category \"", key, "\" given twice"));
    }
    seen.push_back(*category);
    absl::StatusOr<GgmlType> type = ParseCodecType(value);
    if (!type.ok())
      return absl::InvalidArgumentError(absl::StrCat("quant mix: ", type.status().message()));
    *MixField(mix, *category) = *type;
  }
  return absl::OkStatus();
}

std::string QuantMixToString(const QuantMix& mix) {
  std::vector<std::string> parts;
  for (const auto& [name, category] : kMixCategories) {
    parts.push_back(absl::StrCat(name, "=", TypeName(mix.TypeFor(category))));
  }
  return absl::StrJoin(parts, ",");
}

const std::vector<SynthShape>& SynthShapes() {
  static const std::vector<SynthShape>* shapes = new std::vector<SynthShape>(BuildShapes());
  return *shapes;
}

absl::StatusOr<const SynthShape*> FindSynthShape(std::string_view name_view) {
  const std::string name(name_view);
  std::vector<std::string> names;
  for (const SynthShape& shape : SynthShapes()) {
    if (shape.name == name) return &shape;
    names.push_back(shape.name);
  }
  return absl::NotFoundError(absl::StrCat("unknown synth shape \"", name,
                                          "\" (shapes: ", absl::StrJoin(names, ", "), ")"));
}

namespace {

// `value` as a whole number of T, all of it (empty, trailing characters, a sign where T has none
// or overflow: false, *out untouched).
template <class T>
bool ParseWhole(const std::string& value, T* out) {
  T parsed{};
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty()) return false;
  *out = parsed;
  return true;
}

// The value of a head-resizing key ("attention", "deltanet"): "A/B/C" as three positive whole
// numbers into *out[0..2]; for anything else an error naming the key and its `form`, *out
// untouched.
absl::Status ParseHeadTriple(const std::string& key, const std::string& value, const char* form,
                             const std::array<int*, 3>& out) {
  const std::vector<std::string> parts = absl::StrSplit(value, '/');
  int dims[3] = {0, 0, 0};
  bool ok = parts.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) ok = ParseWhole(parts[i], &dims[i]) && dims[i] > 0;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("synth spec: ", key, " \"", value, "\" is not ", form));
  }
  for (size_t i = 0; i < 3; ++i) *out[i] = dims[i];
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseSynthSpec(std::string_view spec_view, std::string* shape, SynthOptions* options) {
  const std::string spec(spec_view);
  const size_t q = spec.find('?');
  *shape = std::string(spec.substr(0, q));
  if (shape->empty()) return absl::InvalidArgumentError("synth: missing shape name (synth:NAME)");
  if (q == std::string_view::npos) return absl::OkStatus();
  std::vector<std::string> mix_parts;
  const std::vector<std::string> params =
      absl::StrSplit(spec.substr(q + 1), '&', absl::SkipEmpty());
  for (const std::string& param : params) {
    const size_t eq = param.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("synth spec \"", spec, "\": \"", param, "\" is not KEY=VALUE"));
    }
    const std::string key = param.substr(0, eq), value = param.substr(eq + 1);
    if (key == "seed") {
      if (!ParseWhole(value, &options->seed)) {
        return absl::InvalidArgumentError(
            absl::StrCat("synth spec: seed \"", value, "\" is not an unsigned integer"));
      }
    } else if (key == "expert_ff") {
      int64_t ff = 0;
      if (!ParseWhole(value, &ff) || ff <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("synth spec: expert_ff \"", value, "\" is not a positive integer"));
      }
      options->expert_ff = ff;
    } else if (key == "attention") {
      TANDEM_RETURN_IF_ERROR(ParseHeadTriple(
          key, value, "HEADS/KV_HEADS/HEAD_DIM (e.g. 16/2/128)",
          {&options->attention_heads, &options->attention_kv_heads, &options->attention_head_dim}));
    } else if (key == "deltanet") {
      TANDEM_RETURN_IF_ERROR(
          ParseHeadTriple(key, value, "KEY_HEADS/VALUE_HEADS/HEAD_DIM (e.g. 16/32/128)",
                          {&options->deltanet_key_heads, &options->deltanet_value_heads,
                           &options->deltanet_head_dim}));
    } else if (key == "quant") {
      mix_parts.emplace_back(value);
    } else {
      bool is_category = false;
      for (const auto& entry : kMixCategories) is_category |= key == entry.first;
      if (!is_category) {
        return absl::InvalidArgumentError(
            absl::StrCat("synth spec: unknown key \"", key,
                         "\" (keys: seed, expert_ff, attention, deltanet, quant, experts, shexp, "
                         "dense, router, embed, output)"));
      }
      mix_parts.emplace_back(param);
    }
  }
  if (!mix_parts.empty()) {
    if (!options->quant.empty()) mix_parts.insert(mix_parts.begin(), options->quant);
    options->quant = absl::StrJoin(mix_parts, ",");
    QuantMix check;
    TANDEM_RETURN_IF_ERROR(ApplyQuantMix(options->quant, &check));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SynthPlan>> PlanSynth(std::string_view shape_name,
                                                     const SynthOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(const SynthShape* shape, FindSynthShape(shape_name));
  auto plan = std::make_unique<SynthPlan>();
  plan->shape = shape;
  plan->hparams = shape->hparams;
  plan->mix = shape->default_mix;
  plan->seed = options.seed;
  if (options.expert_ff > 0) plan->hparams.n_ff_exp = options.expert_ff;
  if (options.attention_heads > 0) {
    HParams& hp = plan->hparams;
    if (hp.rope_sections != std::array<int, 4>{}) {
      return absl::InvalidArgumentError(
          absl::StrCat("synth ", shape->name,
                       ": attention= cannot resize its heads (its M-RoPE sections are "
                       "fixed for head_dim ",
                       hp.head_dim, ")"));
    }
    const int64_t rotary = static_cast<int64_t>(options.attention_head_dim) * hp.n_rot;
    if (rotary % hp.head_dim != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("synth ", shape->name, ": attention head_dim ", options.attention_head_dim,
                       " cannot keep the shape's rotary share ", hp.n_rot, "/", hp.head_dim));
    }
    hp.n_rot = static_cast<int>(rotary / hp.head_dim);
    hp.n_head = options.attention_heads;
    hp.n_head_kv = options.attention_kv_heads;
    hp.head_dim = options.attention_head_dim;
  }
  if (options.deltanet_key_heads > 0) {
    HParams& hp = plan->hparams;
    if (!hp.is_hybrid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("synth ", shape->name, ": deltanet= needs a shape with DeltaNet layers"));
    }
    hp.ssm_n_group = options.deltanet_key_heads;
    hp.ssm_dt_rank = options.deltanet_value_heads;
    hp.ssm_d_state = options.deltanet_head_dim;
    hp.ssm_d_inner = options.deltanet_value_heads * options.deltanet_head_dim;
  }
  TANDEM_RETURN_IF_ERROR(ApplyQuantMix(options.quant, &plan->mix));
  TANDEM_RETURN_IF_ERROR(plan->hparams.Validate());
  plan->map = TensorMap(plan->hparams);

  plan->tensors.reserve(plan->map.tensors().size());
  for (const TensorSpec& spec : plan->map.tensors()) {
    const GgmlType type =
        spec.category == QuantCategory::kF32 ? GgmlType::kF32 : plan->mix.TypeFor(spec.category);
    const quant::TypeInfo& info = quant::GetTypeInfo(type);
    if (spec.dims[0] % info.block_elems != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "synth ", shape->name, ": ", spec.name, " cannot be ", info.name,
          ": its ne[0] = ", spec.dims[0], " is not a multiple of the ", info.name, " block size ",
          info.block_elems, " (quant category ", QuantCategoryName(spec.category), ")"));
    }
    format::TensorInfo t;
    t.name = spec.name;
    t.dims = spec.dims;
    t.type = type;
    t.nbytes = static_cast<uint64_t>(spec.elements() / info.block_elems * info.block_bytes);
    plan->total_bytes += t.nbytes;
    plan->tensors.push_back(std::move(t));
  }

  format::Metadata& md = plan->metadata;
  HParamsToGguf(plan->hparams, &md);
  md.Set("general.name", format::Value::Str(shape->name));
  md.Set("general.quantization_version", format::Value::U32(2));
  md.Set("general.file_type", format::Value::U32(FileTypeFor(plan->mix.experts)));
  md.Set("tandem.synth.shape", format::Value::Str(shape->name));
  md.Set("tandem.synth.quant", format::Value::Str(QuantMixToString(plan->mix)));
  md.Set("tandem.synth.seed", format::Value::U64(plan->seed));
  AddSynthTokenizerMetadata(plan->hparams.n_vocab, plan->hparams.arch, &md);
  return plan;
}

absl::Status GenerateSynthTensor(const SynthPlan& plan, size_t index, uint64_t randomize_threshold,
                                 std::span<uint8_t> out,
                                 const std::function<void(uint64_t)>& progress_bytes) {
  if (index >= plan.tensors.size())
    return absl::OutOfRangeError("synth: tensor index out of range");
  const format::TensorInfo& t = plan.tensors[index];
  const TensorSpec& spec = plan.map.tensors()[index];
  if (out.size() != t.nbytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("synth: ", t.name, " needs ", t.nbytes, " bytes, got ", out.size()));
  }
  const Init init = InitFor(spec, plan.hparams);
  const int64_t ne0 = t.dims[0];
  const int64_t rows = t.rows();
  const uint64_t row_bytes = static_cast<uint64_t>(t.row_bytes());
  const int64_t chunk_rows =
      std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / std::max<uint64_t>(row_bytes, 1)));
  const int64_t n_chunks = (rows + chunk_rows - 1) / chunk_rows;
  // Big zero-mean tensors get valid random blocks at the target RMS instead of an exact
  // quantisation of Gaussian floats: the same statistics for a matmul, at memory speed.
  const bool randomize = t.nbytes > randomize_threshold && !init.uniform && init.a == 0.0f;
  const int64_t block_elems = quant::GetTypeInfo(t.type).block_elems;

  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, n_chunks, 1), [&](const tbb::blocked_range<int64_t>& range) {
        std::vector<float> values;
        for (int64_t c = range.begin(); c != range.end(); ++c) {
          const int64_t r0 = c * chunk_rows;
          const int64_t r1 = std::min(rows, r0 + chunk_rows);
          const uint64_t seed = ChunkSeed(plan.seed, index, c);
          uint8_t* dst = out.data() + static_cast<uint64_t>(r0) * row_bytes;
          const uint64_t bytes = static_cast<uint64_t>(r1 - r0) * row_bytes;
          if (randomize) {
            quant::RandomizeBlocks(t.type, seed, init.b, dst, (r1 - r0) * (ne0 / block_elems));
          } else {
            Rng rng(seed);
            values.resize(static_cast<size_t>(ne0));
            for (int64_t r = r0; r < r1; ++r) {
              FillValues(init, rng, values.data(), ne0);
              quant::QuantizeRow(t.type, values.data(),
                                 out.data() + static_cast<uint64_t>(r) * row_bytes, ne0);
            }
          }
          if (progress_bytes) progress_bytes(bytes);
        }
      });
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> Synthesize(std::string_view shape_name,
                                                  const SynthOptions& options, bool materialize) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<SynthPlan> plan, PlanSynth(shape_name, options));
  auto model = std::make_unique<SynthModel>(*plan, SourceName(*plan, options));
  if (materialize) {
    TANDEM_RETURN_IF_ERROR(
        model->Materialize(*plan, options.randomize_threshold, options.progress));
  }
  return std::unique_ptr<Model>(std::move(model));
}

absl::Status WriteSynthGguf(std::string_view shape_name, const SynthOptions& options,
                            const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<SynthPlan> plan, PlanSynth(shape_name, options));
  ProgressCounter counter(options.progress, plan->total_bytes);
  auto on_bytes = [&counter](uint64_t bytes) { counter.Add(bytes); };
  format::GgufWriter writer(plan->metadata);
  for (size_t i = 0; i < plan->tensors.size(); ++i) {
    const format::TensorInfo& t = plan->tensors[i];
    TANDEM_RETURN_IF_ERROR(writer.AddTensor(
        t.name, t.dims, t.type, [&plan, i, &options, &on_bytes](std::span<uint8_t> out) {
          return GenerateSynthTensor(*plan, i, options.randomize_threshold, out, on_bytes);
        }));
  }
  return writer.Write(path);
}

}  // namespace tandem::model
