#include "megakernel/ceilings.h"

#include <algorithm>
#include <vector>

#include "megakernel/codecs.h"
#include "megakernel/launch.h"
#include "runtime/base/stats.h"

namespace tandem::megakernel {
cudaError_t MeasureHbmCopyGbps(uint64_t bytes, int reps, double* gbps) {
  void *a = nullptr, *b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<double> ms;
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
  if (e == cudaSuccess) *gbps = 2.0 * static_cast<double>(bytes) / (Median(ms) * 1e-3) / 1e9;
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  return e;
}

namespace {

// Milliseconds of `launches` back-to-back probe launches of n_syncs barriers each.
cudaError_t TimeProbe(int grid, int n_syncs, int launches, cudaEvent_t start, cudaEvent_t stop,
                      float* ms) {
  cudaError_t e = cudaEventRecord(start);
  for (int i = 0; i < launches && e == cudaSuccess; ++i) e = LaunchBarrierProbe(grid, n_syncs, nullptr);
  if (e == cudaSuccess) e = cudaEventRecord(stop);
  if (e == cudaSuccess) e = cudaEventSynchronize(stop);
  if (e == cudaSuccess) e = cudaEventElapsedTime(ms, start, stop);
  return e;
}

}  // namespace

cudaError_t MeasurePhaseCostsUs(int reps, double* launch_us, double* barrier_us) {
  constexpr int kLaunches = 200, kSyncs = 2000;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaEvent_t start = nullptr, stop = nullptr;
  if (e == cudaSuccess) e = cudaEventCreate(&start);
  if (e == cudaSuccess) e = cudaEventCreate(&stop);
  std::vector<double> launch, barrier;
  float ms = 0;
  if (e == cudaSuccess) e = TimeProbe(sms, kSyncs, 1, start, stop, &ms);  // warm-up, module load
  for (int i = 0; i < reps && e == cudaSuccess; ++i) {
    float empty = 0, synced = 0;
    e = TimeProbe(sms, 0, kLaunches, start, stop, &empty);
    if (e == cudaSuccess) e = TimeProbe(sms, kSyncs, 1, start, stop, &synced);
    launch.push_back(1e3 * empty / kLaunches);
    barrier.push_back((1e3 * synced - 1e3 * empty / kLaunches) / kSyncs);
  }
  if (e == cudaSuccess) {
    *launch_us = Median(launch);
    *barrier_us = Median(barrier);
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  return e;
}

cudaError_t MeasureMatVecGbps(int type, int cols, int64_t bytes, int n_rows, int reps, double* gbps) {
  constexpr int64_t kBuffer = int64_t{1} << 30, kSlack = 256;
  const int64_t row_bytes = DeviceRowBytes(type, cols);
  const int rows = static_cast<int>(std::max<int64_t>(1, bytes / row_bytes));
  const int64_t matrix_bytes = rows * row_bytes;
  const int64_t windows = std::max<int64_t>(1, kBuffer / matrix_bytes);
  uint8_t* weights = nullptr;
  float *x = nullptr, *out = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaError_t e = cudaMalloc(&weights, kBuffer + kSlack);
  if (e == cudaSuccess) e = cudaMemset(weights, 0x11, kBuffer + kSlack);
  if (e == cudaSuccess) e = cudaMalloc(&x, sizeof(float) * kMaxRows * cols);
  if (e == cudaSuccess) e = cudaMemset(x, 0, sizeof(float) * kMaxRows * cols);
  if (e == cudaSuccess) e = cudaMalloc(&out, sizeof(float) * kMaxRows * rows);
  if (e == cudaSuccess) e = cudaEventCreate(&start);
  if (e == cudaSuccess) e = cudaEventCreate(&stop);
  std::vector<double> rates;
  for (int i = -1; i < reps && e == cudaSuccess; ++i) {  // i = -1: warm-up
    Matrix m;
    m.data = weights + ((i + 1) % windows) * matrix_bytes;
    m.type = type;
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = row_bytes;
    e = cudaEventRecord(start);
    if (e == cudaSuccess) e = LaunchMatVec(m, x, n_rows, out, nullptr);
    if (e == cudaSuccess) e = cudaEventRecord(stop);
    if (e == cudaSuccess) e = cudaEventSynchronize(stop);
    float ms = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, start, stop);
    if (e == cudaSuccess && i >= 0) rates.push_back(static_cast<double>(matrix_bytes) / (ms * 1e-3) / 1e9);
  }
  if (e == cudaSuccess) *gbps = Median(rates);
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaFree(weights);
  cudaFree(x);
  cudaFree(out);
  return e;
}

}  // namespace tandem::megakernel
