// TANDEM_HD marks functions that compile for both the host and CUDA devices.
// Headers that use it must stay C++17 (they are included from .cu files).
#pragma once

#if defined(__CUDACC__)
#define TANDEM_HD __host__ __device__ __forceinline__
#else
#define TANDEM_HD inline
#endif
