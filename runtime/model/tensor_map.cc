// Builds the expected tensor list of qwen3moe / qwen3next / qwen35moe models from HParams, as
// llama.cpp's loader names and shapes them (model-math §2.4, §3.6, §4.3, §5.3). It describes
// tensors only; it never reads or checks actual files (validate.cc does that).
#include "runtime/model/tensor_map.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tandem::model {

const char* TensorRoleName(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbedding:
      return "embedding";
    case TensorRole::kOutput:
      return "output";
    case TensorRole::kNorm:
      return "norm";
    case TensorRole::kAttention:
      return "attention";
    case TensorRole::kSsm:
      return "ssm";
    case TensorRole::kRouter:
      return "router";
    case TensorRole::kRoutedExperts:
      return "routed_experts";
    case TensorRole::kSharedExpert:
      return "shared_expert";
    case TensorRole::kMtp:
      return "mtp";
  }
  return "unknown";
}

const char* QuantCategoryName(QuantCategory category) {
  switch (category) {
    case QuantCategory::kExperts:
      return "experts";
    case QuantCategory::kSharedExpert:
      return "shexp";
    case QuantCategory::kDense:
      return "dense";
    case QuantCategory::kRouter:
      return "router";
    case QuantCategory::kEmbed:
      return "embed";
    case QuantCategory::kOutput:
      return "output";
    case QuantCategory::kF32:
      return "f32";
  }
  return "unknown";
}

int64_t TensorSpec::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

bool TensorSpec::AllowsType(quant::GgmlType type) const {
  const quant::TypeInfo* info = quant::FindTypeInfo(static_cast<uint32_t>(type));
  if (info == nullptr) return false;
  if (type_rule == TypeRule::kF32Only) return type == quant::GgmlType::kF32;
  return info->has_codec && !dims.empty() && dims[0] % info->block_elems == 0;
}

int LayerOfTensorName(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (!name.starts_with(kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return -1;
  int layer = -1;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || ptr != name.data() + dot || layer < 0) return -1;
  return layer;
}

TensorMap::TensorMap(const HParams& hp) : hp_(hp) {
  const int64_t n_embd = hp.n_embd;
  const bool hybrid = hp.is_hybrid();
  const uint32_t norm_bits = hybrid ? kHfAddOne : 0;
  const std::string p = hp.arch == Arch::kQwen35Moe ? "model.language_model." : "model.";

  Add({.name = "token_embd.weight",
       .dims = {n_embd, hp.n_vocab},
       .role = TensorRole::kEmbedding,
       .category = QuantCategory::kEmbed,
       .type_rule = TypeRule::kAnyCodec,
       .hf_names = {p + "embed_tokens.weight"}});
  for (int il = 0; il < hp.n_layer; ++il) AddBlock(il, /*mtp=*/false);
  Add({.name = "output_norm.weight",
       .dims = {n_embd},
       .role = TensorRole::kNorm,
       .hf_names = {p + "norm.weight"},
       .hf_transforms = norm_bits});
  Add({.name = "output.weight",
       .dims = {n_embd, hp.n_vocab},
       .role = TensorRole::kOutput,
       .category = QuantCategory::kOutput,
       .type_rule = TypeRule::kAnyCodec,
       .hf_names = {"lm_head.weight"}});
  for (int i = 0; i < hp.nextn_predict_layers; ++i) AddBlock(hp.n_layer + i, /*mtp=*/true);
}

void TensorMap::Add(TensorSpec spec) {
  index_.emplace(spec.name, tensors_.size());
  tensors_.push_back(std::move(spec));
}

// One decoder block (or the MTP block, which is a full-attention block plus the nextn tensors).
void TensorMap::AddBlock(int il, bool mtp) {
  const HParams& hp = hp_;
  const int64_t n_embd = hp.n_embd;
  const bool hybrid = hp.is_hybrid();
  const uint32_t norm_bits = hybrid ? kHfAddOne : 0;
  const std::string blk = absl::StrCat("blk.", il, ".");
  const std::string p = hp.arch == Arch::kQwen35Moe ? "model.language_model." : "model.";
  const std::string hf =
      mtp ? absl::StrCat("mtp.layers.", il - hp.n_layer, ".") : absl::StrCat(p, "layers.", il, ".");
  const bool recurrent = !mtp && hp.IsRecurrentLayer(il);

  // Role and requiredness of everything in an MTP block are overridden here.
  auto add = [&](std::string suffix, std::vector<int64_t> dims, TensorRole role,
                 QuantCategory category, std::vector<std::string> hf_names, uint32_t bits = 0) {
    TensorSpec spec{
        .name = blk + suffix,
        .dims = std::move(dims),
        .layer = il,
        .role = mtp ? TensorRole::kMtp : role,
        .category = category,
        .type_rule = category == QuantCategory::kF32 ? TypeRule::kF32Only : TypeRule::kAnyCodec,
        .required = !mtp,
        .hf_names = std::move(hf_names),
        .hf_transforms = bits};
    Add(std::move(spec));
  };
  using QC = QuantCategory;
  using R = TensorRole;

  if (mtp) {
    add("nextn.eh_proj.weight", {2 * n_embd, n_embd}, R::kMtp, QC::kDense, {"mtp.fc.weight"});
    add("nextn.enorm.weight", {n_embd}, R::kMtp, QC::kF32, {"mtp.pre_fc_norm_embedding.weight"},
        norm_bits);
    add("nextn.hnorm.weight", {n_embd}, R::kMtp, QC::kF32, {"mtp.pre_fc_norm_hidden.weight"},
        norm_bits);
    add("nextn.shared_head_norm.weight", {n_embd}, R::kMtp, QC::kF32, {"mtp.norm.weight"},
        norm_bits);
  }

  add("attn_norm.weight", {n_embd}, R::kNorm, QC::kF32, {hf + "input_layernorm.weight"}, norm_bits);
  if (recurrent) {
    const int64_t d_inner = hp.ssm_d_inner;
    const int64_t conv_dim = hp.ssm_conv_dim();
    const int64_t dt_rank = hp.ssm_dt_rank;
    const std::string la = hf + "linear_attn.";
    if (hp.arch == Arch::kQwen3Next) {
      add("attn_qkv.weight", {n_embd, conv_dim}, R::kSsm, QC::kDense, {la + "in_proj_qkvz.weight"},
          kHfQkvOfQkvz);
      add("attn_gate.weight", {n_embd, d_inner}, R::kSsm, QC::kDense, {la + "in_proj_qkvz.weight"},
          kHfZOfQkvz);
      add("ssm_ba.weight", {n_embd, 2 * dt_rank}, R::kSsm, QC::kDense, {la + "in_proj_ba.weight"});
    } else {
      add("attn_qkv.weight", {n_embd, conv_dim}, R::kSsm, QC::kDense, {la + "in_proj_qkv.weight"},
          kHfVHeadsTiled);
      add("attn_gate.weight", {n_embd, d_inner}, R::kSsm, QC::kDense, {la + "in_proj_z.weight"},
          kHfVHeadsTiled);
      add("ssm_beta.weight", {n_embd, dt_rank}, R::kSsm, QC::kDense, {la + "in_proj_b.weight"},
          kHfVHeadsTiled);
      add("ssm_alpha.weight", {n_embd, dt_rank}, R::kSsm, QC::kDense, {la + "in_proj_a.weight"},
          kHfVHeadsTiled);
    }
    const uint32_t tiled = hp.arch == Arch::kQwen35Moe ? kHfVHeadsTiled : 0;
    add("ssm_conv1d.weight", {hp.ssm_conv_kernel, conv_dim}, R::kSsm, QC::kF32,
        {la + "conv1d.weight"}, kHfSqueezeConv | tiled);
    add("ssm_dt.bias", {dt_rank}, R::kSsm, QC::kF32, {la + "dt_bias"}, tiled);
    add("ssm_a", {dt_rank}, R::kSsm, QC::kF32, {la + "A_log"}, kHfNegExp | tiled);
    add("ssm_norm.weight", {hp.ssm_d_state}, R::kNorm, QC::kF32, {la + "norm.weight"});
    add("ssm_out.weight", {d_inner, n_embd}, R::kSsm, QC::kDense, {la + "out_proj.weight"}, tiled);
  } else {
    const int64_t q_dim = static_cast<int64_t>(hp.n_head) * hp.head_dim;
    const int64_t kv_dim = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
    const std::string sa = hf + "self_attn.";
    // Hybrid models project query and output gate together: per head [query | gate].
    add("attn_q.weight", {n_embd, hybrid ? 2 * q_dim : q_dim}, R::kAttention, QC::kDense,
        {sa + "q_proj.weight"});
    add("attn_k.weight", {n_embd, kv_dim}, R::kAttention, QC::kDense, {sa + "k_proj.weight"});
    add("attn_v.weight", {n_embd, kv_dim}, R::kAttention, QC::kDense, {sa + "v_proj.weight"});
    add("attn_output.weight", {q_dim, n_embd}, R::kAttention, QC::kDense, {sa + "o_proj.weight"});
    add("attn_q_norm.weight", {hp.head_dim}, R::kNorm, QC::kF32, {sa + "q_norm.weight"}, norm_bits);
    add("attn_k_norm.weight", {hp.head_dim}, R::kNorm, QC::kF32, {sa + "k_norm.weight"}, norm_bits);
  }

  add(hybrid ? "post_attention_norm.weight" : "ffn_norm.weight", {n_embd}, R::kNorm, QC::kF32,
      {hf + "post_attention_layernorm.weight"}, norm_bits);
  const std::string mlp = hf + "mlp.";
  add("ffn_gate_inp.weight", {n_embd, hp.n_expert}, R::kRouter, QC::kRouter, {mlp + "gate.weight"});
  add("ffn_gate_exps.weight", {n_embd, hp.n_ff_exp, hp.n_expert}, R::kRoutedExperts, QC::kExperts,
      {mlp + "experts.{e}.gate_proj.weight", mlp + "experts.gate_up_proj"}, kHfStackExperts);
  add("ffn_up_exps.weight", {n_embd, hp.n_ff_exp, hp.n_expert}, R::kRoutedExperts, QC::kExperts,
      {mlp + "experts.{e}.up_proj.weight", mlp + "experts.gate_up_proj"}, kHfStackExperts);
  add("ffn_down_exps.weight", {hp.n_ff_exp, n_embd, hp.n_expert}, R::kRoutedExperts, QC::kExperts,
      {mlp + "experts.{e}.down_proj.weight", mlp + "experts.down_proj"}, kHfStackExperts);
  if (hp.n_ff_shexp > 0) {
    add("ffn_gate_inp_shexp.weight", {n_embd}, R::kSharedExpert, QC::kF32,
        {mlp + "shared_expert_gate.weight"});
    add("ffn_gate_shexp.weight", {n_embd, hp.n_ff_shexp}, R::kSharedExpert, QC::kSharedExpert,
        {mlp + "shared_expert.gate_proj.weight"});
    add("ffn_up_shexp.weight", {n_embd, hp.n_ff_shexp}, R::kSharedExpert, QC::kSharedExpert,
        {mlp + "shared_expert.up_proj.weight"});
    add("ffn_down_shexp.weight", {hp.n_ff_shexp, n_embd}, R::kSharedExpert, QC::kSharedExpert,
        {mlp + "shared_expert.down_proj.weight"});
  }
}

const TensorSpec* TensorMap::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

bool TensorMap::IsMtpName(std::string_view name) const {
  int layer = LayerOfTensorName(name);
  return layer >= hp_.n_layer && layer < hp_.n_layer + hp_.nextn_predict_layers;
}

int TensorMap::n_recurrent_layers() const {
  int n = 0;
  for (int il = 0; il < hp_.n_layer; ++il) n += hp_.IsRecurrentLayer(il) ? 1 : 0;
  return n;
}

int TensorMap::n_attention_layers() const { return hp_.n_layer - n_recurrent_layers(); }

size_t TensorMap::n_required() const {
  size_t n = 0;
  for (const TensorSpec& t : tensors_) n += t.required ? 1 : 0;
  return n;
}

}  // namespace tandem::model
