// Per-op mode (megakernel/ops.h): the kernels, one operation per launch, and their launchers.
// A separate translation unit from the megakernels (kernels.cu), so that adding or changing an
// operation leaves the megakernels' module as it was.
#include "megakernel/device/ops.cuh"
#include "megakernel/ops.h"

namespace tandem::megakernel {
namespace {

template <int R, class KV>
__global__ void __launch_bounds__(kBlockThreads)
    MixerOpKernel(const __grid_constant__ MixerArgs args, int op, int arg) {
  extern __shared__ __align__(16) uint8_t smem[];
  MixerOpBody<R, KV>(args, static_cast<MixerOp>(op), arg, smem);
}

template <int R>
__global__ void __launch_bounds__(kBlockThreads)
    MoeOpKernel(const __grid_constant__ MoeArgs args, int op, int /*arg*/) {
  extern __shared__ __align__(16) uint8_t smem[];
  MoeOpBody<R>(args, static_cast<MoeOp>(op), smem);
}

template <int R>
__global__ void __launch_bounds__(kBlockThreads)
    HeadOpKernel(const __grid_constant__ HeadArgs args, int op, int /*arg*/) {
  HeadOpBody<R>(args, static_cast<HeadOp>(op));
}

template <int R>
const void* OpKernelOfRows(Half half, bool f16_cache) {
  switch (half) {
    case Half::kMixer:
      return f16_cache ? reinterpret_cast<const void*>(&MixerOpKernel<R, __half>)
                       : reinterpret_cast<const void*>(&MixerOpKernel<R, float>);
    case Half::kMoe:
      return reinterpret_cast<const void*>(&MoeOpKernel<R>);
    case Half::kHead:
      return reinterpret_cast<const void*>(&HeadOpKernel<R>);
  }
  return nullptr;
}

// f16_cache picks the mixer's kernel for an f16 KV cache (AttentionLayer::f16_cache).
const void* OpKernelOf(Half half, int rows_variant, bool f16_cache = false) {
  static_assert(kNumRowsVariants == 3 && kRowsVariants[1] == 4 && kRowsVariants[2] == kMaxRows,
                "OpKernelOf instantiates exactly kRowsVariants");
  switch (rows_variant) {
    case 1:
      return OpKernelOfRows<1>(half, f16_cache);
    case 4:
      return OpKernelOfRows<4>(half, f16_cache);
    case kMaxRows:
      return OpKernelOfRows<kMaxRows>(half, f16_cache);
  }
  return nullptr;
}

// The kernels of one half in per-op mode, into `kernels`; returns how many: the mixer's for an f32
// and an f16 KV cache, one for the other halves.
int OpKernels(Half half, int rows_variant, const void* (&kernels)[2]) {
  kernels[0] = OpKernelOf(half, rows_variant);
  if (half != Half::kMixer) return 1;
  kernels[1] = OpKernelOf(half, rows_variant, true);
  return 2;
}

// One launch: operation `op` with its argument, on one block or on the whole grid.
struct OpLaunch {
  int op = 0;
  int arg = 0;
  bool one_block = false;
};
inline constexpr int kMaxOpsPerHalf = 16;

int MixerOps(const MixerArgs& a, OpLaunch* out) {
  int n = 0;
  auto add = [&](MixerOp op, bool one_block, int arg = 0) {
    out[n++] = OpLaunch{static_cast<int>(op), arg, one_block};
  };
  add(MixerOp::kNorm, true);
  add(MixerOp::kQuantize, true);
  for (int j = 0; j < InputProjectionCount(a); ++j) add(MixerOp::kProject, false, j);
  if (a.recurrent) {
    add(MixerOp::kConvDeltaRule, false);
    add(MixerOp::kGatedNorm, false);
  } else {
    add(MixerOp::kNormRope, false);
    add(MixerOp::kAttention, false);
    add(MixerOp::kAttentionMerge, false);
  }
  add(MixerOp::kOutQuantize, true);
  add(MixerOp::kOutProject, false);
  return n;
}

int MoeOps(const MoeArgs& a, OpLaunch* out) {
  int n = 0;
  auto add = [&](MoeOp op, bool one_block) {
    out[n++] = OpLaunch{static_cast<int>(op), 0, one_block};
  };
  add(MoeOp::kNorm, true);
  add(MoeOp::kQuantize, true);
  add(MoeOp::kRouter, false);
  if (a.has_shexp) {
    add(MoeOp::kSharedUp, false);
    add(MoeOp::kSharedGate, false);
  }
  add(MoeOp::kRoute, true);
  add(MoeOp::kExpertUp, false);
  if (a.has_shexp) {
    add(MoeOp::kSharedDownQuantize, true);
    add(MoeOp::kSharedDown, false);
  }
  add(MoeOp::kDownQuantize, true);
  add(MoeOp::kExpertDown, false);
  add(MoeOp::kCombine, false);
  return n;
}

int HeadOps(OpLaunch* out) {
  int n = 0;
  for (HeadOp op : {HeadOp::kNorm, HeadOp::kQuantize}) out[n++] = {static_cast<int>(op), 0, true};
  for (HeadOp op : {HeadOp::kLogits, HeadOp::kBlockArgmax, HeadOp::kFinalArgmax}) {
    out[n++] = {static_cast<int>(op), 0, false};
  }
  return n;
}

// Ordinary launches, in stream order: no cooperative launch, no overlap with the launch before.
template <typename Args>
cudaError_t LaunchOps(const void* kernel, const Args& args, const OpLaunch* ops, int n_ops,
                      const LaunchShape& shape, cudaStream_t stream) {
  for (int i = 0; i < n_ops; ++i) {
    int op = ops[i].op, arg = ops[i].arg;
    void* params[] = {const_cast<Args*>(&args), &op, &arg};
    const dim3 grid(ops[i].one_block ? 1 : shape.grid);
    if (cudaError_t e = cudaLaunchKernel(kernel, grid, dim3(kBlockThreads), params,
                                         static_cast<size_t>(shape.smem), stream);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

}  // namespace

int PerOpLaunches(const MixerArgs& args) {
  OpLaunch ops[kMaxOpsPerHalf];
  return MixerOps(args, ops);
}
int PerOpLaunches(const MoeArgs& args) {
  OpLaunch ops[kMaxOpsPerHalf];
  return MoeOps(args, ops);
}
int PerOpLaunches(const HeadArgs&) {
  OpLaunch ops[kMaxOpsPerHalf];
  return HeadOps(ops);
}

cudaError_t PrepareOps(Half half, int rows_variant, int64_t smem) {
  const void* kernels[2];
  const int n_kernels = OpKernels(half, rows_variant, kernels);
  for (int i = 0; i < n_kernels; ++i) {
    if (cudaError_t e = cudaFuncSetAttribute(
            kernels[i], cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

cudaError_t OpsStaticSmem(Half half, int rows_variant, int64_t* bytes) {
  *bytes = 0;
  const void* kernels[2];
  const int n_kernels = OpKernels(half, rows_variant, kernels);
  for (int i = 0; i < n_kernels; ++i) {
    cudaFuncAttributes attributes;
    if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernels[i]); e != cudaSuccess) return e;
    *bytes = std::max(*bytes, static_cast<int64_t>(attributes.sharedSizeBytes));
  }
  return cudaSuccess;
}

cudaError_t LaunchMixerOps(const MixerArgs& args, int rows_variant, const LaunchShape& shape,
                           cudaStream_t stream) {
  OpLaunch ops[kMaxOpsPerHalf];
  return LaunchOps(OpKernelOf(Half::kMixer, rows_variant, args.att.f16_cache != 0), args, ops,
                   MixerOps(args, ops), shape, stream);
}

cudaError_t LaunchMoeOps(const MoeArgs& args, int rows_variant, const LaunchShape& shape,
                         cudaStream_t stream) {
  OpLaunch ops[kMaxOpsPerHalf];
  return LaunchOps(OpKernelOf(Half::kMoe, rows_variant), args, ops, MoeOps(args, ops), shape,
                   stream);
}

cudaError_t LaunchHeadOps(const HeadArgs& args, int rows_variant, const LaunchShape& shape,
                          cudaStream_t stream) {
  OpLaunch ops[kMaxOpsPerHalf];
  return LaunchOps(OpKernelOf(Half::kHead, rows_variant), args, ops, HeadOps(ops), shape, stream);
}

}  // namespace tandem::megakernel
