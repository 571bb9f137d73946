#include "megakernel/ceilings.h"

#include <algorithm>
#include <vector>

namespace tandem::megakernel {

cudaError_t MeasureHbmCopyGbps(uint64_t bytes, int reps, double* gbps) {
  void *a = nullptr, *b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<float> ms;
  cudaError_t e = cudaMalloc(&a, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&b, bytes);
  if (e == cudaSuccess) e = cudaMemset(a, 1, bytes);
  if (e == cudaSuccess) e = cudaEventCreate(&start);
  if (e == cudaSuccess) e = cudaEventCreate(&stop);
  if (e == cudaSuccess) e = cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
  for (int i = 0; i < reps && e == cudaSuccess; ++i) {
    cudaEventRecord(start);
    e = cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    if (e == cudaSuccess) e = cudaEventSynchronize(stop);
    float t = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  if (e == cudaSuccess) {
    std::sort(ms.begin(), ms.end());
    *gbps = 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3) / 1e9;
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return e;
}

}  // namespace tandem::megakernel
