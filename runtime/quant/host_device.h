// TANDEM_HD marks functions that compile for both the host and CUDA devices.
// Headers that use it must stay C++17 (they are included from .cu files).
#pragma once

// Internal linkage (static) on purpose: SIMD kernel files are compiled with -mavx2/-mavx512 flags,
// and an ordinary inline function would be one weak symbol shared by every object file, so the
// linker could hand an AVX-512 copy to code that runs on CPUs without it. Only namespace-scope
// functions use this macro.
#if defined(__CUDACC__)
#define TANDEM_HD static __host__ __device__ __forceinline__
#else
#define TANDEM_HD static inline
#endif
