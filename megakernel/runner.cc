#include "megakernel/runner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "megakernel/codecs.h"
#include "megakernel/cuda_status.h"
#include "megakernel/plan.h"
#include "megakernel/smem.h"
#include "runtime/base/sizes.h"
#include "runtime/base/status_macros.h"

namespace tandem::megakernel {

struct GpuRunner::Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

std::string CudaUnavailableReason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return absl::StrCat("no usable CUDA device (", cudaGetErrorString(e), ")");
  if (count == 0) return "no CUDA device found";
  return "";
}

GpuRunner::~GpuRunner() {
  graphs_.clear();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (step_host_ != nullptr) cudaFreeHost(step_host_);
  for (void* p : allocations_) cudaFree(p);
}

uint8_t* GpuRunner::AllocBytes(uint64_t bytes, uint64_t* counter) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes + kAllocationSlack) != cudaSuccess) return nullptr;
  allocations_.push_back(p);
  *counter += bytes + kAllocationSlack;
  return static_cast<uint8_t*>(p);
}

float* GpuRunner::AllocF32(uint64_t count, uint64_t* counter) {
  return reinterpret_cast<float*>(AllocBytes(count * 4, counter));
}

absl::StatusOr<std::unique_ptr<GpuRunner>> GpuRunner::Create(const model::Model& model,
                                                             const RunnerOptions& options) {
  if (const std::string why = CudaUnavailableReason(); !why.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("--backend cuda: ", why));
  }
  if (!model.materialized()) {
    return absl::FailedPreconditionError(absl::StrCat(model.source(), ": tensor data not loaded"));
  }
  auto runner = std::unique_ptr<GpuRunner>(new GpuRunner());
  runner->options_ = options;
  runner->hp_ = model.hparams();
  TANDEM_ASSIGN_OR_RETURN(runner->dims_, DimsForModel(model, options.n_ctx));
  TANDEM_RETURN_IF_ERROR(CheckTensors(model));
  // The budget covers weights, caches and states (checked again with scratch once allocated).
  const VramPlan plan = PlanVram(model, runner->dims_, options.n_ctx, options.f16_kv_cache);
  TANDEM_RETURN_IF_ERROR(CheckBudget(plan, options.vram_budget, model.source(), options.n_ctx));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&runner->stream_, cudaStreamNonBlocking));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMallocHost(&runner->step_host_, sizeof(StepInput)));
  TANDEM_RETURN_IF_ERROR(runner->Upload(model, plan.weights));
  TANDEM_RETURN_IF_ERROR(runner->AllocateState());
  return runner;
}

absl::Status GpuRunner::Upload(const model::Model& model, uint64_t weight_bytes) {
  const model::HParams& hp = hp_;
  // Every tensor the forward pass reads (CheckTensors has accepted their types).
  std::vector<const format::TensorInfo*> used;
  for (const format::TensorInfo& t : model.tensors()) {
    if (UsedByForward(t, hp)) used.push_back(&t);
  }
  std::map<std::string, const uint8_t*> dev;
  uint64_t done = 0;
  std::vector<uint8_t> staging;  // rows in the device layout where it differs from the file's
  for (const format::TensorInfo* t : used) {
    const uint64_t bytes = DeviceBytes(*t);
    uint8_t* p = AllocBytes(bytes, &vram_.weights);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("out of device memory uploading ", t->name,
                                                       " (", FormatBytes(bytes), ") after ",
                                                       FormatBytes(vram_.weights), " of weights"));
    }
    if (DeviceLayoutIsFiles(static_cast<int>(t->type))) {
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(p, t->data, bytes, cudaMemcpyHostToDevice));
    } else {
      // Converted in pieces of at most kStagingBytes, so a large expert bank needs no copy of
      // its own size in host memory.
      constexpr uint64_t kStagingBytes = uint64_t{64} << 20;
      const int type = static_cast<int>(t->type);
      const int64_t cols = t->dims[0], rows = t->rows();
      const int64_t file_row = t->row_bytes(), dev_row = DeviceRowBytes(type, cols);
      const int64_t step = std::max<int64_t>(1, static_cast<int64_t>(kStagingBytes) / dev_row);
      staging.resize(static_cast<size_t>(std::min(rows, step) * dev_row));
      for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t n = std::min(step, rows - r0);
        ToDeviceLayout(type, t->data + r0 * file_row, n, cols, staging.data());
        TANDEM_CUDA_RETURN_IF_ERROR(
            cudaMemcpy(p + r0 * dev_row, staging.data(), n * dev_row, cudaMemcpyHostToDevice));
      }
    }
    dev[t->name] = p;
    done += bytes + kAllocationSlack;
    if (options_.progress) options_.progress(done, weight_bytes);
  }
  auto find = [&](const std::string& name) -> const format::TensorInfo* { return model.Find(name); };
  auto matrix = [&](const std::string& name) {
    Matrix m;
    const format::TensorInfo* t = find(name);
    if (t == nullptr) return m;
    m.data = dev[name];
    m.type = static_cast<int32_t>(t->type);
    m.cols = static_cast<int32_t>(t->dims[0]);
    m.rows = static_cast<int32_t>(t->rows());
    m.row_bytes = DeviceRowBytes(m.type, m.cols);
    return m;
  };
  auto bank = [&](const std::string& name) {
    ExpertBank b;
    const format::TensorInfo* t = find(name);
    b.data = dev[name];
    b.type = static_cast<int32_t>(t->type);
    b.cols = static_cast<int32_t>(t->dims[0]);
    b.rows = static_cast<int32_t>(t->dims[1]);
    b.row_bytes = DeviceRowBytes(b.type, b.cols);
    b.expert_bytes = b.row_bytes * b.rows;
    return b;
  };
  auto vec = [&](const std::string& name) -> const float* {
    auto it = dev.find(name);
    return it == dev.end() ? nullptr : reinterpret_cast<const float*>(it->second);
  };
  std::string missing;
  for (const char* name : {"token_embd.weight", "output_norm.weight", "output.weight"}) {
    if (find(name) == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
  }
  mixer_.resize(hp.n_layer);
  moe_.resize(hp.n_layer);
  for (int il = 0; il < hp.n_layer; ++il) {
    const std::string p = absl::StrCat("blk.", il, ".");
    auto require = [&](const std::string& n) {
      if (find(p + n) == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", p + n);
    };
    MixerArgs& mx = mixer_[il];
    mx.layer = il;
    mx.recurrent = hp.IsRecurrentLayer(il) ? 1 : 0;
    mx.force_teams = options_.force_attention_teams ? 1 : 0;
    require("attn_norm.weight");
    mx.norm = vec(p + "attn_norm.weight");
    if (mx.recurrent) {
      for (const char* n : {"attn_qkv.weight", "attn_gate.weight", "ssm_conv1d.weight", "ssm_dt.bias",
                            "ssm_a", "ssm_norm.weight", "ssm_out.weight"}) {
        require(n);
      }
      require(dims_.ssm_grouped_ba ? "ssm_ba.weight" : "ssm_beta.weight");
      if (!dims_.ssm_grouped_ba) require("ssm_alpha.weight");
      mx.dn.qkv = matrix(p + "attn_qkv.weight");
      mx.dn.z = matrix(p + "attn_gate.weight");
      mx.dn.ba = matrix(p + "ssm_ba.weight");
      mx.dn.beta = matrix(p + "ssm_beta.weight");
      mx.dn.alpha = matrix(p + "ssm_alpha.weight");
      mx.dn.out = matrix(p + "ssm_out.weight");
      mx.dn.conv = vec(p + "ssm_conv1d.weight");
      mx.dn.dt_bias = vec(p + "ssm_dt.bias");
      mx.dn.a = vec(p + "ssm_a");
      mx.dn.norm = vec(p + "ssm_norm.weight");
    } else {
      for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                            "attn_q_norm.weight", "attn_k_norm.weight"}) {
        require(n);
      }
      mx.att.wq = matrix(p + "attn_q.weight");
      mx.att.wk = matrix(p + "attn_k.weight");
      mx.att.wv = matrix(p + "attn_v.weight");
      mx.att.wo = matrix(p + "attn_output.weight");
      mx.att.q_norm = vec(p + "attn_q_norm.weight");
      mx.att.k_norm = vec(p + "attn_k_norm.weight");
    }
    MoeArgs& me = moe_[il];
    me.layer = il;
    const std::string post = hp.is_hybrid() ? "post_attention_norm.weight" : "ffn_norm.weight";
    for (const std::string& n : {post, std::string("ffn_gate_inp.weight"), std::string("ffn_gate_exps.weight"),
                                 std::string("ffn_up_exps.weight"), std::string("ffn_down_exps.weight")}) {
      require(n);
    }
    if (!missing.empty()) continue;
    me.norm = vec(p + post);
    me.router = matrix(p + "ffn_gate_inp.weight");
    me.gate = bank(p + "ffn_gate_exps.weight");
    me.up = bank(p + "ffn_up_exps.weight");
    me.down = bank(p + "ffn_down_exps.weight");
    me.has_shexp = hp.n_ff_shexp > 0 ? 1 : 0;
    if (me.has_shexp) {
      for (const char* n : {"ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight",
                            "ffn_up_shexp.weight", "ffn_down_shexp.weight"}) {
        require(n);
      }
      me.sh_gate = matrix(p + "ffn_gate_shexp.weight");
      me.sh_up = matrix(p + "ffn_up_shexp.weight");
      me.sh_down = matrix(p + "ffn_down_shexp.weight");
      me.sh_gate_inp = matrix(p + "ffn_gate_inp_shexp.weight");  // 1 x n_embd, f32
    }
    me.residency = nullptr;  // every expert resident: slot == expert id
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(model.source(), ": missing tensors for the CUDA backend: ", missing));
  }
  head_.norm = vec("output_norm.weight");
  head_.output = matrix("output.weight");
  head_.embed = matrix("token_embd.weight");
  return absl::OkStatus();
}

absl::Status GpuRunner::AllocateState() {
  const ModelDims& d = dims_;
  const model::HParams& hp = hp_;
  const int B = kMaxRows, k = d.n_expert_used;
  auto oom = [&](const char* what) {
    return absl::ResourceExhaustedError(absl::StrCat("out of device memory allocating ", what,
                                                     " (", FormatBytes(vram_.total()), " allocated)"));
  };
  // Rope frequencies and scratch.
  std::vector<float> inv_freq(std::max(1, d.n_rot / 2));
  for (int i = 0; i < d.n_rot / 2; ++i) {
    inv_freq[i] = 1.0f / std::pow(hp.rope_theta, static_cast<float>(2 * i) / d.n_rot);
  }
  float* freq = AllocF32(inv_freq.size(), &vram_.scratch);
  if (freq == nullptr) return oom("rope frequencies");
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(freq, inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice));
  dims_.rope_inv_freq = freq;

  Scratch& s = scratch_;
  const int conv_dim = hp.is_hybrid() ? d.ssm_conv_dim() : 0;
  const int d_inner = hp.is_hybrid() ? d.ssm_d_inner() : 0;

  // Launch shapes per rows variant (the largest shared-memory need of any phase), first: the
  // attention partials below are sized by the mixer grids. Variants whose kernels do not fit this
  // GPU's shared memory (FitRows) are left out: steps then take at most max_rows_ rows, and
  // Forward splits prompts accordingly.
  HalfSmem limits[kNumRowsVariants];
  for (int v = 0; v < kNumRowsVariants; ++v) {
    const int R = kRowsVariants[v];
    TANDEM_CUDA_RETURN_IF_ERROR(MaxDynamicSmem(Half::kMixer, R, &limits[v].mixer));
    TANDEM_CUDA_RETURN_IF_ERROR(MaxDynamicSmem(Half::kMoe, R, &limits[v].moe));
    TANDEM_CUDA_RETURN_IF_ERROR(MaxDynamicSmem(Half::kHead, R, &limits[v].head));
  }
  const RowsFit fit = FitRows(d, hp.is_hybrid(), [&](int v) { return limits[v]; });
  if (fit.max_rows == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--backend cuda: ", fit.why, " (compute capability 8.0 and newer allow 99 KiB or more)"));
  }
  std::string why_fewer = fit.why;  // why steps take fewer than kMaxRows rows, if they do
  for (int v = 0; v < kNumRowsVariants && kRowsVariants[v] <= fit.max_rows; ++v) {
    const int R = kRowsVariants[v];
    const HalfSmem need = SmemForRows(d, hp.is_hybrid(), R);
    const int cap = std::max(1, options_.max_blocks_per_sm);
    TANDEM_CUDA_RETURN_IF_ERROR(PrepareHalf(Half::kMixer, R, need.mixer, cap, &mixer_shape_[v]));
    TANDEM_CUDA_RETURN_IF_ERROR(PrepareHalf(Half::kMoe, R, need.moe, cap, &moe_shape_[v]));
    TANDEM_CUDA_RETURN_IF_ERROR(PrepareHalf(Half::kHead, R, need.head, cap, &head_shape_[v]));
    // DeltaNetConvRule runs a value head on each block, all at once.
    if (hp.is_hybrid() && mixer_shape_[v].grid < d.ssm_n_v) {
      const std::string few_blocks =
          absl::StrCat("the DeltaNet layers need a block for each of their ", d.ssm_n_v,
                       " value heads, and the mixer kernel for ", R, " rows fits ",
                       mixer_shape_[v].grid, " blocks on this GPU");
      if (R == 1) {
        return absl::FailedPreconditionError(absl::StrCat("--backend cuda: ", few_blocks));
      }
      why_fewer = few_blocks;
      break;
    }
    max_rows_ = R;
  }
  if (max_rows_ < kMaxRows) {
    rows_limit_ = absl::StrCat("steps take at most ", max_rows_, " rows on this GPU: ", why_fewer);
  }

  s.proj_stride = std::max(d.q_rows() + 2 * d.kv_dim(), conv_dim + d_inner + 2 * d.ssm_n_v);
  s.mix_stride = d.n_head * d.head_dim;
  // The head's argmax keeps a (value, index) per block and row: every mode launches the head on
  // its prepared grid.
  int head_grid = 0;
  for (const LaunchShape& shape : head_shape_) head_grid = std::max(head_grid, shape.grid);
  // A step's chunk partials a query head (params.h): at most kMaxQueryRowsPerWarp x the largest
  // mixer grid's warps over the (KV group, team) pairs, and at most a chunk per
  // kMinAttentionChunk keys of each row.
  int mixer_grid = 0;
  for (const LaunchShape& shape : mixer_shape_) mixer_grid = std::max(mixer_grid, shape.grid);
  const uint64_t partials_per_head = std::min<uint64_t>(
      uint64_t{B} * ((d.n_ctx + kMinAttentionChunk - 1) / kMinAttentionChunk),
      std::max<uint64_t>(B, uint64_t{kMaxQueryRowsPerWarp} * mixer_grid * kWarpsPerBlock /
                                (d.n_head_kv * TeamsPerKvGroup(d))));
  struct {
    float** ptr;
    uint64_t count;
    const char* what;
  } f32s[] = {
      {&s.x, uint64_t{B} * d.n_embd, "x"},
      {&s.proj, uint64_t{B} * s.proj_stride, "projections"},
      {&s.mix, uint64_t{B} * s.mix_stride, "attention output"},
      {&s.mix2, uint64_t{B} * std::max(1, d_inner), "DeltaNet output"},
      {&s.attn_part, partials_per_head * d.n_head * (kAttnPartHeader + d.head_dim),
       "attention partials"},
      {&s.router, uint64_t{B} * d.n_expert, "router logits"},
      {&s.sh_act, uint64_t{B} * std::max(1, d.n_ff_shexp), "shared expert"},
      {&s.sh_gate, uint64_t{B}, "shared gate"},
      {&s.sh_out, uint64_t{B} * d.n_embd, "shared expert output"},
      {&s.exp_act, uint64_t{B} * k * d.n_ff_exp, "expert activations"},
      {&s.exp_out, uint64_t{B} * k * d.n_embd, "expert outputs"},
      {&s.route_weights, uint64_t{B} * d.n_layer * k, "routes"},
      {&s.logits, uint64_t{B} * d.n_vocab, "logits"},
      {&s.best, static_cast<uint64_t>(head_grid) * kMaxRows * 2, "argmax"},
  };
  for (auto& f : f32s) {
    *f.ptr = AllocF32(f.count, &vram_.scratch);
    if (*f.ptr == nullptr) return oom(f.what);
  }
  // Per-op mode's activation sets (device/ops.cuh): [0] the normed input rows of a half or the
  // head, [1] the input of an output or down projection.
  const int64_t op_act_bytes[2] = {
      ActSetBytes(B, d.n_embd, true),
      std::max({ActSetBytes(B, d.n_head * d.head_dim, false),
                hp.is_hybrid() ? ActSetBytes(B, d_inner, true) : int64_t{0},
                ActSetBytes(B, d.n_ff_shexp, false), ActSetBytes(B * k, d.n_ff_exp, false)})};
  for (int i = 0; i < 2; ++i) {
    s.op_act[i] = AllocBytes(static_cast<uint64_t>(op_act_bytes[i]), &vram_.scratch);
    if (s.op_act[i] == nullptr) return oom("per-op activations");
  }
  s.routes = reinterpret_cast<int32_t*>(AllocBytes(sizeof(RouteTable), &vram_.scratch));
  s.route_ids = reinterpret_cast<int32_t*>(AllocBytes(uint64_t{B} * d.n_layer * k * 4, &vram_.scratch));
  s.argmax = reinterpret_cast<int32_t*>(AllocBytes(uint64_t{B} * 4, &vram_.scratch));
  step_dev_ = reinterpret_cast<StepInput*>(AllocBytes(sizeof(StepInput), &vram_.scratch));
  const uint64_t flag_bytes = uint64_t{4} * kFlagStride * d.n_layer * d.step_flags_per_layer();
  s.head_ready = reinterpret_cast<uint32_t*>(AllocBytes(flag_bytes, &vram_.scratch));
  const uint64_t chunk_count_bytes = uint64_t{4} * kFlagStride * kMaxRows * d.n_head;
  s.chunks_done = reinterpret_cast<uint32_t*>(AllocBytes(chunk_count_bytes, &vram_.scratch));
  if (s.routes == nullptr || s.route_ids == nullptr || s.argmax == nullptr ||
      step_dev_ == nullptr || s.head_ready == nullptr || s.chunks_done == nullptr) {
    return oom("route tables");
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemset(s.head_ready, 0, flag_bytes));  // no step is numbered 0
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemset(s.chunks_done, 0, chunk_count_bytes));

  // Per-layer state.
  for (int il = 0; il < d.n_layer; ++il) {
    MixerArgs& mx = mixer_[il];
    if (mx.recurrent) {
      conv_state_floats_ = uint64_t{static_cast<uint32_t>(conv_dim)} * (d.ssm_conv_kernel - 1);
      ssm_state_floats_ = uint64_t{static_cast<uint32_t>(d.ssm_n_v)} * d.ssm_dk * d.ssm_dv;
      mx.dn.conv_state = AllocF32(conv_state_floats_, &vram_.deltanet_state);
      mx.dn.ssm_state = AllocF32(ssm_state_floats_, &vram_.deltanet_state);
      mx.dn.conv_snap = AllocF32(conv_state_floats_ * (kMaxRows - 1), &vram_.deltanet_state);
      mx.dn.ssm_snap = AllocF32(ssm_state_floats_ * (kMaxRows - 1), &vram_.deltanet_state);
      if (mx.dn.conv_state == nullptr || mx.dn.ssm_state == nullptr || mx.dn.conv_snap == nullptr ||
          mx.dn.ssm_snap == nullptr) {
        return oom("DeltaNet state");
      }
    } else {
      const uint64_t cache_bytes = KvCacheBytes(d, d.n_ctx, options_.f16_kv_cache);
      mx.att.f16_cache = options_.f16_kv_cache ? 1 : 0;
      mx.att.k_cache = AllocBytes(cache_bytes, &vram_.kv_cache);
      mx.att.v_cache = AllocBytes(cache_bytes, &vram_.kv_cache);
      if (mx.att.k_cache == nullptr || mx.att.v_cache == nullptr) return oom("KV cache");
    }
  }
  if (options_.vram_budget > 0 && vram_.total() > options_.vram_budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the CUDA backend needs ", FormatBytes(vram_.total()), " on the card (weights ",
        FormatBytes(vram_.weights), ", KV cache ", FormatBytes(vram_.kv_cache), ", DeltaNet state ",
        FormatBytes(vram_.deltanet_state), ", scratch ", FormatBytes(vram_.scratch),
        "), over the VRAM budget of ", FormatBytes(options_.vram_budget)));
  }
  for (int il = 0; il < d.n_layer; ++il) {
    mixer_[il].dims = dims_;
    mixer_[il].s = scratch_;
    mixer_[il].in = step_dev_;
    moe_[il].dims = dims_;
    moe_[il].s = scratch_;
    moe_[il].in = step_dev_;
  }
  head_.dims = dims_;
  head_.s = scratch_;
  head_.in = step_dev_;

  return Reset();
}

absl::Status GpuRunner::Reset() {
  for (const MixerArgs& mx : mixer_) {
    if (!mx.recurrent) continue;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(mx.dn.conv_state, 0, conv_state_floats_ * 4, stream_));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(mx.dn.ssm_state, 0, ssm_state_floats_ * 4, stream_));
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

void GpuRunner::set_mode(KernelMode mode) {
  options_.mode = mode;
  graphs_.clear();
}

size_t GpuRunner::TimelineStamps() const { return size_t{kTimelineSlots} * 2 * dims_.n_layer; }

absl::Status GpuRunner::set_timeline(bool on) {
  const size_t bytes = sizeof(uint64_t) * TimelineStamps();
  if (on && timeline_ == nullptr) {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMalloc(&timeline_, bytes));
    allocations_.push_back(timeline_);
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemset(timeline_, 0, bytes));
  }
  uint64_t* target = on ? timeline_ : nullptr;
  scratch_.timeline = target;
  for (MixerArgs& a : mixer_) a.s.timeline = target;
  for (MoeArgs& a : moe_) a.s.timeline = target;
  head_.s.timeline = target;
  graphs_.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> GpuRunner::ReadTimeline() const {
  if (timeline_ == nullptr) return absl::FailedPreconditionError("the phase timeline is off");
  std::vector<uint64_t> stamps(TimelineStamps());
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(stamps.data(), timeline_, stamps.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  return stamps;
}

void GpuRunner::set_graphs(bool on) {
  options_.graphs = on;
  graphs_.clear();
}

int GpuRunner::LaunchesPerStep(bool with_head) const {
  // Launches of one layer half (or the head) with `phases` phases and `per_op` operations.
  auto launches = [this](int phases, int per_op) {
    switch (options_.mode) {
      case KernelMode::kMegakernel:
        return 1;
      case KernelMode::kPerPhase:
        return phases;
      case KernelMode::kPerOp:
        return per_op;
    }
    return 0;
  };
  int n = 1;  // embedding
  for (size_t il = 0; il < mixer_.size(); ++il) {
    n += launches(PhaseCount(Half::kMixer, mixer_[il].recurrent != 0), PerOpLaunches(mixer_[il]));
    n += launches(PhaseCount(Half::kMoe, false), PerOpLaunches(moe_[il]));
  }
  if (with_head) n += launches(PhaseCount(Half::kHead, false), PerOpLaunches(head_));
  return n;
}

int GpuRunner::BarriersPerStep(bool with_head) const {
  if (options_.mode != KernelMode::kMegakernel) return 0;
  int n = 0;
  for (const MixerArgs& mx : mixer_) {
    n += PhaseCount(Half::kMixer, mx.recurrent != 0) - 1 + PhaseCount(Half::kMoe, false) - 1;
  }
  if (with_head) n += PhaseCount(Half::kHead, false) - 1;
  return n;
}

absl::Status GpuRunner::EnqueueStep(int n_rows, bool with_head) {
  const int v = RowsVariantIndex(n_rows), R = kRowsVariants[v];
  TANDEM_CUDA_RETURN_IF_ERROR(LaunchEmbed(head_, stream_));
  for (int il = 0; il < dims_.n_layer; ++il) {
    TANDEM_CUDA_RETURN_IF_ERROR(LaunchMixer(mixer_[il], R, options_.mode, mixer_shape_[v], stream_));
    TANDEM_CUDA_RETURN_IF_ERROR(LaunchMoe(moe_[il], R, options_.mode, moe_shape_[v], stream_));
  }
  if (with_head) {
    TANDEM_CUDA_RETURN_IF_ERROR(LaunchHead(head_, R, options_.mode, head_shape_[v], stream_));
  }
  return absl::OkStatus();
}

absl::Status GpuRunner::Step(int n_rows, bool with_head) {
  step_host_->seq = ++step_seq_;
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(step_dev_, step_host_, sizeof(StepInput), cudaMemcpyHostToDevice, stream_));
  if (!options_.graphs) return EnqueueStep(n_rows, with_head);
  const auto key = std::make_pair(RowsVariant(n_rows), with_head);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    auto g = std::make_unique<Graph>();
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    const absl::Status enqueued = EnqueueStep(n_rows, with_head);
    const cudaError_t ended = cudaStreamEndCapture(stream_, &g->graph);
    TANDEM_RETURN_IF_ERROR(enqueued);
    TANDEM_CUDA_RETURN_IF_ERROR(ended);
    TANDEM_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&g->exec, g->graph, 0));
    it = graphs_.emplace(key, std::move(g)).first;
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second->exec, stream_));
  return absl::OkStatus();
}

absl::Status GpuRunner::Forward(std::span<const int32_t> tokens, int first_pos, bool all_logits,
                                std::vector<float>* logits, std::vector<int32_t>* argmax,
                                std::vector<int32_t>* route_ids, std::vector<float>* route_weights) {
  const int T = static_cast<int>(tokens.size());
  if (T == 0) return absl::InvalidArgumentError("forward pass of zero tokens");
  if (first_pos < 0 || first_pos + T > dims_.n_ctx) {
    return absl::OutOfRangeError(absl::StrCat("context full: ", first_pos, " + ", T,
                                              " tokens exceed the context of ", dims_.n_ctx));
  }
  for (int t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= dims_.n_vocab) {
      return absl::OutOfRangeError(absl::StrCat("token id ", tokens[t], " at position ", t,
                                                " is outside the vocabulary [0, ", dims_.n_vocab, ")"));
    }
  }
  const bool want_head = logits != nullptr || argmax != nullptr;
  if (logits != nullptr) logits->clear();
  if (argmax != nullptr) argmax->clear();
  if (route_ids != nullptr) route_ids->clear();
  if (route_weights != nullptr) route_weights->clear();
  const int k = dims_.n_expert_used, L = dims_.n_layer, V = dims_.n_vocab;
  for (int t0 = 0; t0 < T; t0 += max_rows_) {
    const int n = std::min(max_rows_, T - t0);
    const bool last = t0 + n == T;
    StepInput& in = *step_host_;
    in.n_rows = n;
    in.first_pos = first_pos + t0;
    for (int r = 0; r < n; ++r) in.tokens[r] = tokens[t0 + r];
    const bool head = want_head && (all_logits || last);
    in.logits_row0 = all_logits ? 0 : n - 1;
    in.n_logit_rows = head ? (all_logits ? n : 1) : 0;
    TANDEM_RETURN_IF_ERROR(Step(n, head));
    if (head && logits != nullptr) {
      const size_t at = logits->size();
      logits->resize(at + static_cast<size_t>(in.n_logit_rows) * V);
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits->data() + at, scratch_.logits,
                                                  static_cast<size_t>(in.n_logit_rows) * V * 4,
                                                  cudaMemcpyDeviceToHost, stream_));
    }
    if (head && argmax != nullptr) {
      const size_t at = argmax->size();
      argmax->resize(at + in.n_logit_rows);
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(argmax->data() + at, scratch_.argmax,
                                                  static_cast<size_t>(in.n_logit_rows) * 4,
                                                  cudaMemcpyDeviceToHost, stream_));
    }
    if (route_ids != nullptr) {
      const size_t at = route_ids->size();
      route_ids->resize(at + static_cast<size_t>(n) * L * k);
      route_weights->resize(route_ids->size());
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(route_ids->data() + at, scratch_.route_ids,
                                                  static_cast<size_t>(n) * L * k * 4,
                                                  cudaMemcpyDeviceToHost, stream_));
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(route_weights->data() + at, scratch_.route_weights,
                                                  static_cast<size_t>(n) * L * k * 4,
                                                  cudaMemcpyDeviceToHost, stream_));
    }
    // The pinned step input is rewritten by the next chunk, so each chunk completes first.
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  }
  return absl::OkStatus();
}

absl::Status GpuRunner::RunLayerHalf(int layer, bool moe, std::span<const float> x, int n_rows,
                                     int first_pos, std::vector<float>* out) {
  const size_t H = static_cast<size_t>(dims_.n_embd);
  if (layer < 0 || layer >= dims_.n_layer || n_rows < 1 || n_rows > max_rows_ ||
      x.size() != n_rows * H || first_pos < 0 || first_pos + n_rows > dims_.n_ctx) {
    return absl::InvalidArgumentError(absl::StrCat("layer half ", layer, " of ", n_rows,
                                                   " rows at position ", first_pos,
                                                   ": out of range", RowsLimitNote()));
  }
  StepInput& in = *step_host_;
  in = StepInput();
  in.n_rows = n_rows;
  in.first_pos = first_pos;
  in.seq = ++step_seq_;
  const int v = RowsVariantIndex(n_rows), R = kRowsVariants[v];
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(step_dev_, step_host_, sizeof(StepInput), cudaMemcpyHostToDevice, stream_));
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(scratch_.x, x.data(), x.size() * 4, cudaMemcpyHostToDevice, stream_));
  if (moe) {
    TANDEM_CUDA_RETURN_IF_ERROR(LaunchMoe(moe_[layer], R, options_.mode, moe_shape_[v], stream_));
  } else {
    TANDEM_CUDA_RETURN_IF_ERROR(LaunchMixer(mixer_[layer], R, options_.mode, mixer_shape_[v], stream_));
  }
  out->resize(x.size());
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(out->data(), scratch_.x, x.size() * 4, cudaMemcpyDeviceToHost, stream_));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

std::string GpuRunner::RowsLimitNote() const {
  return rows_limit_.empty() ? "" : absl::StrCat(" (", rows_limit_, ")");
}

absl::Status GpuRunner::Rollback(int n_rows_in_step, int n_keep) {
  if (n_rows_in_step < 2 || n_rows_in_step > max_rows_ || n_keep < 1 || n_keep >= n_rows_in_step) {
    return absl::InvalidArgumentError(absl::StrCat("rollback to ", n_keep, " of ", n_rows_in_step,
                                                   " rows: need 1 <= keep < rows <= ", max_rows_,
                                                   RowsLimitNote()));
  }
  for (const MixerArgs& mx : mixer_) {
    if (!mx.recurrent) continue;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        mx.dn.conv_state, mx.dn.conv_snap + (n_keep - 1) * conv_state_floats_,
        conv_state_floats_ * 4, cudaMemcpyDeviceToDevice, stream_));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        mx.dn.ssm_state, mx.dn.ssm_snap + (n_keep - 1) * ssm_state_floats_,
        ssm_state_floats_ * 4, cudaMemcpyDeviceToDevice, stream_));
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> GpuRunner::ReadSsmState(int layer) const {
  if (layer < 0 || layer >= dims_.n_layer) return absl::OutOfRangeError("no such layer");
  const MixerArgs& mx = mixer_[layer];
  if (!mx.recurrent) return std::vector<float>();
  std::vector<float> out(ssm_state_floats_ + conv_state_floats_);
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), mx.dn.ssm_state, ssm_state_floats_ * 4, cudaMemcpyDeviceToHost));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data() + ssm_state_floats_, mx.dn.conv_state,
                                         conv_state_floats_ * 4, cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace tandem::megakernel
