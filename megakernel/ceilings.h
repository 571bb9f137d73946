// Ceilings of the card measured in the same run as a benchmark: device-to-device copy bandwidth
// (bytes read plus bytes written per second). Host-only declarations.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::megakernel {

// Copies `bytes` between two device buffers `reps` times after a warm-up and returns the median
// rate in GB/s, counting each copy as 2 * bytes moved.
cudaError_t MeasureHbmCopyGbps(uint64_t bytes, int reps, double* gbps);

}  // namespace tandem::megakernel
