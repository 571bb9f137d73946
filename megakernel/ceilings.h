// Ceilings of the card measured in the same run as a benchmark: device-to-device copy bandwidth
// (bytes read plus bytes written per second), the fixed costs of a phase (an empty cooperative
// launch, a grid barrier), and the codec loop's streaming rate on one matrix-vector product.
// Host-only declarations.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::megakernel {

// Copies `bytes` between two device buffers `reps` times after a warm-up and returns the median
// rate in GB/s, counting each copy as 2 * bytes moved.
cudaError_t MeasureHbmCopyGbps(uint64_t bytes, int reps, double* gbps);

// With one kBlockThreads block per multiprocessor (the layer kernels' grid): `launch_us`, the
// time per back-to-back cooperative launch of an empty kernel, and `barrier_us`, the time per grid
// barrier inside one launch (2,000 barriers, minus an empty launch). Medians of `reps`.
cudaError_t MeasurePhaseCostsUs(int reps, double* launch_us, double* barrier_us);

// The layer kernels' activation quantisation and codec loop (LaunchMatVec) on one `type` matrix
// of `cols` columns and about `bytes` bytes, for n_rows (1..8) activation rows: weight bytes per
// second (GB/s), median of `reps` launches. Each launch reads a different window of a 1 GiB
// buffer, so that no launch finds its weights in L2. The buffer holds a repeated byte pattern
// (finite scales); the rate does not depend on the values.
cudaError_t MeasureMatVecGbps(int type, int cols, int64_t bytes, int n_rows, int reps, double* gbps);

}  // namespace tandem::megakernel
