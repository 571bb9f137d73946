// Instruction-fetch probe for the layer-half kernels' code-size question (docs/perf/megakernel.md,
// session 7): how long a launch of straight-line code takes when its instructions are still cached
// on the multiprocessors (the same kernel launched again) against when another kernel's code ran
// in between (two kernels alternating). Each kernel runs one warp per multiprocessor through S KB
// of independent FMAs; the knee of the alternating time over S shows the instruction cache a
// multiprocessor keeps between launches, its slope the cost of fetching code cold.
//
// Build and run (device machine, or any CUDA machine):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o icache_probe tools/device/icache_probe.cu && ./icache_probe
// Prints one line per size: µs per launch repeated, alternating, and their difference per KB.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {

// N FMAs over eight independent accumulators (16 bytes of SASS each), so that issue, not
// dependences, sets the warm time. `salt` makes kernels A and B different code.
template <int N, int Salt>
__global__ void StraightLine(float* out, float a) {
  float x[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) x[k] = static_cast<float>(threadIdx.x + k);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    asm volatile("fma.rn.f32 %0, %0, %1, %2;"
                 : "+f"(x[i & 7])
                 : "f"(a), "f"(static_cast<float>(i * 7 + Salt)));
  }
  float s = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) s += x[k];
  if (s == 123.456f) out[threadIdx.x] = s;  // never true; keeps the chain alive
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Mean µs per launch over `reps` launches of k0, k1, k0, k1, ... (k1 == k0: repeated).
float TimeLaunches(void (*k0)(float*, float), void (*k1)(float*, float), int grid, float* out,
                   int reps) {
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 10; ++i) (i & 1 ? k1 : k0)<<<grid, 32>>>(out, 1.0001f);
  Check(cudaEventRecord(start), "record");
  for (int i = 0; i < reps; ++i) (i & 1 ? k1 : k0)<<<grid, 32>>>(out, 1.0001f);
  Check(cudaEventRecord(stop), "record");
  Check(cudaEventSynchronize(stop), "sync");
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 1000.0f * ms / static_cast<float>(reps);
}

template <int N>
void Probe(int grid, float* out) {
  const float kb = N * 16.0f / 1024.0f;
  const float same = TimeLaunches(StraightLine<N, 1>, StraightLine<N, 1>, grid, out, 400);
  const float alternating = TimeLaunches(StraightLine<N, 1>, StraightLine<N, 2>, grid, out, 400);
  std::printf("%6.0f KB of code: repeated %7.2f us, alternating %7.2f us, cold cost %6.3f us/KB\n",
              kb, same, alternating, (alternating - same) / kb);
}

}  // namespace

int main() {
  int device = 0, sms = 0;
  Check(cudaGetDevice(&device), "device");
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "attribute");
  float* out = nullptr;
  Check(cudaMalloc(&out, 4096), "malloc");
  std::printf("one warp on each of %d multiprocessors; two kernels of S KB each\n", sms);
  Probe<512>(sms, out);
  Probe<1024>(sms, out);
  Probe<2048>(sms, out);
  Probe<3072>(sms, out);
  Probe<4096>(sms, out);
  Probe<5120>(sms, out);
  Probe<6144>(sms, out);
  Probe<8192>(sms, out);
  Check(cudaGetLastError(), "launch");
  return 0;
}
