#include "megakernel/plan.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "megakernel/codecs.h"
#include "megakernel/small_div.h"
#include "megakernel/smem.h"
#include "runtime/base/sizes.h"
#include "runtime/base/status_macros.h"

namespace tandem::megakernel {

absl::StatusOr<ModelDims> DimsForModel(const model::Model& model, int n_ctx) {
  const model::HParams& hp = model.hparams();
  ModelDims d;
  d.n_layer = hp.n_layer;
  d.n_embd = hp.n_embd;
  d.n_vocab = hp.n_vocab;
  d.n_ctx = n_ctx;
  d.rms_eps = hp.rms_eps;
  d.n_head = hp.n_head;
  d.n_head_kv = hp.n_head_kv;
  d.head_dim = hp.head_dim;
  d.n_rot = hp.n_rot;
  d.gated_attention = hp.is_hybrid() ? 1 : 0;
  d.n_expert = hp.n_expert;
  d.n_expert_used = hp.n_expert_used;
  d.n_ff_exp = hp.n_ff_exp;
  d.n_ff_shexp = hp.n_ff_shexp;
  d.norm_topk_prob = hp.norm_topk_prob ? 1 : 0;
  d.expert_weights_scale = hp.expert_weights_scale;
  if (hp.is_hybrid()) {
    d.ssm_n_k = hp.ssm_n_group;
    d.ssm_n_v = hp.ssm_dt_rank;
    d.ssm_dk = hp.ssm_d_state;
    d.ssm_dv = hp.head_v_dim();
    d.ssm_conv_kernel = hp.ssm_conv_kernel;
    d.ssm_tiled_heads = hp.arch == model::Arch::kQwen35Moe ? 1 : 0;
    d.ssm_grouped_ba = model.Find("blk.0.ssm_ba.weight") != nullptr ? 1 : 0;
  }
  std::string bad;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) absl::StrAppend(&bad, bad.empty() ? "" : "; ", what);
  };
  need(d.head_dim % 32 == 0 && d.head_dim <= 256,
       absl::StrCat("head_dim ", d.head_dim, " (need a multiple of 32, at most 256)"));
  need(d.n_rot % 2 == 0 && d.n_rot <= d.head_dim, absl::StrCat("rotary dims ", d.n_rot));
  // The MoE combine divides a step's row elements by SmallDivisor (small_div.h).
  need(d.n_embd % 32 == 0 && d.n_embd < kSmallDividendLimit / kMaxRows,
       absl::StrCat("hidden size ", d.n_embd, " (need a multiple of 32, below ",
                    kSmallDividendLimit / kMaxRows, ")"));
  need(d.n_expert <= kMaxExperts, absl::StrCat(d.n_expert, " experts (at most ", kMaxExperts, ")"));
  need(d.n_expert_used <= kMaxExpertsUsed,
       absl::StrCat(d.n_expert_used, " experts per token (at most ", kMaxExpertsUsed, ")"));
  need(n_ctx >= 1 && n_ctx <= kMaxContext,
       absl::StrCat("context ", n_ctx, " (need 1 to ", kMaxContext, " tokens)"));
  if (hp.is_hybrid()) {
    need(d.ssm_conv_kernel >= 2 && d.ssm_conv_kernel <= 8,
         absl::StrCat("conv kernel ", d.ssm_conv_kernel, " (need 2..8)"));
    need(d.ssm_dv % 32 == 0,
         absl::StrCat("DeltaNet value head dim ", d.ssm_dv, " (need a multiple of 32)"));
    // The delta rule splits a state column over dk / 32 lanes of a warp (DeltaNetRule).
    const bool dk_ok = d.ssm_dk >= 32 && d.ssm_dk <= 512 && (d.ssm_dk & (d.ssm_dk - 1)) == 0;
    need(dk_ok,
         absl::StrCat("DeltaNet key head dim ", d.ssm_dk, " (need 32, 64, 128, 256 or 512)"));
  }
  if (!bad.empty()) {
    return absl::UnimplementedError(
        absl::StrCat(model.source(), ": the CUDA kernels do not support ", bad));
  }
  auto divisor = [](int v) { return MakeSmallDivisor(v >= 1 ? v : 1); };
  DimDivisors& dd = d.divisors;
  dd.n_head = divisor(d.n_head);
  dd.ssm_n_k = divisor(d.ssm_n_k);
  dd.ssm_n_v = divisor(d.ssm_n_v);
  dd.ssm_v_per_k = divisor(d.ssm_n_k >= 1 ? d.ssm_n_v / d.ssm_n_k : 1);
  dd.conv_taps = divisor(d.ssm_conv_kernel - 1);
  dd.n_embd = divisor(d.n_embd);
  dd.n_expert_used = divisor(d.n_expert_used);
  return d;
}

bool UsedByForward(const format::TensorInfo& t, const model::HParams& hp) {
  return !t.name.starts_with("blk.") || std::atoi(t.name.c_str() + 4) < hp.n_layer;
}

absl::Status CheckTensors(const model::Model& model) {
  for (const format::TensorInfo& t : model.tensors()) {
    if (!UsedByForward(t, model.hparams())) continue;
    if (t.dims.size() == 1 || t.name.ends_with("ssm_conv1d.weight")) {
      // Read as fp32 vectors (the conv taps too, [K, conv_dim]).
      if (t.type != quant::GgmlType::kF32) {
        return absl::UnimplementedError(absl::StrCat(
            model.source(), ": tensor ", t.name, " is ", quant::GetTypeInfo(t.type).name,
            "; the CUDA backend reads it as f32"));
      }
      continue;
    }
    const int slice = SliceElems(static_cast<int>(t.type));
    if (slice == 0) {
      return absl::UnimplementedError(absl::StrCat(
          model.source(), ": tensor ", t.name, " is ", quant::GetTypeInfo(t.type).name,
          ", which the CUDA kernels do not read (they read ", DeviceCodecNames(),
          "); use --backend cpu, or a model with those types"));
    }
    if (t.dims[0] % slice != 0 || t.dims[0] % 32 != 0) {
      return absl::UnimplementedError(absl::StrCat(
          model.source(), ": tensor ", t.name, ": rows of ", t.dims[0],
          " elements are not a multiple of ", std::max(slice, 32), " (CUDA kernels)"));
    }
  }
  return absl::OkStatus();
}

uint64_t DeviceBytes(const format::TensorInfo& t) {
  if (t.dims.empty()) return 0;
  return static_cast<uint64_t>(DeviceRowBytes(static_cast<int>(t.type), t.dims[0]) * t.rows());
}

uint64_t KvCacheBytes(const ModelDims& dims, int n_ctx, bool f16_kv_cache) {
  return uint64_t{static_cast<uint32_t>(n_ctx)} * dims.kv_dim() * (f16_kv_cache ? 2 : 4);
}

VramPlan PlanVram(const model::Model& model, const ModelDims& dims, int n_ctx, bool f16_kv_cache) {
  const model::HParams& hp = model.hparams();
  VramPlan plan;
  for (const format::TensorInfo& t : model.tensors()) {
    if (UsedByForward(t, hp)) plan.weights += DeviceBytes(t) + kAllocationSlack;
  }
  const uint64_t cache_per_attention =
      2 * (KvCacheBytes(dims, n_ctx, f16_kv_cache) + kAllocationSlack);
  for (int il = 0; il < hp.n_layer; ++il) {
    if (hp.IsRecurrentLayer(il)) {
      // Live state plus kMaxRows - 1 snapshots, conv and delta rule.
      const uint64_t conv = uint64_t{static_cast<uint32_t>(dims.ssm_conv_dim())} *
                            (dims.ssm_conv_kernel - 1) * 4;
      const uint64_t ssm = uint64_t{static_cast<uint32_t>(dims.ssm_n_v)} * dims.ssm_dk *
                           dims.ssm_dv * 4;
      plan.caches += (conv + ssm) * kMaxRows + 4 * kAllocationSlack;
    } else {
      plan.caches += cache_per_attention;
    }
  }
  return plan;
}

HalfSmem SmemForRows(const ModelDims& d, bool hybrid, int R) {
  const int k = d.n_expert_used;
  const int d_inner = hybrid ? d.ssm_d_inner() : 0;
  HalfSmem s;
  s.mixer =
      std::max({ActSetBytes(R, d.n_embd, true), ActSetBytes(R, d.n_head * d.head_dim, false),
                hybrid ? ActSetBytes(R, d_inner, true) : int64_t{0},
                hybrid ? DeltaNetSmemBytes(R, d.ssm_dk, d.ssm_dv, d.ssm_conv_kernel) : int64_t{0},
                kWarpsPerBlock * kAttentionBytesPerWarp});
  s.moe = std::max({ActSetBytes(R, d.n_embd, true),
                    RouteSmemBytes(d.n_expert, R) + ActSetBytes(R, d.n_embd, true) +
                        (d.n_ff_shexp > 0 ? ActSetBytes(R, d.n_ff_shexp, false) : 0),
                    ActSetBytes(R * k, d.n_ff_exp, false)});
  s.head = ActSetBytes(R, d.n_embd, true);
  return s;
}

RowsFit FitRows(const ModelDims& dims, bool hybrid,
                const std::function<HalfSmem(int variant)>& limit) {
  RowsFit fit;
  for (int v = 0; v < kNumRowsVariants; ++v) {
    const int R = kRowsVariants[v];
    const HalfSmem need = SmemForRows(dims, hybrid, R), allowed = limit(v);
    const struct {
      const char* name;
      int64_t need, allowed;
    } halves[] = {{"mixer", need.mixer, allowed.mixer},
                  {"MoE", need.moe, allowed.moe},
                  {"head", need.head, allowed.head}};
    for (const auto& h : halves) {
      if (h.need > h.allowed) {
        fit.why = absl::StrCat("the ", h.name, " kernel for ", R, "-row steps needs ",
                               (h.need + 1023) / 1024,
                               " KiB of shared memory a block for this model; this GPU allows ",
                               h.allowed / 1024, " KiB");
        return fit;
      }
    }
    fit.max_rows = R;
  }
  return fit;
}

absl::Status CheckBudget(const VramPlan& plan, uint64_t budget, const std::string& source,
                         int n_ctx) {
  if (budget == 0 || plan.total() <= budget) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(source, ": the CUDA backend keeps every weight on the card and needs ",
                   FormatBytes(plan.total()), " (weights ", FormatBytes(plan.weights),
                   ", caches and states ", FormatBytes(plan.caches), " at context ", n_ctx,
                   ") plus scratch, over the VRAM budget of ", FormatBytes(budget),
                   "; raise --vram-budget, lower --ctx, use --cache-type f16, or use --backend cpu "
                   "(experts in host RAM on the GPU path are not built yet)"));
}

}  // namespace tandem::megakernel
