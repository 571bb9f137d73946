// Block-level activation prologues (RMSNorm into shared memory, int8 quantisation) and the
// grid-wide matrix-vector loop: units of rows spread over every warp of the grid, each unit a warp
// whose lane groups own one row each. C++17, device only.
#pragma once

#include <cstdint>

#include "megakernel/codecs/dispatch.cuh"
#include "megakernel/device/common.cuh"
#include "megakernel/params.h"
#include "megakernel/small_div.h"
#include "megakernel/smem.h"

namespace tandem::megakernel {

// A warp's index in the grid's work loops, block-minor: warp w of block b is w * gridDim.x + b,
// so the first units of a phase land on warp 0 of every block (every multiprocessor) instead of
// on all warps of the first few blocks.
__device__ __forceinline__ int GlobalWarp() {
  return static_cast<int>(threadIdx.x) / 32 * static_cast<int>(gridDim.x) +
         static_cast<int>(blockIdx.x);
}
__device__ __forceinline__ int GridWarps() { return static_cast<int>(gridDim.x) * kWarpsPerBlock; }
__device__ __forceinline__ int Lane() { return static_cast<int>(threadIdx.x) & 31; }
__device__ __forceinline__ int Warp() { return static_cast<int>(threadIdx.x) / 32; }

// Carves an activation set for n rows of `cols` out of shared memory at `cursor` (layout of
// ActSetBytes in megakernel/smem.h). The fp32 copy lives in shared memory when `fp32_shared`.
__device__ __forceinline__ ActSet CarveActs(uint8_t*& cursor, int n, int cols, bool fp32_shared,
                                            float** x_shared) {
  ActSet a;
  a.cols = cols;
  constexpr uintptr_t kLineMask = kActLineBytes - 1;
  cursor =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(cursor) + kLineMask) & ~kLineMask);
  a.q = reinterpret_cast<int8_t*>(cursor);
  cursor += static_cast<int64_t>(n) * ActRowBytes(cols);
  a.d = reinterpret_cast<float*>(cursor);
  cursor += Align16(static_cast<int64_t>(n) * (cols / 32) * 4);
  a.s = reinterpret_cast<float*>(cursor);
  cursor += Align16(static_cast<int64_t>(n) * (cols / 32) * 4);
  *x_shared = nullptr;
  if (fp32_shared) {
    *x_shared = reinterpret_cast<float*>(cursor);
    a.x = *x_shared;
    cursor += Align16(static_cast<int64_t>(n) * cols * 4);
  }
  return a;
}

// Rows (NormRows) or warp steps of blocks (QuantizeRows) whose loads a prologue of the R-row
// kernels issues together. One at a time, the loads of a 4-row step went out as four dependent
// round trips; batched in the one-row kernels too, decode lost 4-7% (session 33: the
// unrolled copies cost more than the round trips they saved), so those keep one.
__host__ __device__ constexpr int PrologueBatch(int R) { return R > 1 ? 4 : 1; }

// dst[r] = RMSNorm(src[r]) * w for n <= kMaxRows rows (w may be null). Block-level: every thread
// takes columns t, t + kBlockThreads, ... of every row, so a row costs one round of independent
// loads per kBlockThreads columns (one warp per row cost ~8 µs of dependent round trips per
// phase at 2,048 columns: ncu per-op profile, 2026-11-29). The weights are read with the rows,
// not after the sum, so that a norm waits for one round of global loads instead of two. Rows go
// kBatch at a time, loads first; a batch past the last row loads the last row again and stores
// nothing. dst may alias src: a thread reads and writes only its own columns.
template <int kBatch>
__device__ __forceinline__ void NormRows(const float* src, int src_stride, int n, int cols,
                                         const float* w, float eps, float* dst) {
  __shared__ float partial[kWarpsPerBlock][kMaxRows];
  __shared__ float scale[kMaxRows];
  for (int r0 = 0; r0 < n; r0 += kBatch) {
    float ss[kBatch] = {};
#pragma unroll(kBatch == 1 ? 4 : 2)
    for (int i = threadIdx.x; i < cols; i += kBlockThreads) {
      const float wi = w != nullptr ? w[i] : 1.0f;
      float v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        v[k] = src[static_cast<int64_t>(min(r0 + k, n - 1)) * src_stride + i];
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (r0 + k < n) dst[static_cast<int64_t>(r0 + k) * cols + i] = v[k] * wi;
        ss[k] += v[k] * v[k];
      }
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const float sum = WarpSum(ss[k]);
      if (Lane() == 0 && r0 + k < n) partial[Warp()][r0 + k] = sum;
    }
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < n) {
    float ss = 0;
    for (int k = 0; k < kWarpsPerBlock; ++k) ss += partial[k][threadIdx.x];
    scale[threadIdx.x] = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
  }
  __syncthreads();
  for (int r = 0; r < n; ++r) {
    float* y = dst + static_cast<int64_t>(r) * cols;
#pragma unroll 4
    for (int i = threadIdx.x; i < cols; i += kBlockThreads) {
      y[i] *= scale[r];
    }
  }
}

// Quantises n rows of `cols` fp32 values (row stride `stride`) into a's int8 blocks (and block
// sums d·Σq): eight lanes per 32-value block, four values each, four blocks per warp step, and
// kBatch steps' loads issued before any is used (a step past the last block loads the last
// block again and stores nothing). The loop is warp-uniform so that the shuffles always see the
// whole warp. Block-level; __syncthreads() before reading a.
template <int kBatch>
__device__ __forceinline__ void QuantizeRows(const float* x, int stride, int n, const ActSet& a) {
  const int blocks_per_row = a.cols / 32;
  const SmallDivisor per_row = MakeSmallDivisor(blocks_per_row);
  const int total = n * blocks_per_row;
  const int sub = Lane() & 7;
  constexpr int kStep = kWarpsPerBlock * 4;  // blocks a block's warps take per step
  for (int first = Warp() * 4; first < total; first += kStep * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int blk = min(first + (Lane() >> 3) + k * kStep, total - 1);
      int r, b;
      DivMod(blk, per_row, &r, &b);
      v[k] =
          *reinterpret_cast<const float4*>(x + static_cast<int64_t>(r) * stride + 32 * b + 4 * sub);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int blk = first + (Lane() >> 3) + k * kStep;
      float amax = fmaxf(fmaxf(fabsf(v[k].x), fabsf(v[k].y)), fmaxf(fabsf(v[k].z), fabsf(v[k].w)));
      for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, o));
      const float d = amax / 127.0f;
      const float id = d > 0 ? 1.0f / d : 0.0f;
      const int q0 = __float2int_rn(v[k].x * id), q1 = __float2int_rn(v[k].y * id);
      const int q2 = __float2int_rn(v[k].z * id), q3 = __float2int_rn(v[k].w * id);
      // The block sum of the quantised values (times d): formats with minimums subtract
      // min · Σx, and using the same quantised x there as in the dot product keeps the two terms'
      // errors from adding up (the dot product is then exactly that of the quantised row).
      int isum = (q0 + q1) + (q2 + q3);
      for (int o = 4; o > 0; o >>= 1) isum += __shfl_xor_sync(kFullMask, isum, o);
      if (blk >= total) continue;
      int r, b;
      DivMod(blk, per_row, &r, &b);
      const uint32_t q =
          (static_cast<uint32_t>(q0) & 0xffu) | (static_cast<uint32_t>(q1) & 0xffu) << 8 |
          (static_cast<uint32_t>(q2) & 0xffu) << 16 | (static_cast<uint32_t>(q3) & 0xffu) << 24;
      // Word sub & 3 of chunk 2b + sub / 4, in that chunk's slot.
      int8_t* chunk = const_cast<int8_t*>(ActChunk(a, r, 2 * b + (sub >> 2)));
      *reinterpret_cast<uint32_t*>(chunk + 4 * (sub & 3)) = q;
      if (sub == 0) {
        const_cast<float*>(a.d)[blk] = d;
        const_cast<float*>(a.s)[blk] = d * static_cast<float>(isum);
      }
    }
  }
}

// Block-level: RMSNorm(rows of src) * w into a new activation set carved at `cursor` (fp32 copy
// in shared memory), then quantised. The caller's next __syncthreads() publishes it.
template <int kBatch>
__device__ __forceinline__ ActSet NormedActs(uint8_t*& cursor, const float* src, int n, int cols,
                                             const float* w, float eps) {
  float* xs;
  const ActSet a = CarveActs(cursor, n, cols, true, &xs);
  NormRows<kBatch>(src, cols, n, cols, w, eps, xs);
  __syncthreads();
  QuantizeRows<kBatch>(xs, cols, n, a);
  return a;
}

__device__ __forceinline__ unsigned RowMask(int n_rows) { return (1u << n_rows) - 1u; }

// The step's rows in a kernel of R rows. The one-row kernels run only one-row steps
// (RowsVariant), so they know B without a load: their prologues' first loads (the residual, the
// attention output) need not wait for the step input's round trip at the start of every phase.
template <int R>
__device__ __forceinline__ int StepRows(const StepInput* in) {
  return R == 1 ? 1 : in->n_rows;
}

enum class OutMode : int32_t { kStore = 0, kAdd = 1, kSwiGlu = 2 };

// One matrix-vector product of a phase: out[o(r)][row] (op)= m[row] · act[a(r)] for the step
// rows r of `mask`, where a and o are ActRow(mask, act_base / out_base, r): the step row itself
// (base -1) or the row's (expert, row) pair. kSwiGlu reads m2 at the same row and writes
// silu(m·x) * (m2·x).
struct MatVecJob {
  Matrix m, m2;
  const ActSet* act = nullptr;
  unsigned mask = 0;
  int act_base = -1;
  int out_base = -1;
  float* out = nullptr;
  int out_stride = 0;  // per step row
  OutMode mode = OutMode::kStore;
  // How rows split over lanes, derived once per job (SplitRows), not per unit: the switches and
  // divisions behind them ran in the unit loop, and moving them out bought 8% tok/s on
  // synth:qwen3-30b-a3b (session 7, docs/perf/megakernel.md).
  int g_log2 = 5;   // log2 of the lanes per row (RowLanesLog2)
  int slices = 0;   // slices per row of m
  int slices2 = 0;  // of m2
  int units = 0;    // row groups of 32 >> g_log2 rows
};

// Fills the derived fields of `job` from its matrices; `repeats` matrices of this shape share the
// phase (the chosen experts run one job per slot). A lane takes as many slices of a row as its
// type allows (MaxLaneSlices) while the phase keeps a unit for at least half of the grid's warps:
// fewer, fatter units leave warps idle, yet on qwen3-30b-a3b's gate/up phase (1,536 units at four
// slices a lane, 2,112 warps) four slices beat two (docs/perf/megakernel.md, session 22).
//
// Shifts only: every count here is a power of two. With divisions and a loop over lane counts, a
// job's split was a long chain of dependent instructions, on one thread before the __syncthreads()
// that publishes a phase's jobs and on every thread before the expert units; splitting three jobs
// at once instead of one after another took 1.2 µs from each projections phase (session 47).
__device__ __forceinline__ void SplitRows(MatVecJob& job, int repeats = 1) {
  job.slices = job.m.cols >> SliceShift(job.m.type);
  int lg = RowLanesLog2(job.slices, 0);  // log2 of the lanes a row
  for (int s = CeilLog2(MaxLaneSlices(job.m.type)); s > 0; --s) {
    const int l = RowLanesLog2(job.slices, s);
    const int units = ((job.m.rows + (32 >> l) - 1) >> (5 - l)) * repeats;
    if (2 * units >= GridWarps()) {
      lg = l;
      break;
    }
  }
  job.g_log2 = lg;
  job.slices2 = job.mode == OutMode::kSwiGlu ? job.m2.cols >> SliceShift(job.m2.type) : 0;
  job.units = (job.m.rows + (32 >> lg) - 1) >> (5 - lg);
}

// Q8_0 products of several step rows as 16-row tiles on the tensor cores (RunTile) instead of
// warp units, sm_80+. The dp4a loop does each step row's work again for every weight. Measured on
// the H200 (docs/perf/megakernel.md, session 33): tiles made 8-row verify steps 4-7% faster, but
// ran the 4-row steps' dense projections 5-11% slower: where tiles are the whole phase, each
// tile's load round and block-wide sum set the phase's length. So the 4-row kernels tile only a
// product that runs beside the expert units (`beside_experts`: the shared expert's down), whose
// tiles hide in the expert phase's length. Decided per kernel and call site, not stored in the
// job, so that the one-row kernels compile none of it.
__host__ __device__ constexpr bool TileKernel(int R, bool beside_experts) {
  return R > 4 || (beside_experts && R > 1);
}

// Whether the R-row kernel runs `job` as tiles; WarpUnits and Tiles count its work either way.
template <int R, bool kBesideExperts = false>
__device__ __forceinline__ bool Tiled(const MatVecJob& job) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (TileKernel(R, kBesideExperts)) {
    return job.m.type == static_cast<int>(quant::GgmlType::kQ8_0) && job.mode != OutMode::kSwiGlu &&
           __popc(job.mask) >= 2;
  }
#endif
  return false;
}
template <int R, bool kBesideExperts = false>
__device__ __forceinline__ int WarpUnits(const MatVecJob& job) {
  return Tiled<R, kBesideExperts>(job) ? 0 : job.units;
}
template <int R, bool kBesideExperts = false>
__device__ __forceinline__ int Tiles(const MatVecJob& job) {
  return Tiled<R, kBesideExperts>(job) ? (job.m.rows + kQ8TileRows - 1) / kQ8TileRows : 0;
}

// Row sums of one matrix row for the job's rows. A unit of an expert that only one row of a
// multi-row step chose (most of a verify step's experts) runs the one-row loop at that row's
// activations; its sum fills every entry, and RunUnit writes only the mask's row. The R-row loop
// spends its per-row work on every row it is compiled for: a 4-row step's expert phases took 2.7x
// a decode step's for 1.57x the bytes (docs/perf/megakernel.md, session 32).
template <int R>
__device__ __forceinline__ RowSums<R> UnitDot(int type, const uint8_t* row, int n, int lane_g,
                                              int G, const MatVecJob& job) {
  if constexpr (R > 1) {
    if (__popc(job.mask) == 1) {
      const int p = ActRow(job.mask, job.act_base, __ffs(job.mask) - 1);
      const RowSums<1> one = RowDot<1>(type, row, n, lane_g, G, *job.act, 1u, p);
      RowSums<R> all;
#pragma unroll
      for (int r = 0; r < R; ++r) all.v[r] = one.v[0];
      return all;
    }
  }
  return RowDot<R>(type, row, n, lane_g, G, *job.act, job.mask, job.act_base);
}

// Where output `row` of the job's product for step row r goes.
__device__ __forceinline__ float* OutAt(const MatVecJob& job, int r, int row) {
  return job.out + static_cast<int64_t>(ActRow(job.mask, job.out_base, r)) * job.out_stride + row;
}

// Unit u of job j (rows u*RPW .. of m), executed by the calling warp.
template <int R>
__device__ __forceinline__ void RunUnit(const MatVecJob& job, int u) {
  const int G = 1 << job.g_log2;
  const int lane_g = Lane() & (G - 1);
  const int row = (u << (5 - job.g_log2)) + (Lane() >> job.g_log2);
  const bool active = row < job.m.rows;
  const RowSums<R> acc =
      UnitDot<R>(job.m.type, active ? job.m.data + row * job.m.row_bytes : nullptr, job.slices,
                 lane_g, G, job);
  RowSums<R> acc2;
  if (job.mode == OutMode::kSwiGlu) {
    acc2 = UnitDot<R>(job.m2.type, active ? job.m2.data + row * job.m2.row_bytes : nullptr,
                      job.slices2, lane_g, G, job);
  }
  if (!active || lane_g != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!(job.mask >> r & 1u)) continue;
    float* o = OutAt(job, r, row);
    if (job.mode == OutMode::kStore) {
      *o = acc.v[r];
    } else if (job.mode == OutMode::kAdd) {
      *o += acc.v[r];
    } else {
      *o = Silu(acc.v[r]) * acc2.v[r];
    }
  }
}

// The current phase's activation sets and jobs, one copy per block in shared memory. Kept out of
// per-thread local memory on purpose: a local struct whose address is taken is spilled per
// thread. Lane 0 of warp i writes job i (SetJob), thread 0 the activation sets (PublishActs),
// before a __syncthreads(); every thread reads.
inline constexpr int kMaxPhaseJobs = 4;
static_assert(kMaxPhaseJobs <= kWarpsPerBlock, "SetJob gives each job of a phase a warp");
struct PhasePlan {
  ActSet act[2];
  MatVecJob job[kMaxPhaseJobs];
};

__device__ __forceinline__ PhasePlan& Plan() {
  __shared__ __align__(16) unsigned char storage[sizeof(PhasePlan)];
  return *reinterpret_cast<PhasePlan*>(storage);
}

// Makes activation set i visible to the block (after the caller's next __syncthreads()).
__device__ __forceinline__ const ActSet* PublishActs(int i, const ActSet& a) {
  if (threadIdx.x == 0) Plan().act[i] = a;
  return &Plan().act[i];
}

// Job i of the phase (lane 0 of warp i writes; visible after the caller's next __syncthreads()).
// A warp each, so that a phase's jobs are split at once: on thread 0, three or four jobs
// (SplitRows' loops and divisions each) ran one after another on the path to the
// __syncthreads() that publishes them.
__device__ __forceinline__ void SetJob(int i, const Matrix& m, const ActSet* act, unsigned mask,
                                       float* out, int out_stride, OutMode mode = OutMode::kStore,
                                       const Matrix* m2 = nullptr) {
  if (static_cast<int>(threadIdx.x) != 32 * i) return;
  MatVecJob& j = Plan().job[i];
  j = MatVecJob();
  j.m = m;
  if (m2 != nullptr) j.m2 = *m2;
  j.act = act;
  j.mask = mask;
  j.out = out;
  j.out_stride = out_stride;
  j.mode = mode;
  SplitRows(j);
}

// Tile t of a tiled job (rows t * kQ8TileRows ..), on every warp of the calling block: warp w
// takes the w-th share of the row's blocks, and the block adds the warps' sums in warp order.
template <int R>
__device__ inline void RunTile(const MatVecJob& job, int t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  __shared__ float tile_sum[kWarpsPerBlock][32][4];
  const Matrix& m = job.m;
  const ActSet& a = *job.act;
  const int g = Lane() >> 2, lt = Lane() & 3;
  const int row0 = t * kQ8TileRows, nb = m.cols / 32;
  // The activation row of step row r, or -1 where the step has no such row.
  auto act_row = [&](int r) {
    return r < R && (job.mask >> r & 1u) != 0 ? ActRow(job.mask, job.act_base, r) : -1;
  };
  Q8TileRows rows;
  rows.lo = m.data + static_cast<int64_t>(min(row0 + g, m.rows - 1)) * m.row_bytes;
  rows.hi = m.data + static_cast<int64_t>(min(row0 + g + 8, m.rows - 1)) * m.row_bytes;
  rows.nb = nb;
  const int pg = act_row(g), p0 = act_row(2 * lt), p1 = act_row(2 * lt + 1);
  if (pg >= 0) rows.x = ActRowOf(a, pg);
  if (p0 >= 0) rows.d0 = a.d + p0 * nb;
  if (p1 >= 0) rows.d1 = a.d + p1 * nb;
  float acc[4] = {0, 0, 0, 0};
  Q8TileDot(rows, Warp() * nb / kWarpsPerBlock, (Warp() + 1) * nb / kWarpsPerBlock, acc);
#pragma unroll
  for (int i = 0; i < 4; ++i) tile_sum[Warp()][Lane()][i] = acc[i];
  __syncthreads();
  const int o = static_cast<int>(threadIdx.x);
  if (o < kQ8TileRows * 8) {
    const int tr = o / 8, n = o % 8;  // tile row, step row
    const int lane = 4 * (tr & 7) + n / 2, slot = (tr >= 8 ? 2 : 0) + (n & 1);
    float sum = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) sum += tile_sum[w][lane][slot];
    const int row = row0 + tr;
    if (n < R && (job.mask >> n & 1u) != 0 && row < m.rows) {
      float* out = OutAt(job, n, row);
      if (job.mode == OutMode::kAdd) {
        *out += sum;
      } else {
        *out = sum;
      }
    }
  }
  __syncthreads();  // tile_sum is read before the next tile writes it
#else
  (void)job;
  (void)t;
#endif
}

// Numbers the items of jobs[0..n) in job order (job j has count(jobs[j]) of them) and calls
// run(job, the item's index in its job) for items start, start + stride, ...
template <class Count, class Run>
__device__ __forceinline__ void ForEachJobItem(const MatVecJob* jobs, int n, int start, int stride,
                                               Count count, Run run) {
  int total = 0;
  for (int j = 0; j < n; ++j) total += count(jobs[j]);
  int j = 0, first = 0;  // the job of item i, and that job's first item
  for (int i = start; i < total; i += stride) {
    while (i - first >= count(jobs[j])) first += count(jobs[j++]);
    run(jobs[j], i - first);
  }
}

// Every tile of jobs[0..n), block by block; every thread of the block calls it.
template <int R, bool kBesideExperts = false>
__device__ __forceinline__ void RunTileJobs(const MatVecJob* jobs, int n) {
  if constexpr (TileKernel(R, kBesideExperts)) {
    ForEachJobItem(
        jobs, n, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x),
        [](const MatVecJob& job) { return Tiles<R, kBesideExperts>(job); },
        [](const MatVecJob& job, int t) { RunTile<R>(job, t); });
  }
}

// Runs every unit of jobs[0..n) over all warps of the grid (tiles first, block by block).
template <int R, bool kBesideExperts = false>
__device__ __forceinline__ void RunJobs(const MatVecJob* jobs, int n) {
  RunTileJobs<R, kBesideExperts>(jobs, n);
  ForEachJobItem(
      jobs, n, GlobalWarp(), GridWarps(),
      [](const MatVecJob& job) { return WarpUnits<R, kBesideExperts>(job); },
      [](const MatVecJob& job, int u) { RunUnit<R>(job, u); });
}

}  // namespace tandem::megakernel
