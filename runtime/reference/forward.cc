#include "runtime/reference/forward.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_for.h"
#include "runtime/base/status_macros.h"
#include "runtime/quant/float16.h"
#include "runtime/reference/matmul.h"

namespace tandem::reference {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float Silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1 and threshold 20 (ggml uses the same cut-off).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

const float* F32(const format::TensorInfo* t) { return reinterpret_cast<const float*>(t->data); }

// out = x / sqrt(mean(x^2) + eps) * w  (w may be null for a plain normalisation).
void RmsNorm(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * (w != nullptr ? w[i] : 1.0f);
}

// x * rsqrt(sum(x^2) + 1e-6): transformers' l2norm of DeltaNet queries and keys.
void L2Norm(float* x, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss) + 1e-6f);
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

// NeoX ("rotate half") RoPE on the first n_rot dims of one head: dim i pairs with i + n_rot/2.
void Rope(float* x, int n_rot, int pos, const std::vector<float>& inv_freq) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

// body(begin, end) over ranges covering [0, n), concurrently: on options.dense's threads when set,
// else on TBB's. Each index owns its outputs, so the split never changes a result.
void ForEachRange(const ForwardOptions& options, int64_t n,
                  const std::function<void(int64_t, int64_t)>& body) {
  if (options.dense != nullptr) {
    options.dense->ParallelFor(n, body);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n),
                    [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
}

// Products of one x (DenseProduct): through options.dense when set, else in fp32.
absl::Status Products(const ForwardOptions& options, std::span<const DenseProduct> products,
                      const float* x, int T) {
  if (options.dense != nullptr) return options.dense->MatMul(products, x, T);
  for (const DenseProduct& p : products) MatMul(*p.w, 0, p.n_rows, x, T, p.y);
  return absl::OkStatus();
}

// y = x · Wᵀ over the first n_rows rows of w.
absl::Status Product(const ForwardOptions& options, const format::TensorInfo& w, int64_t n_rows,
                     const float* x, int T, float* y) {
  const DenseProduct product[] = {{&w, n_rows, y}};
  return Products(options, product, x, T);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReferenceForward>> ReferenceForward::Create(
    const model::Model& model) {
  if (!model.materialized()) {
    return absl::FailedPreconditionError(
        absl::StrCat(model.source(), ": the reference forward pass needs the tensor data"));
  }
  auto fwd = std::unique_ptr<ReferenceForward>(new ReferenceForward());
  fwd->hp_ = model.hparams();
  const model::HParams& hp = fwd->hp_;
  fwd->rope_inv_freq_.resize(hp.n_rot / 2);
  for (int i = 0; i < hp.n_rot / 2; ++i) {
    fwd->rope_inv_freq_[i] = 1.0f / std::pow(hp.rope_theta, static_cast<float>(2 * i) / hp.n_rot);
  }
  std::string missing;
  auto get = [&](const std::string& name, bool required) -> const format::TensorInfo* {
    const format::TensorInfo* t = model.Find(name);
    if (t == nullptr && required) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
    return t;
  };
  fwd->token_embd_ = get("token_embd.weight", true);
  fwd->output_norm_ = get("output_norm.weight", true);
  fwd->output_ = get("output.weight", true);
  fwd->layers_.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    Layer& l = fwd->layers_[il];
    const std::string p = absl::StrCat("blk.", il, ".");
    l.attn_norm = get(p + "attn_norm.weight", true);
    l.post_norm = get(p + (hp.is_hybrid() ? "post_attention_norm.weight" : "ffn_norm.weight"), true);
    if (hp.IsRecurrentLayer(il)) {
      l.ssm_qkv = get(p + "attn_qkv.weight", true);
      l.ssm_z = get(p + "attn_gate.weight", true);
      if (hp.arch == model::Arch::kQwen35Moe) {
        l.ssm_beta = get(p + "ssm_beta.weight", true);
        l.ssm_alpha = get(p + "ssm_alpha.weight", true);
      } else {
        l.ssm_ba = get(p + "ssm_ba.weight", true);
      }
      l.ssm_conv = get(p + "ssm_conv1d.weight", true);
      l.ssm_dt = get(p + "ssm_dt.bias", true);
      l.ssm_a = get(p + "ssm_a", true);
      l.ssm_norm = get(p + "ssm_norm.weight", true);
      l.ssm_out = get(p + "ssm_out.weight", true);
    } else {
      l.wq = get(p + "attn_q.weight", true);
      l.wk = get(p + "attn_k.weight", true);
      l.wv = get(p + "attn_v.weight", true);
      l.wo = get(p + "attn_output.weight", true);
      l.q_norm = get(p + "attn_q_norm.weight", true);
      l.k_norm = get(p + "attn_k_norm.weight", true);
    }
    l.router = get(p + "ffn_gate_inp.weight", true);
    l.gate_exps = get(p + "ffn_gate_exps.weight", true);
    l.up_exps = get(p + "ffn_up_exps.weight", true);
    l.down_exps = get(p + "ffn_down_exps.weight", true);
    if (hp.n_ff_shexp > 0) {
      l.shexp_gate_inp = get(p + "ffn_gate_inp_shexp.weight", true);
      l.gate_shexp = get(p + "ffn_gate_shexp.weight", true);
      l.up_shexp = get(p + "ffn_up_shexp.weight", true);
      l.down_shexp = get(p + "ffn_down_shexp.weight", true);
    }
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.source(), ": missing tensors for the forward pass: ", missing));
  }
  // Every 1-D parameter is read as fp32 directly.
  for (const format::TensorInfo& t : model.tensors()) {
    if (t.dims.size() == 1 && t.type != quant::GgmlType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(model.source(), ": tensor ", t.name,
                                                     " must be f32, found ",
                                                     quant::GetTypeInfo(t.type).name));
    }
  }
  return fwd;
}

absl::Status ReferenceForward::Attention(const Layer& w, LayerState& ls, bool f16_kv_cache,
                                         int n_past, int T, const ForwardOptions& options,
                                         const float* x, float* out) const {
  const model::HParams& hp = hp_;
  const int hd = hp.head_dim;
  const bool gated = hp.is_hybrid();  // qwen3next/qwen35moe: query rows carry a sigmoid gate
  const int q_stride = gated ? 2 * hd : hd;
  const int q_rows = hp.n_head * q_stride;
  const int kv_dim = hp.n_head_kv * hd;
  std::vector<float> q(static_cast<size_t>(T) * q_rows), k(static_cast<size_t>(T) * kv_dim),
      v(static_cast<size_t>(T) * kv_dim);
  const DenseProduct qkv[] = {
      {w.wq, q_rows, q.data()}, {w.wk, kv_dim, k.data()}, {w.wv, kv_dim, v.data()}};
  TANDEM_RETURN_IF_ERROR(Products(options, qkv, x, T));

  const float* qn = F32(w.q_norm);
  const float* kn = F32(w.k_norm);
  for (int t = 0; t < T; ++t) {
    const int pos = n_past + t;
    for (int h = 0; h < hp.n_head; ++h) {
      float* qh = &q[static_cast<size_t>(t) * q_rows + h * q_stride];
      RmsNorm(qh, qn, hd, hp.rms_eps, qh);
      Rope(qh, hp.n_rot, pos, rope_inv_freq_);
    }
    for (int g = 0; g < hp.n_head_kv; ++g) {
      float* kh = &k[static_cast<size_t>(t) * kv_dim + g * hd];
      RmsNorm(kh, kn, hd, hp.rms_eps, kh);
      Rope(kh, hp.n_rot, pos, rope_inv_freq_);
    }
    // An f16 cache holds each value rounded to nearest (SequenceState::f16_kv_cache).
    const auto cached = [f16_kv_cache](float e) {
      return f16_kv_cache ? quant::Fp16ToF32(quant::F32ToFp16(e)) : e;
    };
    std::transform(&k[static_cast<size_t>(t) * kv_dim], &k[static_cast<size_t>(t + 1) * kv_dim],
                   &ls.k_cache[static_cast<size_t>(pos) * kv_dim], cached);
    std::transform(&v[static_cast<size_t>(t) * kv_dim], &v[static_cast<size_t>(t + 1) * kv_dim],
                   &ls.v_cache[static_cast<size_t>(pos) * kv_dim], cached);
  }

  const int group = hp.n_head / hp.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> attn(static_cast<size_t>(T) * hp.n_head * hd);
  if (const int block = options.dense != nullptr ? options.dense->MaxAttendRows() : 0; block > 0) {
    for (int t0 = 0; t0 < T; t0 += block) {
      const AttentionRows rows{.q = q.data() + static_cast<size_t>(t0) * q_rows,
                               .q_row_stride = q_rows,
                               .q_head_stride = q_stride,
                               .k_cache = ls.k_cache.data(),
                               .v_cache = ls.v_cache.data(),
                               .kv_stride = kv_dim,
                               .n_head = hp.n_head,
                               .n_head_kv = hp.n_head_kv,
                               .head_dim = hd,
                               .n_past = n_past + t0,
                               .n_rows = std::min(block, T - t0),
                               .scale = scale,
                               .out = attn.data() + static_cast<size_t>(t0) * hp.n_head * hd};
      TANDEM_RETURN_IF_ERROR(options.dense->Attend(rows));
    }
    if (gated) {  // per (row, head), on the computer's threads as the loop below gates
      ForEachRange(options, static_cast<int64_t>(T) * hp.n_head, [&](int64_t begin, int64_t end) {
        for (int64_t th = begin; th < end; ++th) {
          float* o = &attn[static_cast<size_t>(th) * hd];
          const float* gate =
              &q[static_cast<size_t>(th / hp.n_head) * q_rows + (th % hp.n_head) * q_stride + hd];
          for (int d = 0; d < hd; ++d) o[d] *= Sigmoid(gate[d]);
        }
      });
    }
    return Product(options, *w.wo, hp.n_embd, attn.data(), T, out);
  }
  // Three passes, each split into many independent indices so that a decode row's few heads still
  // spread over every thread: scores per (row, key-value head, block of keys), softmax per (row,
  // head), and values per (row, key-value head, block of dims). The first and last take each key's
  // or value's slice once for all query heads of its group. Every sum runs in key order as in one
  // loop per head, so the split never changes a result. Rows go in blocks that keep the
  // probabilities within kProbFloats.
  constexpr int64_t kKeyBlock = 64, kDimBlock = 16, kProbFloats = int64_t{1} << 24;
  const int64_t max_keys = n_past + T;
  const int rows_per_block =
      static_cast<int>(std::clamp<int64_t>(kProbFloats / (hp.n_head * max_keys), 1, T));
  // The calling thread's, kept across calls: a fresh vector would be zeroed in every layer (32
  // heads × 16k keys is 2 MB a decode layer), and every entry read below is written first. The
  // passes run on other threads, so they reach it through probs_data, not by name.
  thread_local std::vector<float> probs;
  probs.resize(std::max(probs.size(), static_cast<size_t>(rows_per_block) * hp.n_head * max_keys));
  float* const probs_data = probs.data();
  for (int t0 = 0; t0 < T; t0 += rows_per_block) {
    const int rows = std::min(rows_per_block, T - t0);
    // Query head h of row t0 + r is "th" = r * n_head + h; its group's key-value head is h / group.
    auto head_probs = [&](int64_t th) { return probs_data + th * max_keys; };
    auto query = [&](int64_t th) {
      return &q[static_cast<size_t>(t0 + th / hp.n_head) * q_rows + (th % hp.n_head) * q_stride];
    };
    auto n_keys = [&](int64_t th) { return n_past + t0 + static_cast<int>(th / hp.n_head) + 1; };
    const int64_t groups = static_cast<int64_t>(rows) * hp.n_head_kv;  // (row, key-value head)
    auto first_head = [&](int64_t rg) {
      return rg / hp.n_head_kv * hp.n_head + rg % hp.n_head_kv * group;
    };
    const int64_t key_blocks = (max_keys + kKeyBlock - 1) / kKeyBlock;
    ForEachRange(options, groups * key_blocks, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t rg = i / key_blocks, th0 = first_head(rg);
        const int g = static_cast<int>(rg % hp.n_head_kv);
        const int64_t j0 = i % key_blocks * kKeyBlock;
        const int64_t j1 = std::min<int64_t>(n_keys(th0), j0 + kKeyBlock);
        for (int64_t j = j0; j < j1; ++j) {
          const float* kj = &ls.k_cache[static_cast<size_t>(j) * kv_dim + g * hd];
          for (int64_t th = th0; th < th0 + group; ++th) {
            head_probs(th)[j] = Dot(query(th), kj, hd) * scale;
          }
        }
      }
    });
    ForEachRange(options, static_cast<int64_t>(rows) * hp.n_head, [&](int64_t begin, int64_t end) {
      for (int64_t th = begin; th < end; ++th) {
        float* p = head_probs(th);
        const int nk = n_keys(th);
        const float max_s = *std::max_element(p, p + nk);
        float sum = 0;
        for (int j = 0; j < nk; ++j) {
          p[j] = std::exp(p[j] - max_s);
          sum += p[j];
        }
        for (int j = 0; j < nk; ++j) p[j] /= sum;
      }
    });
    const int64_t dim_blocks = (hd + kDimBlock - 1) / kDimBlock;
    ForEachRange(options, groups * dim_blocks, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t rg = i / dim_blocks, th0 = first_head(rg);
        const int g = static_cast<int>(rg % hp.n_head_kv);
        const int d0 = static_cast<int>(i % dim_blocks * kDimBlock);
        const int d1 = std::min<int>(hd, d0 + kDimBlock);
        const float* v = &ls.v_cache[g * hd + d0];
        const int nk = n_keys(th0);
        for (int64_t th = th0; th < th0 + group; ++th) {
          // The block's sums in registers (a fixed length the compiler unrolls); the block's values
          // stay in L1 for the group's next head.
          const float* p = head_probs(th);
          float acc[kDimBlock] = {};
          if (d1 - d0 == kDimBlock) {
            for (int j = 0; j < nk; ++j) {
              const float* vj = v + static_cast<size_t>(j) * kv_dim;
              for (int d = 0; d < kDimBlock; ++d) acc[d] += p[j] * vj[d];
            }
          } else {
            for (int j = 0; j < nk; ++j) {
              const float* vj = v + static_cast<size_t>(j) * kv_dim;
              for (int d = 0; d < d1 - d0; ++d) acc[d] += p[j] * vj[d];
            }
          }
          float* o = &attn[static_cast<size_t>(t0 * hp.n_head + th) * hd];
          const float* gate = query(th) + hd;
          for (int d = d0; d < d1; ++d) o[d] = gated ? acc[d - d0] * Sigmoid(gate[d]) : acc[d - d0];
        }
      }
    });
  }
  return Product(options, *w.wo, hp.n_embd, attn.data(), T, out);
}

absl::Status ReferenceForward::DeltaNet(const Layer& w, LayerState& ls, int T,
                                        const ForwardOptions& options, const float* x,
                                        float* out) const {
  const model::HParams& hp = hp_;
  const int n_k = hp.ssm_n_group, n_v = hp.ssm_dt_rank;
  const int dk = hp.ssm_d_state, dv = hp.head_v_dim();
  const int r = n_v / n_k;
  const int key_dim = n_k * dk;
  const int conv_dim = hp.ssm_conv_dim();
  const int K = hp.ssm_conv_kernel;
  const bool tiled = hp.arch == model::Arch::kQwen35Moe;  // value head j reads key head j % n_k

  std::vector<float> qkv(static_cast<size_t>(T) * conv_dim), z(static_cast<size_t>(T) * hp.ssm_d_inner);
  std::vector<float> b(static_cast<size_t>(T) * n_v), a(static_cast<size_t>(T) * n_v);
  if (w.ssm_ba != nullptr) {
    // qwen3next: per key head g the rows are [b_(g,0..r-1) | a_(g,0..r-1)].
    std::vector<float> ba(static_cast<size_t>(T) * 2 * n_v);
    const DenseProduct in[] = {{w.ssm_qkv, conv_dim, qkv.data()},
                               {w.ssm_z, hp.ssm_d_inner, z.data()},
                               {w.ssm_ba, 2 * n_v, ba.data()}};
    TANDEM_RETURN_IF_ERROR(Products(options, in, x, T));
    for (int t = 0; t < T; ++t) {
      for (int g = 0; g < n_k; ++g) {
        for (int i = 0; i < r; ++i) {
          b[t * n_v + g * r + i] = ba[static_cast<size_t>(t) * 2 * n_v + g * 2 * r + i];
          a[t * n_v + g * r + i] = ba[static_cast<size_t>(t) * 2 * n_v + g * 2 * r + r + i];
        }
      }
    }
  } else {
    const DenseProduct in[] = {{w.ssm_qkv, conv_dim, qkv.data()},
                               {w.ssm_z, hp.ssm_d_inner, z.data()},
                               {w.ssm_beta, n_v, b.data()},
                               {w.ssm_alpha, n_v, a.data()}};
    TANDEM_RETURN_IF_ERROR(Products(options, in, x, T));
  }

  const float* conv_w = F32(w.ssm_conv);  // [conv_dim][K], tap K-1 multiplies the current token
  const float* dt_bias = F32(w.ssm_dt);
  const float* ssm_a = F32(w.ssm_a);
  const float* norm_w = F32(w.ssm_norm);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<float> y(conv_dim), o(static_cast<size_t>(T) * hp.ssm_d_inner);
  for (int t = 0; t < T; ++t) {
    const float* xt = &qkv[static_cast<size_t>(t) * conv_dim];
    for (int c = 0; c < conv_dim; ++c) {
      float* st = &ls.conv[static_cast<size_t>(c) * (K - 1)];
      const float* wc = &conv_w[static_cast<size_t>(c) * K];
      float acc = wc[K - 1] * xt[c];
      for (int j = 0; j < K - 1; ++j) acc += wc[j] * st[j];
      for (int j = 0; j + 1 < K - 1; ++j) st[j] = st[j + 1];
      st[K - 2] = xt[c];
      y[c] = Silu(acc);
    }
    float* q = y.data();
    float* k = y.data() + key_dim;
    const float* v = y.data() + 2 * key_dim;
    for (int g = 0; g < n_k; ++g) {
      L2Norm(q + g * dk, dk);
      L2Norm(k + g * dk, dk);
      for (int i = 0; i < dk; ++i) q[g * dk + i] *= q_scale;
    }
    // One value head per index: it owns its state S and its slice of o.
    ForEachRange(options, n_v, [&](int64_t begin, int64_t end) {
      std::vector<float> kv_mem(dv);
      for (int j = static_cast<int>(begin); j < end; ++j) {
        const int kh = tiled ? j % n_k : j / r;
        const float* qj = q + kh * dk;
        const float* kj = k + kh * dk;
        const float* vj = v + j * dv;
        const float beta = Sigmoid(b[t * n_v + j]);
        const float decay = std::exp(ssm_a[j] * Softplus(a[t * n_v + j] + dt_bias[j]));
        float* S = &ls.ssm[static_cast<size_t>(j) * dk * dv];  // S[kk][vv]
        for (int i = 0; i < dk * dv; ++i) S[i] *= decay;
        std::fill(kv_mem.begin(), kv_mem.end(), 0.0f);
        for (int kk = 0; kk < dk; ++kk) {
          for (int vv = 0; vv < dv; ++vv) kv_mem[vv] += S[kk * dv + vv] * kj[kk];
        }
        for (int vv = 0; vv < dv; ++vv) kv_mem[vv] = (vj[vv] - kv_mem[vv]) * beta;  // delta
        float* oj = &o[static_cast<size_t>(t) * hp.ssm_d_inner + j * dv];
        std::fill_n(oj, dv, 0.0f);
        for (int kk = 0; kk < dk; ++kk) {
          for (int vv = 0; vv < dv; ++vv) {
            S[kk * dv + vv] += kj[kk] * kv_mem[vv];
            oj[vv] += S[kk * dv + vv] * qj[kk];
          }
        }
        // Gated RMSNorm over the head: normalise, scale by ssm_norm, multiply by silu(z).
        RmsNorm(oj, norm_w, dv, hp.rms_eps, oj);
        const float* zj = &z[static_cast<size_t>(t) * hp.ssm_d_inner + j * dv];
        for (int vv = 0; vv < dv; ++vv) oj[vv] *= Silu(zj[vv]);
      }
    });
  }
  return Product(options, *w.ssm_out, hp.n_embd, o.data(), T, out);
}

absl::Status ReferenceForward::Moe(const Layer& w, int il, int T, const float* x,
                                   const ForwardOptions& options, float* out) const {
  const model::HParams& hp = hp_;
  const int E = hp.n_expert, k_used = hp.n_expert_used, n_ff = hp.n_ff_exp, H = hp.n_embd;
  std::vector<float> logits(static_cast<size_t>(T) * E);
  TANDEM_RETURN_IF_ERROR(Product(options, *w.router, E, x, T, logits.data()));

  // expert -> (row, weight) of every token that chose it
  std::map<int, std::vector<std::pair<int, float>>> chosen;
  std::vector<int32_t> order(E), ids(k_used);
  std::vector<float> probs(E), weights(k_used);
  for (int t = 0; t < T; ++t) {
    const float* lt = &logits[static_cast<size_t>(t) * E];
    const float mx = *std::max_element(lt, lt + E);
    float sum = 0;
    for (int e = 0; e < E; ++e) sum += probs[e] = std::exp(lt[e] - mx);
    for (int e = 0; e < E; ++e) probs[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k_used, order.end(), [&](int32_t p, int32_t q) {
      return probs[p] > probs[q] || (probs[p] == probs[q] && p < q);
    });
    float wsum = 0;
    for (int i = 0; i < k_used; ++i) {
      ids[i] = order[i];
      weights[i] = probs[order[i]];
      wsum += weights[i];
    }
    for (int i = 0; i < k_used; ++i) {
      if (hp.norm_topk_prob) weights[i] /= wsum;
      if (hp.expert_weights_scale != 0.0f && hp.expert_weights_scale != 1.0f) {
        weights[i] *= hp.expert_weights_scale;
      }
      chosen[ids[i]].push_back({t, weights[i]});
    }
    if (options.routing_hook) options.routing_hook(il, t, ids, weights);
  }

  std::fill_n(out, static_cast<size_t>(T) * H, 0.0f);
  std::vector<float> xe, g, u, d;
  if (options.experts != nullptr) {
    std::vector<ExpertJob> jobs;
    for (const auto& [e, rows] : chosen) {
      for (const auto& [row, weight] : rows) jobs.push_back({row, e, weight});
    }
    TANDEM_RETURN_IF_ERROR(options.experts->ComputeExperts(il, *w.gate_exps, *w.up_exps,
                                                           *w.down_exps, jobs, x, T, out));
    chosen.clear();
  }
  for (const auto& [e, rows] : chosen) {
    const int m = static_cast<int>(rows.size());
    xe.resize(static_cast<size_t>(m) * H);
    for (int i = 0; i < m; ++i) std::copy_n(x + static_cast<size_t>(rows[i].first) * H, H, &xe[i * H]);
    g.resize(static_cast<size_t>(m) * n_ff);
    u.resize(static_cast<size_t>(m) * n_ff);
    d.resize(static_cast<size_t>(m) * H);
    MatMul(*w.gate_exps, static_cast<int64_t>(e) * n_ff, n_ff, xe.data(), m, g.data());
    MatMul(*w.up_exps, static_cast<int64_t>(e) * n_ff, n_ff, xe.data(), m, u.data());
    for (size_t i = 0; i < g.size(); ++i) g[i] = Silu(g[i]) * u[i];
    MatMul(*w.down_exps, static_cast<int64_t>(e) * H, H, g.data(), m, d.data());
    for (int i = 0; i < m; ++i) {
      float* o = out + static_cast<size_t>(rows[i].first) * H;
      for (int c = 0; c < H; ++c) o[c] += rows[i].second * d[static_cast<size_t>(i) * H + c];
    }
  }

  if (hp.n_ff_shexp > 0) {
    const int n_sh = hp.n_ff_shexp;
    g.resize(static_cast<size_t>(T) * n_sh);
    u.resize(static_cast<size_t>(T) * n_sh);
    d.resize(static_cast<size_t>(T) * H);
    const DenseProduct gate_up[] = {{w.gate_shexp, n_sh, g.data()}, {w.up_shexp, n_sh, u.data()}};
    TANDEM_RETURN_IF_ERROR(Products(options, gate_up, x, T));
    for (size_t i = 0; i < g.size(); ++i) g[i] = Silu(g[i]) * u[i];
    TANDEM_RETURN_IF_ERROR(Product(options, *w.down_shexp, H, g.data(), T, d.data()));
    const float* gate_w = F32(w.shexp_gate_inp);
    for (int t = 0; t < T; ++t) {
      const float gate = Sigmoid(Dot(gate_w, x + static_cast<size_t>(t) * H, H));
      float* o = out + static_cast<size_t>(t) * H;
      for (int c = 0; c < H; ++c) o[c] += gate * d[static_cast<size_t>(t) * H + c];
    }
  }
  return absl::OkStatus();
}

absl::Status ReferenceForward::RunHalf(int il, bool moe, SequenceState& state, int n_past, int T,
                                       const ForwardOptions& options, float* x, float* h,
                                       float* tmp) const {
  const model::HParams& hp = hp_;
  const Layer& w = layers_[il];
  const int H = hp.n_embd;
  for (int t = 0; t < T; ++t) {
    RmsNorm(x + static_cast<size_t>(t) * H, F32(moe ? w.post_norm : w.attn_norm), H, hp.rms_eps,
            h + static_cast<size_t>(t) * H);
  }
  if (moe) {
    TANDEM_RETURN_IF_ERROR(Moe(w, il, T, h, options, tmp));
  } else if (hp.IsRecurrentLayer(il)) {
    TANDEM_RETURN_IF_ERROR(DeltaNet(w, state.layers[il], T, options, h, tmp));
  } else {
    TANDEM_RETURN_IF_ERROR(
        Attention(w, state.layers[il], state.f16_kv_cache, n_past, T, options, h, tmp));
  }
  for (size_t i = 0; i < static_cast<size_t>(T) * H; ++i) x[i] += tmp[i];
  return absl::OkStatus();
}

absl::Status ReferenceForward::LayerHalf(int layer, bool moe, SequenceState& state, int n_past,
                                         int T, float* x) const {
  if (layer < 0 || layer >= hp_.n_layer || T < 1 || n_past < 0 || n_past + T > state.n_ctx ||
      static_cast<int>(state.layers.size()) != hp_.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("layer half ", layer, " of ", T,
                                                   " rows at position ", n_past, ": out of range"));
  }
  std::vector<float> h(static_cast<size_t>(T) * hp_.n_embd), tmp(h.size());
  return RunHalf(layer, moe, state, n_past, T, ForwardOptions(), x, h.data(), tmp.data());
}

absl::Status ReferenceForward::Forward(std::span<const int32_t> tokens, SequenceState& state,
                                       const ForwardOptions& options,
                                       std::vector<float>* logits) const {
  const model::HParams& hp = hp_;
  const int T = static_cast<int>(tokens.size());
  if (T == 0) return absl::InvalidArgumentError("forward pass of zero tokens");
  if (state.n_past + T > state.n_ctx) {
    return absl::OutOfRangeError(absl::StrCat("context full: ", state.n_past, " + ", T,
                                              " tokens exceed the context of ", state.n_ctx));
  }
  if (static_cast<int>(state.layers.size()) != hp.n_layer) {
    return absl::InvalidArgumentError("sequence state was made for another model");
  }
  for (int t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= hp.n_vocab) {
      return absl::OutOfRangeError(absl::StrCat("token id ", tokens[t], " at position ", t,
                                                " is outside the vocabulary [0, ", hp.n_vocab, ")"));
    }
  }
  const int H = hp.n_embd;
  std::vector<float> x(static_cast<size_t>(T) * H), h(x.size()), tmp(x.size());
  for (int t = 0; t < T; ++t) DecodeRow(*token_embd_, tokens[t], &x[static_cast<size_t>(t) * H]);

  for (int il = 0; il < hp.n_layer; ++il) {
    TANDEM_RETURN_IF_ERROR(RunHalf(il, false, state, state.n_past, T, options, x.data(), h.data(), tmp.data()));
    TANDEM_RETURN_IF_ERROR(RunHalf(il, true, state, state.n_past, T, options, x.data(), h.data(), tmp.data()));
  }
  state.n_past += T;

  const int first = options.all_logits ? 0 : T - 1;
  const int n_out = T - first;
  for (int t = first; t < T; ++t) {
    RmsNorm(&x[static_cast<size_t>(t) * H], F32(output_norm_), H, hp.rms_eps,
            &h[static_cast<size_t>(t - first) * H]);
  }
  logits->resize(static_cast<size_t>(n_out) * hp.n_vocab);
  return Product(options, *output_, hp.n_vocab, h.data(), n_out, logits->data());
}

}  // namespace tandem::reference
