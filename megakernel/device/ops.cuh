// Per-op mode's operations (megakernel/ops.h): each one the body of one ordinary launch, built
// from the same device functions as the megakernel's phases. Operations marked "one block" in
// ops.h run on a grid of one block; the others on the megakernel's grid, so that the row splits
// (SplitRows, SplitAttention) and hence the sums are the same in both modes. C++17, device only.
#pragma once

#include "megakernel/device/head.cuh"
#include "megakernel/device/mixer.cuh"
#include "megakernel/device/moe.cuh"
#include "megakernel/ops.h"

namespace tandem::megakernel {

// Activation set i of per-op mode: n rows of `cols`, laid out as CarveActs lays out shared
// memory, in Scratch::op_act[i]. Every operation that names the same (i, n, cols) finds the same
// arrays; *x (when asked) gets the fp32 rows, which only the operations that write them need.
__device__ __forceinline__ ActSet OpActs(const Scratch& s, int i, int n, int cols, bool fp32,
                                         float** x = nullptr) {
  uint8_t* cursor = s.op_act[i];
  float* unused;
  return CarveActs(cursor, n, cols, fp32, x != nullptr ? x : &unused);
}

// The normed input rows of a half or of the head: op_act[0] with its fp32 copy.
__device__ __forceinline__ ActSet InputActs(const Scratch& s, int n, int cols) {
  return OpActs(s, 0, n, cols, true);
}

// The first operation of each half and of the head, on one block: RMSNorm(rows of src) * w into
// InputActs' fp32 rows. Per-op prologues load one row (warp step) at a time, as the one-row
// megakernels do; batching changes no sum, only when loads go out.
__device__ __forceinline__ void NormOp(const Scratch& s, const float* src, int n, int cols,
                                       const float* w, float eps) {
  float* xs;
  OpActs(s, 0, n, cols, true, &xs);
  NormRows<1>(src, cols, n, cols, w, eps, xs);
}

// The quantisation operations, on one block: the fp32 rows an activation set names (a.x) into
// its int8 blocks. Each set below says once where its rows are, for its quantisation and for
// the product that reads it.
__device__ __forceinline__ void QuantizeActs(const ActSet& a, int n) {
  QuantizeRows<1>(a.x, a.cols, n, a);
}

// The output projection's input, in op_act[1]: the gated-normed DeltaNet rows (kGatedNorm writes
// them there) or the attention output.
__device__ __forceinline__ ActSet MixerOutActs(const MixerArgs& A, int n) {
  const ModelDims& D = A.dims;
  if (A.recurrent) return OpActs(A.s, 1, n, D.ssm_d_inner(), true);
  ActSet a = OpActs(A.s, 1, n, D.n_head * D.head_dim, false);
  a.x = A.s.mix;
  return a;
}

// The shared expert's SwiGLU rows, and the chosen experts' (one per (expert, row) pair), as the
// down projections' inputs in op_act[1].
__device__ __forceinline__ ActSet SharedDownActs(const MoeArgs& A, int n) {
  ActSet a = OpActs(A.s, 1, n, A.dims.n_ff_shexp, false);
  a.x = A.s.sh_act;
  return a;
}
__device__ __forceinline__ ActSet ExpertDownActs(const MoeArgs& A, int n_pairs) {
  ActSet a = OpActs(A.s, 1, n_pairs, A.dims.n_ff_exp, false);
  a.x = A.s.exp_act;
  return a;
}

// Runs the one product out (op)= m · a over the grid. `kBesideExperts` names a product that the
// megakernel runs beside the expert units, so that per-op mode tiles it where the megakernel does
// (TileKernel) and both modes give the same sums.
template <int R, bool kBesideExperts = false>
__device__ __forceinline__ void RunOneJob(const ActSet& a, const Matrix& m, unsigned mask,
                                          float* out, int out_stride,
                                          OutMode mode = OutMode::kStore,
                                          const Matrix* m2 = nullptr) {
  SetJob(0, m, PublishActs(0, a), mask, out, out_stride, mode, m2);
  __syncthreads();
  RunJobs<R, kBesideExperts>(Plan().job, 1);
}

// KV: the KV cache's element type (device/mixer.cuh's LoadKv), a kernel each as in kernels.cu.
template <int R, class KV>
__device__ void MixerOpBody(const MixerArgs& A, MixerOp op, int arg, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), H = D.n_embd;
  const unsigned mask = RowMask(B);
  switch (op) {
    case MixerOp::kNorm:
      NormOp(A.s, A.s.x, B, H, A.norm, D.rms_eps);
      break;
    case MixerOp::kQuantize:
      QuantizeActs(InputActs(A.s, B, H), B);
      break;
    case MixerOp::kProject: {
      const ActSet a = InputActs(A.s, B, H);
      int n = 0;
      ForEachInputProjection(A, [&](const Matrix& m, int offset) {
        if (n++ == arg) {
          SetJob(0, m, PublishActs(0, a), mask, A.s.proj + offset, A.s.proj_stride);
        }
      });
      __syncthreads();
      RunJobs<R>(Plan().job, 1);
      break;
    }
    case MixerOp::kNormRope:
      NormRopeHeads<R, KV>(A, SplitAttention<R>(A).team_paths(), smem);
      break;
    case MixerOp::kAttention:
      AttentionChunks<R, KV>(A, SplitAttention<R>(A), smem);
      break;
    case MixerOp::kAttentionMerge:
      AttentionCombine<R>(A);
      break;
    case MixerOp::kConvDeltaRule:
      DeltaNetConvRule<R>(A, smem);
      break;
    case MixerOp::kGatedNorm: {
      float* xs;
      OpActs(A.s, 1, B, D.ssm_d_inner(), true, &xs);  // MixerOutActs' rows
      GatedNormHeads<R>(A, xs, GlobalWarp(), GridWarps());
      break;
    }
    case MixerOp::kOutQuantize:
      if (!A.recurrent) {
        // Every merge is done (the previous launch), as in AttentionOutput.
        ZeroChunkCounts<R>(A, threadIdx.x, kBlockThreads);
      }
      QuantizeActs(MixerOutActs(A, B), B);
      break;
    case MixerOp::kOutProject:
      RunOneJob<R>(MixerOutActs(A, B), A.recurrent ? A.dn.out : A.att.wo, mask, A.s.x, H,
                   OutMode::kAdd);
      break;
  }
}

template <int R>
__device__ void MoeOpBody(const MoeArgs& A, MoeOp op, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = StepRows<R>(A.in), H = D.n_embd;
  const unsigned mask = RowMask(B);
  const RouteTable& routes = *reinterpret_cast<const RouteTable*>(A.s.routes);
  switch (op) {
    case MoeOp::kNorm:
      NormOp(A.s, A.s.x, B, H, A.norm, D.rms_eps);
      break;
    case MoeOp::kQuantize:
      QuantizeActs(InputActs(A.s, B, H), B);
      break;
    case MoeOp::kRouter:
      RunOneJob<R>(InputActs(A.s, B, H), A.router, mask, A.s.router, D.n_expert);
      break;
    case MoeOp::kSharedUp:
      RunOneJob<R>(InputActs(A.s, B, H), A.sh_gate, mask, A.s.sh_act, D.n_ff_shexp,
                   OutMode::kSwiGlu, &A.sh_up);
      break;
    case MoeOp::kSharedGate:
      RunOneJob<R>(InputActs(A.s, B, H), A.sh_gate_inp, mask, A.s.sh_gate, 1);
      break;
    case MoeOp::kRoute: {
      RouteTable& rt = *reinterpret_cast<RouteTable*>(smem);
      RouteRows<R>(A, rt, smem + Align16(sizeof(RouteTable)));
      PublishRoutes(A, rt, InputActs(A.s, B, H).x);
      break;
    }
    case MoeOp::kExpertUp: {
      const ActSet* act = PublishActs(0, InputActs(A.s, B, H));
      __syncthreads();
      RunExpertUp<R>(A, routes, act, 0);
      break;
    }
    case MoeOp::kSharedDownQuantize:
      QuantizeActs(SharedDownActs(A, B), B);
      break;
    case MoeOp::kSharedDown:
      RunOneJob<R, true>(SharedDownActs(A, B), A.sh_down, mask, A.s.sh_out, H);
      break;
    case MoeOp::kDownQuantize:
      QuantizeActs(ExpertDownActs(A, routes.n_pairs), routes.n_pairs);
      break;
    case MoeOp::kExpertDown: {
      const ActSet* act = PublishActs(0, ExpertDownActs(A, routes.n_pairs));
      __syncthreads();
      RunExpertDown<R>(A, routes, act);
      break;
    }
    case MoeOp::kCombine:
      MoeCombinePhase<R>(A);
      break;
  }
}

template <int R>
__device__ void HeadOpBody(const HeadArgs& A, HeadOp op) {
  const ModelDims& D = A.dims;
  const int n = A.in->n_logit_rows, H = D.n_embd;
  switch (op) {
    case HeadOp::kNorm:
      NormOp(A.s, A.s.x + static_cast<int64_t>(A.in->logits_row0) * H, n, H, A.norm, D.rms_eps);
      break;
    case HeadOp::kQuantize:
      QuantizeActs(InputActs(A.s, n, H), n);
      break;
    case HeadOp::kLogits:
      RunOneJob<R>(InputActs(A.s, n, H), A.output, RowMask(n), A.s.logits, D.n_vocab);
      break;
    case HeadOp::kBlockArgmax:
      HeadBlockArgmax(A);
      break;
    case HeadOp::kFinalArgmax:
      HeadFinalArgmax(A);
      break;
  }
}

}  // namespace tandem::megakernel
