// The persistent kernels of megakernel/ and their launchers: one kernel template per half whose
// body runs phases [begin, end) with a grid barrier between them. Megakernel mode launches all
// phases cooperatively at once; per-phase mode launches one phase per ordinary kernel. Per-op
// mode's kernels live in per_op.cu.
// Arguments are __grid_constant__: the phases take them by reference, and without it every thread
// copied the ~700-byte struct to local memory at entry (measured: ~10 µs per phase on the H200,
// 2026-11-29, ncu per-op profile of synth:qwen3-30b-a3b).
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>

#include "megakernel/device/head.cuh"
#include "megakernel/device/mixer.cuh"
#include "megakernel/device/moe.cuh"
#include "megakernel/launch.h"
#include "megakernel/ops.h"

namespace tandem::megakernel {
namespace {

namespace cg = cooperative_groups;

// Block 0's %globaltimer (ns) at the start of phase `slot` of a layer half, or at the end of the
// launch (slot = end phase), when the timeline is on. Block 0 leaves each grid barrier when the
// whole grid has arrived, so consecutive stamps are phase times including the barrier. In
// per-phase mode a launch's end stamp is overwritten by the next phase's start, so the slots mean
// the same.
__device__ __forceinline__ void Stamp(uint64_t* timeline, int layer, int half, int slot) {
  if (timeline == nullptr || blockIdx.x != 0 || threadIdx.x != 0) return;
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  timeline[(2 * layer + half) * kTimelineSlots + slot] = t;
}

// Programmatic dependent launch (sm_90 and later): a layer-half launch may be scheduled while the
// one before it in the stream drains, so its launch latency overlaps that launch's tail (1.8 us
// between launches, 97 launches a token; 2026-11-30). Every thread waits here, before it reads
// anything, until the previous grid has completed and its writes are visible; each block lets
// the next launch begin once its own phases are done. Both are no-ops without the launch
// attribute and before sm_90.
__device__ __forceinline__ void WaitForPreviousLaunch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void AllowNextLaunch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Before griddepcontrol.wait, while the previous launch drains: what a launch's first phase reads
// that no earlier launch writes. Its arguments are new in every launch, so their constant-cache
// lines are cold (each thread below < kLines touches one 64-byte line), and its RMSNorm weights
// `norm` (cols floats) are requested into L1, a line a thread.
template <class Args>
__device__ __forceinline__ void WarmBeforeWait(const Args& args, const float* norm, int cols) {
  constexpr int kLines = static_cast<int>((sizeof(Args) + 63) / 64);
  static_assert(kLines <= kBlockThreads, "");
  if (static_cast<int>(threadIdx.x) < kLines) {
    const uint32_t word = reinterpret_cast<const uint32_t*>(&args)[threadIdx.x * 16];
    asm volatile("" ::"r"(word));
  }
  for (int i = static_cast<int>(threadIdx.x) * 32; i < cols; i += kBlockThreads * 32) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(norm + i));
  }
}

// kRecurrent: the DeltaNet layers' kernel, else the attention layers'. Two kernels, not one with a
// branch per phase: each layer kind's code and register allocation stay out of the other's (a
// change to the delta rule moved attention phase times by 2-20 us, session 25). KV: the attention
// layers' KV cache element (float, or __half for --cache-type f16), a kernel each for the same
// reason (device/mixer.cuh's LoadKv).
template <int R, bool kRecurrent, class KV>
__global__ void __launch_bounds__(kBlockThreads)
    MixerKernel(const __grid_constant__ MixerArgs args, int begin, int end) {
  extern __shared__ __align__(16) uint8_t smem[];
  if (begin == 0) WarmBeforeWait(args, args.norm, args.dims.n_embd);
  WaitForPreviousLaunch();
  for (int p = begin; p < end; ++p) {
    if (p > begin) cg::this_grid().sync();
    Stamp(args.s.timeline, args.layer, 0, p);
    MixerPhase<R, kRecurrent, KV>(args, p, smem);
  }
  Stamp(args.s.timeline, args.layer, 0, end);
  AllowNextLaunch();
}

template <int R>
__global__ void __launch_bounds__(kBlockThreads) MoeKernel(const __grid_constant__ MoeArgs args, int begin,
                                                                        int end) {
  extern __shared__ __align__(16) uint8_t smem[];
  if (begin == 0) WarmBeforeWait(args, args.norm, args.dims.n_embd);
  WaitForPreviousLaunch();
  for (int p = begin; p < end; ++p) {
    if (p > begin) cg::this_grid().sync();
    Stamp(args.s.timeline, args.layer, 1, p);
    MoePhase<R>(args, p, begin, smem);
  }
  Stamp(args.s.timeline, args.layer, 1, end);
  AllowNextLaunch();
}

template <int R>
__global__ void __launch_bounds__(kBlockThreads) HeadKernel(const __grid_constant__ HeadArgs args, int begin,
                                                                          int end) {
  extern __shared__ __align__(16) uint8_t smem[];
  if (begin == 0) WarmBeforeWait(args, args.norm, args.dims.n_embd);
  WaitForPreviousLaunch();
  for (int p = begin; p < end; ++p) {
    if (p > begin) cg::this_grid().sync();
    HeadPhase<R>(args, p, smem);
  }
  AllowNextLaunch();
}

__global__ void __launch_bounds__(256) EmbedKernel(const __grid_constant__ HeadArgs args) { EmbedRows(args); }

// One product out[r] = m · x[r] with the same prologue and row loop as the layer kernels.
template <int R>
__global__ void __launch_bounds__(kBlockThreads) MatVecKernel(const __grid_constant__ Matrix m, const float* x,
                                                              int n_rows, float* out) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* cursor = smem;
  float* unused;
  ActSet a = CarveActs(cursor, n_rows, m.cols, false, &unused);
  a.x = x;
  QuantizeRows<PrologueBatch(R)>(x, m.cols, n_rows, a);
  SetJob(0, m, PublishActs(0, a), RowMask(n_rows), out, m.rows);
  __syncthreads();
  RunJobs<R>(Plan().job, 1);
}

// n_syncs grid barriers and nothing else: the fixed costs every phase pays (the bench's ceilings).
__global__ void __launch_bounds__(kBlockThreads) BarrierProbeKernel(int n_syncs) {
  for (int i = 0; i < n_syncs; ++i) cg::this_grid().sync();
}

template <int R>
const void* KernelOfRows(Half half, bool recurrent, bool f16_cache) {
  switch (half) {
    case Half::kMixer:
      return recurrent   ? reinterpret_cast<const void*>(&MixerKernel<R, true, float>)
             : f16_cache ? reinterpret_cast<const void*>(&MixerKernel<R, false, __half>)
                         : reinterpret_cast<const void*>(&MixerKernel<R, false, float>);
    case Half::kMoe: return reinterpret_cast<const void*>(&MoeKernel<R>);
    case Half::kHead: return reinterpret_cast<const void*>(&HeadKernel<R>);
  }
  return nullptr;
}

// The kernel of one half for one of kRowsVariants; `recurrent` picks the mixer's DeltaNet kernel,
// `f16_cache` its attention kernel for an f16 KV cache.
const void* KernelOf(Half half, int rows_variant, bool recurrent = false, bool f16_cache = false) {
  static_assert(kNumRowsVariants == 3 && kRowsVariants[1] == 4 && kRowsVariants[2] == kMaxRows,
                "KernelOf instantiates exactly kRowsVariants");
  switch (rows_variant) {
    case 1:
      return KernelOfRows<1>(half, recurrent, f16_cache);
    case 4:
      return KernelOfRows<4>(half, recurrent, f16_cache);
    case kMaxRows:
      return KernelOfRows<kMaxRows>(half, recurrent, f16_cache);
  }
  return nullptr;
}

// The kernels a half launches in megakernel and per-phase mode, into `kernels`; returns how many:
// the mixer's attention kernels (f32 and f16 KV cache) and DeltaNet kernel, one kernel for the
// other halves.
int HalfKernels(Half half, int rows_variant, const void* (&kernels)[3]) {
  kernels[0] = KernelOf(half, rows_variant, false);
  if (half != Half::kMixer) return 1;
  kernels[1] = KernelOf(half, rows_variant, true);
  kernels[2] = KernelOf(half, rows_variant, false, true);
  return 3;
}

// Whether the current device takes programmatic dependent launches (compute capability 9.0+),
// asked once per device: one process may drive cards of different generations.
bool DeviceHasPdl() {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> known[kCachedDevices] = {};  // 0: not asked yet, 1: no, 2: yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    const int k = known[device].load(std::memory_order_relaxed);
    if (k != 0) return k == 2;
  }
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return false;
  }
  if (cached) known[device].store(major >= 9 ? 2 : 1, std::memory_order_relaxed);
  return major >= 9;
}

// One launch of `kernel` with `grid` blocks of kBlockThreads; cooperative (grid barriers allowed)
// when asked; `overlap`: a layer-half kernel, which waits for the previous launch itself
// (WaitForPreviousLaunch), so it may be scheduled before that launch has drained.
cudaError_t Launch(const void* kernel, int grid, int64_t smem, bool cooperative, bool overlap,
                   void** params, cudaStream_t stream) {
  const bool pdl = DeviceHasPdl();
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(kBlockThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attributes[2];
  unsigned n = 0;
  if (cooperative) {
    attributes[n].id = cudaLaunchAttributeCooperative;
    attributes[n++].val.cooperative = 1;
  }
  if (overlap && pdl) {
    attributes[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = n > 0 ? attributes : nullptr;
  config.numAttrs = n;
  return cudaLaunchKernelExC(&config, kernel, params);
}

// Launches phases of one half: all at once cooperatively (megakernel mode), or one ordinary launch
// per phase (per-phase mode).
template <typename Args>
cudaError_t LaunchPhases(const void* kernel, const Args& args, int n_phases, KernelMode mode,
                         const LaunchShape& shape, cudaStream_t stream) {
  if (mode == KernelMode::kMegakernel) {
    int begin = 0, end = n_phases;
    void* params[] = {const_cast<Args*>(&args), &begin, &end};
    return Launch(kernel, shape.grid, shape.smem, true, true, params, stream);
  }
  for (int p = 0; p < n_phases; ++p) {
    int begin = p, end = p + 1;
    void* params[] = {const_cast<Args*>(&args), &begin, &end};
    if (cudaError_t e = Launch(kernel, shape.grid, shape.smem, false, true, params, stream);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

}  // namespace

int PhaseCount(Half half, bool recurrent) {
  switch (half) {
    case Half::kMixer: return recurrent ? kDeltaNetPhases : kAttentionPhases;
    case Half::kMoe: return kMoePhases;
    case Half::kHead: return kHeadPhases;
  }
  return 0;
}

// The mixer's attention and DeltaNet kernels share one grid: the smaller occupancy of the two.
cudaError_t PrepareHalf(Half half, int rows_variant, int64_t smem, int max_blocks_per_sm,
                        LaunchShape* shape) {
  int device = 0, sms = 0, per_sm = max_blocks_per_sm;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess) {
    return e;
  }
  const void* kernels[3];
  const int n_kernels = HalfKernels(half, rows_variant, kernels);
  for (int i = 0; i < n_kernels; ++i) {
    const void* kernel = kernels[i];
    if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(smem));
        e != cudaSuccess) {
      return e;
    }
    int fits = 0;
    if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fits, kernel, kBlockThreads,
                                                                      static_cast<size_t>(smem));
        e != cudaSuccess) {
      return e;
    }
    per_sm = std::min(per_sm, fits);
  }
  if (cudaError_t e = PrepareOps(half, rows_variant, smem); e != cudaSuccess) return e;
  if (per_sm == 0) return cudaErrorInvalidConfiguration;
  shape->grid = sms * per_sm;
  shape->smem = smem;
  return cudaSuccess;
}

cudaError_t MaxDynamicSmem(Half half, int rows_variant, int64_t* bytes) {
  int64_t kernel_static = 0;  // the largest of the mixer's kernels
  const void* kernels[3];
  const int n_kernels = HalfKernels(half, rows_variant, kernels);
  for (int i = 0; i < n_kernels; ++i) {
    cudaFuncAttributes attributes;
    if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernels[i]); e != cudaSuccess) {
      return e;
    }
    kernel_static = std::max(kernel_static, static_cast<int64_t>(attributes.sharedSizeBytes));
  }
  int64_t op_static = 0;  // per-op mode's kernel of this half
  if (cudaError_t e = OpsStaticSmem(half, rows_variant, &op_static); e != cudaSuccess) return e;
  int device = 0, optin = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (cudaError_t e =
          cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
      e != cudaSuccess) {
    return e;
  }
  *bytes = static_cast<int64_t>(optin) - std::max(kernel_static, op_static);
  return cudaSuccess;
}

cudaError_t LaunchMixer(const MixerArgs& args, int rows_variant, KernelMode mode,
                        const LaunchShape& shape, cudaStream_t stream) {
  if (mode == KernelMode::kPerOp) return LaunchMixerOps(args, rows_variant, shape, stream);
  const bool recurrent = args.recurrent != 0;
  return LaunchPhases(KernelOf(Half::kMixer, rows_variant, recurrent, args.att.f16_cache != 0),
                      args, PhaseCount(Half::kMixer, recurrent), mode, shape, stream);
}

cudaError_t LaunchMoe(const MoeArgs& args, int rows_variant, KernelMode mode,
                      const LaunchShape& shape, cudaStream_t stream) {
  if (mode == KernelMode::kPerOp) return LaunchMoeOps(args, rows_variant, shape, stream);
  return LaunchPhases(KernelOf(Half::kMoe, rows_variant), args, kMoePhases, mode, shape, stream);
}

cudaError_t LaunchHead(const HeadArgs& args, int rows_variant, KernelMode mode,
                       const LaunchShape& shape, cudaStream_t stream) {
  if (mode == KernelMode::kPerOp) return LaunchHeadOps(args, rows_variant, shape, stream);
  return LaunchPhases(KernelOf(Half::kHead, rows_variant), args, kHeadPhases, mode, shape, stream);
}

cudaError_t LaunchMatVec(const Matrix& m, const float* x, int n_rows, float* out,
                         cudaStream_t stream) {
  const int64_t smem = ActSetBytes(n_rows, m.cols, false);
  const void* kernel = n_rows == 1 ? reinterpret_cast<const void*>(&MatVecKernel<1>)
                                   : reinterpret_cast<const void*>(&MatVecKernel<kMaxRows>);
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem));
      e != cudaSuccess) {
    return e;
  }
  if (n_rows == 1) {
    MatVecKernel<1><<<264, kBlockThreads, smem, stream>>>(m, x, n_rows, out);
  } else {
    MatVecKernel<kMaxRows><<<264, kBlockThreads, smem, stream>>>(m, x, n_rows, out);
  }
  return cudaGetLastError();
}

cudaError_t LaunchBarrierProbe(int grid, int n_syncs, cudaStream_t stream) {
  void* params[] = {&n_syncs};
  return Launch(reinterpret_cast<const void*>(&BarrierProbeKernel), grid, 0, true, false, params,
                stream);
}

cudaError_t LaunchEmbed(const HeadArgs& args, cudaStream_t stream) {
  EmbedKernel<<<64, 256, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace tandem::megakernel
