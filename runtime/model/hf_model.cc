#include "runtime/model/hf_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/base/status_macros.h"
#include "runtime/format/safetensors.h"
#include "runtime/quant/float16.h"

namespace tandem::model {
namespace {

using format::SafetensorsTensor;
using format::TensorInfo;
using quant::GgmlType;

int ElemBytes(GgmlType t) { return t == GgmlType::kF32 ? 4 : 2; }

float ElemToF32(GgmlType t, const uint8_t* p) {
  if (t == GgmlType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == GgmlType::kF16 ? quant::Fp16ToF32(h) : quant::Bf16ToF32(h);
}

// torch shape [a, b, c] -> ggml dims {c, b, a}
std::vector<int64_t> GgmlDims(const std::vector<int64_t>& shape) {
  return std::vector<int64_t>(shape.rbegin(), shape.rend());
}

class HfModel : public Model {
 public:
  absl::Status Load(const std::string& dir);

 private:
  const SafetensorsTensor* Get(const std::string& name) {
    used_.insert(name);
    const SafetensorsTensor* t = ckpt_->Find(prefix_ + name.substr(6));  // name starts "model."
    if (t == nullptr) t = ckpt_->Find(name);
    if (t == nullptr) absl::StrAppend(&missing_, missing_.empty() ? "" : ", ", name);
    if (t != nullptr) used_.insert(t->name);
    return t;
  }
  // Same tensor, same bytes (zero copy).
  void Alias(const std::string& gguf, const SafetensorsTensor* t) {
    if (t == nullptr) return;
    TensorInfo info;
    info.name = gguf;
    info.dims = GgmlDims(t->shape);
    info.type = t->type;
    info.nbytes = t->data.size();
    info.data = t->data.data();
    tensors_.push_back(std::move(info));
  }
  // A new fp32 tensor computed element-wise from `t` (norm +1, -exp(A_log), conv weights).
  void MapF32(const std::string& gguf, const SafetensorsTensor* t, std::vector<int64_t> dims,
              const std::function<float(float)>& f, const std::vector<int64_t>* order = nullptr,
              int64_t block = 1) {
    if (t == nullptr) return;
    const int64_t n = static_cast<int64_t>(t->data.size()) / ElemBytes(t->type);
    std::vector<uint8_t>& buf = owned_.emplace_back(n * sizeof(float));
    float* out = reinterpret_cast<float*>(buf.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t src = order == nullptr ? i : (*order)[i / block] * block + i % block;
      out[i] = f(ElemToF32(t->type, t->data.data() + src * ElemBytes(t->type)));
    }
    Push(gguf, std::move(dims), GgmlType::kF32, buf);
  }
  // A new tensor of whole rows gathered from sources, keeping the element type.
  struct RowRef {
    const SafetensorsTensor* t;
    int64_t row;  // row of t viewed as [rows, shape.back()]
  };
  void Gather(const std::string& gguf, std::vector<int64_t> dims, const std::vector<RowRef>& rows) {
    if (rows.empty() || rows[0].t == nullptr) return;
    const GgmlType type = rows[0].t->type;
    const int64_t row_bytes = dims[0] * ElemBytes(type);
    std::vector<uint8_t>& buf = owned_.emplace_back(rows.size() * row_bytes);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::memcpy(buf.data() + i * row_bytes, rows[i].t->data.data() + rows[i].row * row_bytes,
                  row_bytes);
    }
    Push(gguf, std::move(dims), type, buf);
  }
  void Push(const std::string& gguf, std::vector<int64_t> dims, GgmlType type,
            const std::vector<uint8_t>& buf) {
    TensorInfo info;
    info.name = gguf;
    info.dims = std::move(dims);
    info.type = type;
    info.nbytes = buf.size();
    info.data = buf.data();
    tensors_.push_back(std::move(info));
  }
  absl::Status CheckShape(const SafetensorsTensor* t, const std::vector<int64_t>& shape) {
    if (t != nullptr && t->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": tensor ", t->name, " has shape ", format::DimsToString(t->shape),
          ", expected ", format::DimsToString(shape), " from config.json"));
    }
    return absl::OkStatus();
  }
  absl::Status LoadExperts(int il);
  absl::Status LoadDeltaNet(int il);

  std::unique_ptr<format::HfCheckpoint> ckpt_;
  std::string prefix_ = "model.";  // "model.language_model." for multimodal qwen3_5_moe
  std::vector<std::vector<uint8_t>> owned_;
  std::set<std::string> used_;
  std::string missing_;
};

absl::Status HfModel::LoadExperts(int il) {
  const HParams& hp = hparams_;
  const int E = hp.n_expert, I = hp.n_ff_exp, H = hp.n_embd;
  const std::string p = absl::StrCat("model.layers.", il, ".mlp.");
  const std::string g = absl::StrCat("blk.", il, ".");
  const bool fused = ckpt_->Find(prefix_ + absl::StrCat("layers.", il, ".mlp.experts.gate_up_proj")) != nullptr;
  if (fused) {
    // transformers 5: gate_up_proj [E, 2I, H] (gate rows first), down_proj [E, H, I].
    const SafetensorsTensor* gu = Get(p + "experts.gate_up_proj");
    const SafetensorsTensor* down = Get(p + "experts.down_proj");
    TANDEM_RETURN_IF_ERROR(CheckShape(gu, {E, 2 * I, H}));
    TANDEM_RETURN_IF_ERROR(CheckShape(down, {E, H, I}));
    std::vector<RowRef> gate_rows, up_rows;
    for (int e = 0; e < E; ++e) {
      for (int r = 0; r < I; ++r) {
        gate_rows.push_back({gu, int64_t{e} * 2 * I + r});
        up_rows.push_back({gu, int64_t{e} * 2 * I + I + r});
      }
    }
    Gather(g + "ffn_gate_exps.weight", {H, I, E}, gate_rows);
    Gather(g + "ffn_up_exps.weight", {H, I, E}, up_rows);
    Alias(g + "ffn_down_exps.weight", down);
    return absl::OkStatus();
  }
  // Hub layout: one tensor per expert, stacked on the slowest axis.
  for (const char* proj : {"gate", "up", "down"}) {
    std::vector<RowRef> rows;
    const bool is_down = std::strcmp(proj, "down") == 0;
    const int n_rows = is_down ? H : I;
    for (int e = 0; e < E; ++e) {
      const SafetensorsTensor* t = Get(absl::StrCat(p, "experts.", e, ".", proj, "_proj.weight"));
      if (t == nullptr) return absl::OkStatus();  // reported as missing
      TANDEM_RETURN_IF_ERROR(CheckShape(t, is_down ? std::vector<int64_t>{H, I}
                                                   : std::vector<int64_t>{I, H}));
      for (int r = 0; r < n_rows; ++r) rows.push_back({t, r});
    }
    Gather(absl::StrCat(g, "ffn_", proj, "_exps.weight"),
           is_down ? std::vector<int64_t>{I, H, E} : std::vector<int64_t>{H, I, E}, rows);
  }
  return absl::OkStatus();
}

absl::Status HfModel::LoadDeltaNet(int il) {
  const HParams& hp = hparams_;
  const int H = hp.n_embd, n_k = hp.ssm_n_group, n_v = hp.ssm_dt_rank, dk = hp.ssm_d_state;
  const int dv = hp.head_v_dim(), r = n_v / n_k, key_dim = hp.ssm_key_dim();
  const int conv_dim = hp.ssm_conv_dim(), K = hp.ssm_conv_kernel;
  const std::string p = absl::StrCat("model.layers.", il, ".linear_attn.");
  const std::string g = absl::StrCat("blk.", il, ".");
  const auto identity = [](float v) { return v; };

  // Value-head order. qwen3next keeps HF's grouped order (head g*r+i belongs to key head g);
  // qwen35moe GGUFs tile them (new head i*n_k+g holds old head g*r+i), as llama.cpp converts.
  std::vector<int64_t> head_order(n_v);
  for (int j = 0; j < n_v; ++j) {
    head_order[j] = hp.arch == Arch::kQwen35Moe ? (j % n_k) * r + j / n_k : j;
  }

  if (hp.arch == Arch::kQwen3Next) {
    const SafetensorsTensor* qkvz = Get(p + "in_proj_qkvz.weight");
    const int G = 2 * dk + 2 * r * dv;  // rows per key head: [q | k | v (r heads) | z (r heads)]
    TANDEM_RETURN_IF_ERROR(CheckShape(qkvz, {int64_t{n_k} * G, H}));
    std::vector<RowRef> qkv_rows, z_rows;
    for (int part = 0; part < 2; ++part) {  // all q, then all k
      for (int kh = 0; kh < n_k; ++kh) {
        for (int d = 0; d < dk; ++d) qkv_rows.push_back({qkvz, int64_t{kh} * G + part * dk + d});
      }
    }
    for (int kh = 0; kh < n_k; ++kh) {
      for (int d = 0; d < r * dv; ++d) {
        qkv_rows.push_back({qkvz, int64_t{kh} * G + 2 * dk + d});
        z_rows.push_back({qkvz, int64_t{kh} * G + 2 * dk + r * dv + d});
      }
    }
    Gather(g + "attn_qkv.weight", {H, conv_dim}, qkv_rows);
    Gather(g + "attn_gate.weight", {H, hp.ssm_d_inner}, z_rows);
    const SafetensorsTensor* ba = Get(p + "in_proj_ba.weight");
    TANDEM_RETURN_IF_ERROR(CheckShape(ba, {2 * n_v, H}));
    Alias(g + "ssm_ba.weight", ba);
  } else {
    const SafetensorsTensor* qkv = Get(p + "in_proj_qkv.weight");
    const SafetensorsTensor* z = Get(p + "in_proj_z.weight");
    const SafetensorsTensor* b = Get(p + "in_proj_b.weight");
    const SafetensorsTensor* a = Get(p + "in_proj_a.weight");
    TANDEM_RETURN_IF_ERROR(CheckShape(qkv, {conv_dim, H}));
    TANDEM_RETURN_IF_ERROR(CheckShape(z, {hp.ssm_d_inner, H}));
    TANDEM_RETURN_IF_ERROR(CheckShape(b, {n_v, H}));
    TANDEM_RETURN_IF_ERROR(CheckShape(a, {n_v, H}));
    std::vector<RowRef> qkv_rows, z_rows, b_rows, a_rows;
    for (int row = 0; row < 2 * key_dim; ++row) qkv_rows.push_back({qkv, row});
    for (int j = 0; j < n_v; ++j) {
      for (int d = 0; d < dv; ++d) {
        qkv_rows.push_back({qkv, 2 * key_dim + head_order[j] * dv + d});
        z_rows.push_back({z, head_order[j] * dv + d});
      }
      b_rows.push_back({b, head_order[j]});
      a_rows.push_back({a, head_order[j]});
    }
    Gather(g + "attn_qkv.weight", {H, conv_dim}, qkv_rows);
    Gather(g + "attn_gate.weight", {H, hp.ssm_d_inner}, z_rows);
    Gather(g + "ssm_beta.weight", {H, n_v}, b_rows);
    Gather(g + "ssm_alpha.weight", {H, n_v}, a_rows);
  }

  // conv1d [conv_dim, 1, K] -> {K, conv_dim} f32, value channels in head order.
  const SafetensorsTensor* conv = Get(p + "conv1d.weight");
  TANDEM_RETURN_IF_ERROR(CheckShape(conv, {conv_dim, 1, K}));
  std::vector<int64_t> channel_order(conv_dim);
  for (int c = 0; c < 2 * key_dim; ++c) channel_order[c] = c;
  for (int j = 0; j < n_v; ++j) {
    for (int d = 0; d < dv; ++d) channel_order[2 * key_dim + j * dv + d] = 2 * key_dim + head_order[j] * dv + d;
  }
  MapF32(g + "ssm_conv1d.weight", conv, {K, conv_dim}, identity, &channel_order, K);

  const SafetensorsTensor* dt = Get(p + "dt_bias");
  const SafetensorsTensor* a_log = Get(p + "A_log");
  TANDEM_RETURN_IF_ERROR(CheckShape(dt, {n_v}));
  TANDEM_RETURN_IF_ERROR(CheckShape(a_log, {n_v}));
  MapF32(g + "ssm_dt.bias", dt, {n_v}, identity, &head_order);
  MapF32(g + "ssm_a", a_log, {n_v}, [](float v) { return -std::exp(v); }, &head_order);
  const SafetensorsTensor* norm = Get(p + "norm.weight");
  TANDEM_RETURN_IF_ERROR(CheckShape(norm, {dv}));
  MapF32(g + "ssm_norm.weight", norm, {dv}, identity);  // gated norm: no +1

  const SafetensorsTensor* out = Get(p + "out_proj.weight");
  TANDEM_RETURN_IF_ERROR(CheckShape(out, {H, hp.ssm_d_inner}));
  if (hp.arch == Arch::kQwen35Moe && out != nullptr) {
    // Input columns follow the value-head order: permute each row's column blocks.
    const int eb = ElemBytes(out->type);
    std::vector<uint8_t>& buf = owned_.emplace_back(out->data.size());
    for (int row = 0; row < H; ++row) {
      const uint8_t* src = out->data.data() + int64_t{row} * hp.ssm_d_inner * eb;
      uint8_t* dst = buf.data() + int64_t{row} * hp.ssm_d_inner * eb;
      for (int j = 0; j < n_v; ++j) std::memcpy(dst + j * dv * eb, src + head_order[j] * dv * eb, dv * eb);
    }
    Push(g + "ssm_out.weight", {hp.ssm_d_inner, H}, out->type, buf);
  } else {
    Alias(g + "ssm_out.weight", out);
  }
  return absl::OkStatus();
}

absl::Status HfModel::Load(const std::string& dir) {
  source_ = dir;
  TANDEM_ASSIGN_OR_RETURN(ckpt_, format::HfCheckpoint::Open(dir));
  TANDEM_ASSIGN_OR_RETURN(hparams_, HParamsFromHfConfig(ckpt_->config()));
  const HParams& hp = hparams_;
  if (ckpt_->Find("model.language_model.embed_tokens.weight") != nullptr) {
    prefix_ = "model.language_model.";
  }
  const bool hybrid = hp.is_hybrid();
  // Zero-centred norms (qwen3next / qwen35moe) store w; GGUF stores 1 + w.
  const auto norm_fn = [hybrid](float v) { return hybrid ? 1.0f + v : v; };

  const SafetensorsTensor* embd = Get("model.embed_tokens.weight");
  TANDEM_RETURN_IF_ERROR(CheckShape(embd, {hp.n_vocab, hp.n_embd}));
  Alias("token_embd.weight", embd);
  const SafetensorsTensor* final_norm = Get("model.norm.weight");
  MapF32("output_norm.weight", final_norm, {hp.n_embd}, norm_fn);
  const SafetensorsTensor* head = ckpt_->Find("lm_head.weight");
  used_.insert("lm_head.weight");
  if (head == nullptr) head = embd;  // tied embeddings
  TANDEM_RETURN_IF_ERROR(CheckShape(head, {hp.n_vocab, hp.n_embd}));
  Alias("output.weight", head);

  for (int il = 0; il < hp.n_layer; ++il) {
    const std::string p = absl::StrCat("model.layers.", il, ".");
    const std::string g = absl::StrCat("blk.", il, ".");
    MapF32(g + "attn_norm.weight", Get(p + "input_layernorm.weight"), {hp.n_embd}, norm_fn);
    MapF32(g + (hybrid ? "post_attention_norm.weight" : "ffn_norm.weight"),
           Get(p + "post_attention_layernorm.weight"), {hp.n_embd}, norm_fn);
    if (hp.IsRecurrentLayer(il)) {
      TANDEM_RETURN_IF_ERROR(LoadDeltaNet(il));
    } else {
      const int q_rows = hp.n_head * hp.head_dim * (hybrid ? 2 : 1);
      const int kv_rows = hp.n_head_kv * hp.head_dim;
      const SafetensorsTensor* q = Get(p + "self_attn.q_proj.weight");
      const SafetensorsTensor* k = Get(p + "self_attn.k_proj.weight");
      const SafetensorsTensor* v = Get(p + "self_attn.v_proj.weight");
      const SafetensorsTensor* o = Get(p + "self_attn.o_proj.weight");
      TANDEM_RETURN_IF_ERROR(CheckShape(q, {q_rows, hp.n_embd}));
      TANDEM_RETURN_IF_ERROR(CheckShape(k, {kv_rows, hp.n_embd}));
      TANDEM_RETURN_IF_ERROR(CheckShape(v, {kv_rows, hp.n_embd}));
      TANDEM_RETURN_IF_ERROR(CheckShape(o, {hp.n_embd, hp.n_head * hp.head_dim}));
      Alias(g + "attn_q.weight", q);
      Alias(g + "attn_k.weight", k);
      Alias(g + "attn_v.weight", v);
      Alias(g + "attn_output.weight", o);
      MapF32(g + "attn_q_norm.weight", Get(p + "self_attn.q_norm.weight"), {hp.head_dim}, norm_fn);
      MapF32(g + "attn_k_norm.weight", Get(p + "self_attn.k_norm.weight"), {hp.head_dim}, norm_fn);
    }
    const SafetensorsTensor* router = Get(p + "mlp.gate.weight");
    TANDEM_RETURN_IF_ERROR(CheckShape(router, {hp.n_expert, hp.n_embd}));
    Alias(g + "ffn_gate_inp.weight", router);
    TANDEM_RETURN_IF_ERROR(LoadExperts(il));
    if (hp.n_ff_shexp > 0) {
      const SafetensorsTensor* sg = Get(p + "mlp.shared_expert.gate_proj.weight");
      const SafetensorsTensor* su = Get(p + "mlp.shared_expert.up_proj.weight");
      const SafetensorsTensor* sd = Get(p + "mlp.shared_expert.down_proj.weight");
      const SafetensorsTensor* sgate = Get(p + "mlp.shared_expert_gate.weight");
      TANDEM_RETURN_IF_ERROR(CheckShape(sg, {hp.n_ff_shexp, hp.n_embd}));
      TANDEM_RETURN_IF_ERROR(CheckShape(su, {hp.n_ff_shexp, hp.n_embd}));
      TANDEM_RETURN_IF_ERROR(CheckShape(sd, {hp.n_embd, hp.n_ff_shexp}));
      TANDEM_RETURN_IF_ERROR(CheckShape(sgate, {1, hp.n_embd}));
      Alias(g + "ffn_gate_shexp.weight", sg);
      Alias(g + "ffn_up_shexp.weight", su);
      Alias(g + "ffn_down_shexp.weight", sd);
      MapF32(g + "ffn_gate_inp_shexp.weight", sgate, {hp.n_embd}, [](float v) { return v; });
    }
  }
  if (!missing_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": missing tensors: ", missing_));
  }
  // Every tensor must be understood, except the MTP head and a vision tower (unused here).
  std::string unknown;
  for (const auto& [name, t] : ckpt_->tensors()) {
    if (used_.count(name) || absl::StartsWith(name, "mtp.") ||
        absl::StartsWith(name, "model.visual.") || absl::StartsWith(name, "visual.")) {
      continue;
    }
    absl::StrAppend(&unknown, unknown.empty() ? "" : ", ", name);
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": unknown tensors: ", unknown));
  }
  HParamsToGguf(hp, &metadata_);
  metadata_.Set("general.name", format::Value::Str(std::filesystem::path(dir).filename().string()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> OpenHfModel(const std::string& dir) {
  auto model = std::make_unique<HfModel>();
  TANDEM_RETURN_IF_ERROR(model->Load(dir));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace tandem::model
