// Chain probe for issue #5's bandwidth target (docs/perf/megakernel.md, session 25): how close to
// the card's copy bandwidth a persistent cooperative kernel can run a chain of dependent,
// phase-sized matrix-vector products, each behind a grid barrier and a prologue that quantises its
// input, as a layer half does. It asks one question of the megakernel's design: does issuing a
// phase's weight loads *before* its grid barrier (weights do not depend on the activations) hide
// the round trip that the megakernel's phases pay after every barrier?
//
// Each product is y = W x with int8 weights (one fp32 scale a row; 1 byte a weight) and int8
// activations (one scale per 32 values, as Q8_0 activations), dp4a, fp32 accumulation. Product p
// reads y of product p - 1 after a grid barrier, quantises it into shared memory (every block, as
// the megakernel's prologues do), and writes its own y. Weights of successive products are
// distinct, so the chain streams from HBM (far more than L2). Index arithmetic is shifts: with
// divisions by the runtime chunk count, an empty product took 2.2 us. Modes:
//   stream      — one plain launch reads every product's weights, no barrier, no dependences: the
//                 access pattern's own ceiling;
//   after       — warp w owns rows w, w + warps, ...; a lane loads 16-byte chunks lane,
//                 lane + 32, ... of each (at most 16 chunks, 64 registers) after the barrier and
//                 the prologue, as the megakernel's phases do;
//   before      — as after, but the next product's loads are issued before the barrier;
//   before, warp 0 after — as before, except that warp 0 of each block (whose thread 0 makes the
//                 block's release arrive at the grid barrier) loads after the barrier: does the
//                 barrier's release wait for the loads other warps still have in flight?
//   after / before, relaxed polls — a grid barrier with a release arrive, relaxed polls and one
//                 acquire fence once the count is seen: valid, and no acquire (L1 invalidation)
//                 per poll as cooperative groups' has;
//   before, relaxed barrier — as before, with a grid barrier whose arrive and poll are relaxed
//                 (no release, no acquire): wrong as a program (y may be read stale), a timing
//                 bound only: what the barrier's memory ordering costs with loads in flight;
//   no-prologue — as after without the prologue (x stays as it was): barrier and weights alone;
//   bulk        — each block's contiguous rows of the next product are copied into shared memory
//                 by cp.async.bulk (16 KB, or 4 KB, an instruction) before the barrier, two
//                 stages of 96 KB; a copy holds no warp while in flight;
//   bulk, last warp — as bulk, with the copies issued by a thread of the block's last warp
//                 instead of thread 0, which arrives at the grid barrier;
//   bulk stream — the bulk copies alone: no barrier, no prologue.
// A shape with no rows measures the barrier and the prologue alone, the chain's latency floor. The
// device-to-device copy of the same run (read + write counted) is the reference bandwidth.
//
// Build and run (device machine, or any CUDA machine with cooperative launch):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o chain_probe tools/device/chain_probe.cu && ./chain_probe
// Prints one line per (shape, mode): µs per product, GB/s of weights, and the ratio to the copy.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxChunks = 16;  // 16-byte weight chunks a lane holds
constexpr int kMaxCols = 8192;
constexpr int kProducts = 96;  // e.g. 48 layers x 2 large products

struct Product {
  const int4* w;         // rows x cols int8, row-major
  const float* w_scale;  // one per row
  int rows, cols;
};

// Passed as a __grid_constant__ parameter, so a product's description costs no round trip after
// the barrier (the megakernel keeps its phase jobs in kernel parameters and shared memory too).
struct ChainArgs {
  Product products[kProducts];
  int n_products;
  float* y[2];        // ping-pong outputs; y[1] holds x0 on entry
  unsigned* counter;  // GridSync's, zeroed before each launch
};

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// A grid barrier as cooperative groups' (one arrive a block by thread 0, a counter the launch
// zeroes). kOrder 0: release arrive, acquire polls (as cooperative groups); 1: release arrive,
// relaxed polls, one acquire fence once the count is seen (a valid barrier too); 2: relaxed
// arrive and polls (not a valid barrier: a timing bound only).
template <int kOrder>
__device__ __forceinline__ void GridSync(unsigned* counter, unsigned target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned seen;
    if (kOrder == 1) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      do {
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      } while (seen < target);
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
    } else if (kOrder == 0) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      } while (seen < target);
    } else {
      asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
      do {
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      } while (seen < target);
    }
  }
  __syncthreads();
}

__device__ __forceinline__ int4 LoadStream(const int4* p) {
  int4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.s32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Issues every weight load of this warp's rows of product p into w (slot s: chunk s % per_row of
// the warp's row s / per_row). Loads only; nothing waits on them here. Slots are compile-time
// indices, so w stays in registers.
__device__ __forceinline__ void IssueWeights(const Product& P, int warp, int warps, int lane,
                                             int4 (&w)[kMaxChunks]) {
  const int shift = __ffs(P.cols / 512) - 1;  // log2 of the chunks a lane holds per row
  const int rows_here = kMaxChunks >> shift;
#pragma unroll
  for (int s = 0; s < kMaxChunks; ++s) {
    const int rr = s >> shift, k = s & ((1 << shift) - 1);
    const int row = warp + rr * warps;
    if (rr < rows_here && row < P.rows) {
      w[s] = LoadStream(P.w + static_cast<int64_t>(row) * (P.cols / 16) + lane + 32 * k);
    }
  }
}

// x (cols floats) -> int8 in shared memory, a scale per 32 values, in one round trip: every thread
// issues its float4 loads before it uses any (as the megakernel's NormRows / QuantizeRows do),
// then eight lanes hold one 32-value block.
__device__ __forceinline__ void QuantizeInput(const float* x, int cols, int8_t* xq, float* xs) {
  constexpr int kPerThread = kMaxCols / 4 / kThreads;
  float4 v[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int q = threadIdx.x + i * kThreads;  // float4 index
    v[i] = 4 * q < cols ? __ldcg(reinterpret_cast<const float4*>(x) + q) : make_float4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int q = threadIdx.x + i * kThreads;
    if (i * kThreads * 4 >= cols) break;  // block-uniform: cols is a multiple of 4 * kThreads
    float m = fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float inv = m > 0 ? 127.0f / m : 0.0f;
    char4 c;
    c.x = static_cast<signed char>(__float2int_rn(v[i].x * inv));
    c.y = static_cast<signed char>(__float2int_rn(v[i].y * inv));
    c.z = static_cast<signed char>(__float2int_rn(v[i].z * inv));
    c.w = static_cast<signed char>(__float2int_rn(v[i].w * inv));
    reinterpret_cast<char4*>(xq)[q] = c;
    if ((threadIdx.x & 7) == 0) xs[q / 8] = m / 127.0f;
  }
}

// Barrier: 0 cooperative groups' grid sync, 1 + k GridSync<k>.
template <bool kBefore, bool kPrologue, bool kWarp0After = false, int kBarrier = 0>
__global__ void __launch_bounds__(kThreads, 1) ChainKernel(const __grid_constant__ ChainArgs a) {
  __shared__ __align__(16) int8_t xq[kMaxCols];
  __shared__ float xs[kMaxCols / 32];
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * kWarps;
  const int warp = blockIdx.x * kWarps + threadIdx.x / 32;
  // Whether this warp issues the next product's loads before the barrier (warp-uniform).
  const bool early = kBefore && !(kWarp0After && threadIdx.x < 32);
  int4 w[kMaxChunks];
  if (early) IssueWeights(a.products[0], warp, warps, lane, w);
  for (int p = 0; p < a.n_products; ++p) {
    const Product& P = a.products[p];
    if (p > 0) {
      if (kBarrier == 0) cg::this_grid().sync();
      if (kBarrier > 0) GridSync<kBarrier - 1>(a.counter, p * gridDim.x);
    }
    if (kPrologue) QuantizeInput(a.y[(p + 1) & 1], P.cols, xq, xs);
    __syncthreads();
    if (!early) IssueWeights(P, warp, warps, lane, w);
    const int shift = __ffs(P.cols / 512) - 1;  // shifts, not divisions: see IssueWeights
    const int per_row = 1 << shift;
    const int rows_here = kMaxChunks >> shift;
    float* y = a.y[p & 1];
    float acc = 0;
#pragma unroll
    for (int s = 0; s < kMaxChunks; ++s) {
      const int rr = s >> shift, k = s & (per_row - 1);
      const int row = warp + rr * warps;
      if (rr < rows_here && row < P.rows) {  // warp-uniform
        const int c = lane + 32 * k;         // 16-byte chunk of the row: values 16c .. 16c + 15
        const int4 xv = *reinterpret_cast<const int4*>(xq + 16 * c);
        int dot = __dp4a(w[s].x, xv.x, 0);
        dot = __dp4a(w[s].y, xv.y, dot);
        dot = __dp4a(w[s].z, xv.z, dot);
        dot = __dp4a(w[s].w, xv.w, dot);
        acc += static_cast<float>(dot) * xs[c / 2];
        if (k == per_row - 1) {
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
          if (lane == 0) y[row] = acc * P.w_scale[row];
          acc = 0;
        }
      }
    }
    if (early && p + 1 < a.n_products) IssueWeights(a.products[p + 1], warp, warps, lane, w);
    __syncthreads();  // xq is rewritten by the next prologue
  }
}

// --- bulk mode: each block's rows of the next product copied into shared memory by the copy
// engine (cp.async.bulk, sm_90), issued before the grid barrier. Unlike loads into registers, a
// bulk copy does not hold a warp while it is in flight. Block b owns a contiguous row range of
// each product (its bytes one copy), two stages of kStageBytes, one mbarrier per stage.
constexpr int kStageBytes = 96 * 1024;

__device__ __forceinline__ void BlockRows(const Product& P, int* r0, int* r1) {
  const int per_block = (P.rows + gridDim.x - 1) / gridDim.x;
  *r0 = min(P.rows, static_cast<int>(blockIdx.x) * per_block);
  *r1 = min(P.rows, *r0 + per_block);
}

// Thread 0: copies this block's rows of P into `stage`, completing on `bar`, kCopyBytes a
// cp.async.bulk instruction.
template <int kCopyBytes>
__device__ __forceinline__ void IssueBulk(const Product& P, uint8_t* stage, uint64_t* bar) {
  int r0, r1;
  BlockRows(P, &r0, &r1);
  const uint32_t bytes = static_cast<uint32_t>(r1 - r0) * P.cols;
  const uint32_t bar_addr = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_addr), "r"(bytes)
               : "memory");
  const uint8_t* src = reinterpret_cast<const uint8_t*>(P.w) + static_cast<int64_t>(r0) * P.cols;
  for (uint32_t off = 0; off < bytes; off += kCopyBytes) {
    const uint32_t n = min(bytes - off, static_cast<uint32_t>(kCopyBytes));
    const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(stage + off));
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(dst),
        "l"(src + off), "r"(n), "r"(bar_addr)
        : "memory");
  }
}

__device__ __forceinline__ void WaitBulk(uint64_t* bar, uint32_t parity) {
  const uint32_t bar_addr = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, "
        "p; }"
        : "=r"(done)
        : "r"(bar_addr), "r"(parity)
        : "memory");
  }
}

// kChain false: no barrier and no prologue (the copies' own throughput, x stays as it was).
// kIssuer: the thread that issues the copies (0 arrives at the grid barrier too).
template <int kCopyBytes, bool kChain, int kIssuer = 0>
__global__ void __launch_bounds__(kThreads, 1)
    BulkChainKernel(const __grid_constant__ ChainArgs a) {
  extern __shared__ __align__(128) uint8_t stages[];  // 2 x kStageBytes
  __shared__ __align__(16) int8_t xq[kMaxCols];
  __shared__ float xs[kMaxCols / 32];
  __shared__ __align__(8) uint64_t bars[2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(
          static_cast<uint32_t>(__cvta_generic_to_shared(&bars[i]))));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == kIssuer) IssueBulk<kCopyBytes>(a.products[0], stages, &bars[0]);
  for (int p = 0; p < a.n_products; ++p) {
    const Product& P = a.products[p];
    // Product p + 1's copy goes out before product p's barrier: its stage was last read by
    // product p - 1, which every warp of this block finished (the __syncthreads() below).
    if (threadIdx.x == kIssuer && p + 1 < a.n_products) {
      IssueBulk<kCopyBytes>(a.products[p + 1], stages + ((p + 1) & 1) * kStageBytes,
                            &bars[(p + 1) & 1]);
    }
    if (kChain && p > 0) cg::this_grid().sync();
    if (kChain) QuantizeInput(a.y[(p + 1) & 1], P.cols, xq, xs);
    __syncthreads();
    WaitBulk(&bars[p & 1], (p >> 1) & 1);
    const uint8_t* stage = stages + (p & 1) * kStageBytes;
    int r0, r1;
    BlockRows(P, &r0, &r1);
    const int per_row = P.cols / 512;
    float* y = a.y[p & 1];
    for (int row = r0 + warp; row < r1; row += kWarps) {
      const int4* wrow =
          reinterpret_cast<const int4*>(stage + static_cast<int64_t>(row - r0) * P.cols);
      float acc = 0;
#pragma unroll 4
      for (int k = 0; k < per_row; ++k) {
        const int c = lane + 32 * k;
        const int4 wv = wrow[c];
        const int4 xv = *reinterpret_cast<const int4*>(xq + 16 * c);
        int dot = __dp4a(wv.x, xv.x, 0);
        dot = __dp4a(wv.y, xv.y, dot);
        dot = __dp4a(wv.z, xv.z, dot);
        dot = __dp4a(wv.w, xv.w, dot);
        acc += static_cast<float>(dot) * xs[c / 2];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) y[row] = acc * P.w_scale[row];
    }
    __syncthreads();  // xq and this stage are rewritten next
  }
}

// Reads every weight of the chain with the same per-lane loads, no dependences: the access
// pattern's own ceiling. Each warp folds what it read into one value so the loads stay live.
__global__ void __launch_bounds__(kThreads, 1)
    StreamKernel(const __grid_constant__ ChainArgs a, int* sink) {
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * kWarps;
  const int warp = blockIdx.x * kWarps + threadIdx.x / 32;
  int fold = 0;
  for (int p = 0; p < a.n_products; ++p) {
    int4 w[kMaxChunks];
    IssueWeights(a.products[p], warp, warps, lane, w);
    const int shift = __ffs(a.products[p].cols / 512) - 1;
#pragma unroll
    for (int s = 0; s < kMaxChunks; ++s) {
      const int row = warp + (s >> shift) * warps;
      if ((s >> shift) < (kMaxChunks >> shift) && row < a.products[p].rows) {
        fold ^= w[s].x ^ w[s].y ^ w[s].z ^ w[s].w;
      }
    }
  }
  if (fold == 0x7fffffff) sink[0] = fold;  // practically never; keeps the loads
}

struct Shape {
  const char* name;
  std::vector<int> rows, cols;  // cycled over the chain's products
};

float MedianMs(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Launch>
float TimeMs(Launch launch, int reps) {
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  launch();
  Check(cudaDeviceSynchronize(), "warm-up");
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    Check(cudaEventRecord(start), "record");
    launch();
    Check(cudaEventRecord(stop), "record");
    Check(cudaEventSynchronize(stop), "sync");
    float t = 0;
    Check(cudaEventElapsedTime(&t, start, stop), "elapsed");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return MedianMs(ms);
}

float CopyGbps() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  Check(cudaMalloc(&a, bytes), "malloc copy");
  Check(cudaMalloc(&b, bytes), "malloc copy");
  Check(cudaMemset(a, 1, bytes), "memset");
  const float ms =
      TimeMs([&] { Check(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "copy"); }, 9);
  cudaFree(a);
  cudaFree(b);
  return 2.0f * static_cast<float>(bytes) / (ms * 1e6f);
}

void RunShape(const Shape& shape, int grid, float copy_gbps) {
  ChainArgs args{};
  args.n_products = kProducts;
  Product* host = args.products;
  std::vector<void*> owned;
  double weight_bytes = 0;
  int max_rows = 0;
  for (int p = 0; p < kProducts; ++p) {
    const int rows = shape.rows[p % shape.rows.size()], cols = shape.cols[p % shape.cols.size()];
    const size_t bytes = static_cast<size_t>(rows) * cols;
    if (cols % (4 * kThreads) != 0 || cols > kMaxCols ||
        rows > (kMaxChunks / (cols / 512)) * grid * kWarps) {
      std::fprintf(stderr, "%s: %d x %d does not fit %d chunks a lane\n", shape.name, rows, cols,
                   kMaxChunks);
      std::exit(1);
    }
    int4* w = nullptr;
    float* s = nullptr;
    Check(cudaMalloc(&w, std::max<size_t>(bytes, 16)), "malloc weights");
    Check(cudaMalloc(&s, std::max(rows, 1) * sizeof(float)), "malloc scales");
    Check(cudaMemset(w, 0x11 + p, bytes), "memset weights");
    std::vector<float> scale(std::max(rows, 1), 1.0f / (127.0f * cols));
    Check(cudaMemcpy(s, scale.data(), scale.size() * sizeof(float), cudaMemcpyHostToDevice),
          "scales");
    owned.push_back(w);
    owned.push_back(s);
    host[p] = Product{w, s, rows, cols};
    weight_bytes += static_cast<double>(bytes);
    max_rows = std::max({max_rows, rows, cols});
  }
  for (float*& y : args.y) {
    Check(cudaMalloc(&y, max_rows * sizeof(float)), "malloc y");
    std::vector<float> x0(max_rows);
    for (int i = 0; i < max_rows; ++i) x0[i] = static_cast<float>((i * 37) % 101 - 50) / 50.0f;
    Check(cudaMemcpy(y, x0.data(), max_rows * sizeof(float), cudaMemcpyHostToDevice), "x0");
  }
  int* sink = nullptr;
  Check(cudaMalloc(&sink, sizeof(int)), "malloc sink");

  Check(cudaMalloc(&args.counter, sizeof(unsigned)), "malloc counter");
  auto chain = [&](auto kernel) {
    Check(cudaMemsetAsync(args.counter, 0, sizeof(unsigned)), "zero counter");
    void* params[] = {&args};
    Check(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel), grid, kThreads, params),
          "cooperative launch");
  };
  const float stream_ms = TimeMs([&] { StreamKernel<<<grid, kThreads>>>(args, sink); }, 9);
  const float after_ms = TimeMs([&] { chain(ChainKernel<false, true>); }, 9);
  const float before_ms = TimeMs([&] { chain(ChainKernel<true, true>); }, 9);
  const float bare_ms = TimeMs([&] { chain(ChainKernel<false, false>); }, 9);
  const float before_w0_ms = TimeMs([&] { chain(ChainKernel<true, true, true>); }, 9);
  const float after_own_ms = TimeMs([&] { chain(ChainKernel<false, true, false, 1>); }, 9);
  const float before_own_ms = TimeMs([&] { chain(ChainKernel<true, true, false, 1>); }, 9);
  const float after_polls_ms = TimeMs([&] { chain(ChainKernel<false, true, false, 2>); }, 9);
  const float before_polls_ms = TimeMs([&] { chain(ChainKernel<true, true, false, 2>); }, 9);
  const float after_relaxed_ms = TimeMs([&] { chain(ChainKernel<false, true, false, 3>); }, 9);
  const float before_relaxed_ms = TimeMs([&] { chain(ChainKernel<true, true, false, 3>); }, 9);
  const float bare_polls_ms = TimeMs([&] { chain(ChainKernel<false, false, false, 2>); }, 9);
  int max_block_bytes = 0;
  for (int p = 0; p < kProducts; ++p) {
    const int per_block = (host[p].rows + grid - 1) / grid;
    max_block_bytes = std::max(max_block_bytes, per_block * host[p].cols);
  }
  auto bulk = [&](auto kernel) {
    if (max_block_bytes > kStageBytes) return -1.0f;
    const int smem = 2 * kStageBytes;
    Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
          "bulk smem");
    return TimeMs(
        [&] {
          void* params[] = {&args};
          Check(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel), grid, kThreads, params,
                                            smem),
                "bulk cooperative launch");
        },
        9);
  };
  const float bulk_ms = bulk(BulkChainKernel<16384, true>);
  const float bulk4_ms = bulk(BulkChainKernel<4096, true>);
  const float bulk_last_ms = bulk(BulkChainKernel<16384, true, kThreads - 32>);
  const float bulk_stream_ms = bulk(BulkChainKernel<16384, false>);
  const float bulk4_stream_ms = bulk(BulkChainKernel<4096, false>);
  Check(cudaGetLastError(), "launch");

  const double gb = weight_bytes / 1e9;
  auto report = [&](const char* mode, float ms) {
    const double gbps = gb / (ms * 1e-3);
    if (gb == 0) {
      std::printf("%-34s %-24s %8.2f us/product\n", shape.name, mode, 1000.0 * ms / kProducts);
      return;
    }
    std::printf("%-34s %-24s %8.2f us/product %8.1f GB/s %6.3f of copy\n", shape.name, mode,
                1000.0 * ms / kProducts, gbps, gbps / copy_gbps);
  };
  report("stream", stream_ms);
  report("after", after_ms);
  report("before", before_ms);
  report("no-prologue", bare_ms);
  report("before, warp 0 after", before_w0_ms);
  report("after, own barrier", after_own_ms);
  report("before, own barrier", before_own_ms);
  report("after, relaxed polls", after_polls_ms);
  report("before, relaxed polls", before_polls_ms);
  report("no-prologue, relaxed polls", bare_polls_ms);
  report("after, relaxed barrier", after_relaxed_ms);
  report("before, relaxed barrier", before_relaxed_ms);
  if (bulk_ms >= 0) {
    report("bulk", bulk_ms);
    report("bulk 4K", bulk4_ms);
    report("bulk, last warp", bulk_last_ms);
    report("bulk stream", bulk_stream_ms);
    report("bulk 4K stream", bulk4_stream_ms);
  }

  for (void* p : owned) cudaFree(p);
  cudaFree(args.y[0]);
  cudaFree(args.y[1]);
  cudaFree(sink);
  cudaFree(args.counter);
}

}  // namespace

int main() {
  int device = 0, sms = 0, per_sm = 0;
  Check(cudaGetDevice(&device), "device");
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "attribute");
  Check(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ChainKernel<true, true>, kThreads, 0),
      "occupancy");
  if (per_sm < 1) {
    std::fprintf(stderr, "ChainKernel does not fit a multiprocessor\n");
    return 1;
  }
  const int grid = sms;
  const float copy_gbps = CopyGbps();
  std::printf("%d blocks of %d threads; %d products a chain; device copy %.0f GB/s\n", grid,
              kThreads, kProducts, copy_gbps);
  const int warps = grid * kWarps;
  // Rows per product that give every warp one (or two, four) rows.
  const std::vector<Shape> shapes = {
      {"barrier+prologue only (rows 0)", {0}, {2048}},
      {"2048 -> 2112 rows (4.3 MB)", {warps}, {2048}},
      {"2048 -> 4096, 4096 -> 2048 (8.4 MB)", {4096, 2048}, {2048, 4096}},
      {"2048 -> 4224 rows (8.7 MB)", {2 * warps}, {2048}},
      {"2048 -> 8448 rows (17.3 MB)", {4 * warps}, {2048}},
      {"4096 -> 4224 rows (17.3 MB)", {2 * warps}, {4096}},
      {"8192 -> 2112 rows (17.3 MB)", {warps}, {8192}},
  };
  for (const Shape& s : shapes) RunShape(s, grid, copy_gbps);
  return 0;
}
