// CUDA runtime errors as absl::Status, with the file, line and call that failed. Host-only.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::megakernel {

inline absl::Status CudaStatus(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call, ": ", cudaGetErrorName(e),
                                          " (", cudaGetErrorString(e), ")"));
}

}  // namespace tandem::megakernel

#define TANDEM_CUDA_RETURN_IF_ERROR(call)                                                 \
  do {                                                                                    \
    ::absl::Status tandem_cuda_status_ =                                                  \
        ::tandem::megakernel::CudaStatus((call), #call, __FILE__, __LINE__);              \
    if (!tandem_cuda_status_.ok()) return tandem_cuda_status_;                            \
  } while (0)
