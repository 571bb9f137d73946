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
// arrays.
__device__ __forceinline__ ActSet OpActs(const Scratch& s, int i, int n, int cols, bool fp32,
                                         float** x) {
  uint8_t* cursor = s.op_act[i];
  return CarveActs(cursor, n, cols, fp32, x);
}

// The first two operations of each half and of the head, on one block: RMSNorm(rows of src) * w
// into op_act[0]'s fp32 rows, then those rows as int8 blocks.
__device__ __forceinline__ void NormOp(const Scratch& s, const float* src, int n, int cols,
                                       const float* w, float eps) {
  float* xs;
  OpActs(s, 0, n, cols, true, &xs);
  NormRows(src, cols, n, cols, w, eps, xs);
}
__device__ __forceinline__ void QuantizeOp(const Scratch& s, int n, int cols) {
  float* xs;
  const ActSet a = OpActs(s, 0, n, cols, true, &xs);
  QuantizeRows(xs, cols, n, a);
}

// Runs the one product out (op)= m · a over the grid.
template <int R>
__device__ __forceinline__ void RunOneJob(const ActSet& a, const Matrix& m, unsigned mask,
                                          float* out, int out_stride,
                                          OutMode mode = OutMode::kStore,
                                          const Matrix* m2 = nullptr) {
  SetJob(0, m, PublishActs(0, a), mask, out, out_stride, mode, m2);
  __syncthreads();
  RunJobs<R>(Plan().job, 1);
}

template <int R>
__device__ void MixerOpBody(const MixerArgs& A, MixerOp op, int arg, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, H = D.n_embd;
  const unsigned mask = RowMask(B);
  // The output projection's input: the attention output, or the gated-normed DeltaNet output.
  const int out_cols = A.recurrent ? D.ssm_d_inner() : D.n_head * D.head_dim;
  float* xs;
  switch (op) {
    case MixerOp::kNorm:
      NormOp(A.s, A.s.x, B, H, A.norm, D.rms_eps);
      break;
    case MixerOp::kQuantize:
      QuantizeOp(A.s, B, H);
      break;
    case MixerOp::kProject: {
      const ActSet a = OpActs(A.s, 0, B, H, true, &xs);
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
      NormRopeHeads(A);
      break;
    case MixerOp::kAttention:
      AttentionChunks(A, smem);
      break;
    case MixerOp::kAttentionMerge:
      AttentionCombine(A);
      break;
    case MixerOp::kConv:
      DeltaNetConv(A);
      break;
    case MixerOp::kDeltaRule:
      DeltaNetRule(A, smem);
      break;
    case MixerOp::kGatedNorm:
      OpActs(A.s, 1, B, out_cols, true, &xs);
      GatedNormHeads(A, xs, GlobalWarp(), GridWarps());
      break;
    case MixerOp::kOutQuantize: {
      ActSet a = OpActs(A.s, 1, B, out_cols, A.recurrent != 0, &xs);
      if (!A.recurrent) {
        // Every merge is done (the previous launch), as in AttentionOutput.
        for (int i = threadIdx.x; i < B * D.n_head; i += kBlockThreads) A.s.chunks_done[i] = 0;
        xs = A.s.mix;
      }
      QuantizeRows(xs, out_cols, B, a);
      break;
    }
    case MixerOp::kOutProject: {
      ActSet a = OpActs(A.s, 1, B, out_cols, A.recurrent != 0, &xs);
      if (!A.recurrent) a.x = A.s.mix;
      RunOneJob<R>(a, A.recurrent ? A.dn.out : A.att.wo, mask, A.s.x, H, OutMode::kAdd);
      break;
    }
  }
}

template <int R>
__device__ void MoeOpBody(const MoeArgs& A, MoeOp op, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int B = A.in->n_rows, H = D.n_embd;
  const unsigned mask = RowMask(B);
  const RouteTable& routes = *reinterpret_cast<const RouteTable*>(A.s.routes);
  float* xs;
  switch (op) {
    case MoeOp::kNorm:
      NormOp(A.s, A.s.x, B, H, A.norm, D.rms_eps);
      break;
    case MoeOp::kQuantize:
      QuantizeOp(A.s, B, H);
      break;
    case MoeOp::kRouter:
      RunOneJob<R>(OpActs(A.s, 0, B, H, true, &xs), A.router, mask, A.s.router, D.n_expert);
      break;
    case MoeOp::kSharedUp:
      RunOneJob<R>(OpActs(A.s, 0, B, H, true, &xs), A.sh_gate, mask, A.s.sh_act, D.n_ff_shexp,
                   OutMode::kSwiGlu, &A.sh_up);
      break;
    case MoeOp::kSharedGate:
      RunOneJob<R>(OpActs(A.s, 0, B, H, true, &xs), A.sh_gate_inp, mask, A.s.sh_gate, 1);
      break;
    case MoeOp::kRoute: {
      OpActs(A.s, 0, B, H, true, &xs);
      RouteTable& rt = *reinterpret_cast<RouteTable*>(smem);
      RouteRows<R>(A, rt, smem + Align16(sizeof(RouteTable)));
      PublishRoutes(A, rt, xs);
      break;
    }
    case MoeOp::kExpertUp: {
      const ActSet* act = PublishActs(0, OpActs(A.s, 0, B, H, true, &xs));
      __syncthreads();
      RunExpertUp<R>(A, routes, act, 0);
      break;
    }
    case MoeOp::kSharedDownQuantize: {
      ActSet sh = OpActs(A.s, 1, B, D.n_ff_shexp, false, &xs);
      QuantizeRows(A.s.sh_act, D.n_ff_shexp, B, sh);
      break;
    }
    case MoeOp::kSharedDown: {
      ActSet sh = OpActs(A.s, 1, B, D.n_ff_shexp, false, &xs);
      sh.x = A.s.sh_act;
      RunOneJob<R>(sh, A.sh_down, mask, A.s.sh_out, H);
      break;
    }
    case MoeOp::kDownQuantize: {
      const ActSet a = OpActs(A.s, 1, routes.n_pairs, D.n_ff_exp, false, &xs);
      QuantizeRows(A.s.exp_act, D.n_ff_exp, routes.n_pairs, a);
      break;
    }
    case MoeOp::kExpertDown: {
      ActSet a = OpActs(A.s, 1, routes.n_pairs, D.n_ff_exp, false, &xs);
      a.x = A.s.exp_act;
      const ActSet* act = PublishActs(0, a);
      __syncthreads();
      RunExpertDown<R>(A, routes, act);
      break;
    }
    case MoeOp::kCombine:
      MoeCombinePhase(A);
      break;
  }
}

template <int R>
__device__ void HeadOpBody(const HeadArgs& A, HeadOp op) {
  const ModelDims& D = A.dims;
  const int n = A.in->n_logit_rows, H = D.n_embd;
  float* xs;
  switch (op) {
    case HeadOp::kNorm:
      NormOp(A.s, A.s.x + static_cast<int64_t>(A.in->logits_row0) * H, n, H, A.norm, D.rms_eps);
      break;
    case HeadOp::kQuantize:
      QuantizeOp(A.s, n, H);
      break;
    case HeadOp::kLogits:
      RunOneJob<R>(OpActs(A.s, 0, n, H, true, &xs), A.output, RowMask(n), A.s.logits, D.n_vocab);
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
