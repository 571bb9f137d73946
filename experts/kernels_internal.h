// Internal to experts/: the per-ISA kernel tables, each defined in its own file compiled with that
// ISA's -m flags. kernels.cc calls the SIMD ones only after a cpuid check.
#pragma once

#include "experts/kernels.h"
#include "runtime/quant/q8_0.h"
#include "runtime/quant/q8_k.h"

namespace tandem::experts {

DotFn GetScalarKernel(quant::GgmlType type);
DotFn GetAvx2Kernel(quant::GgmlType type);
DotFn GetAvx512Kernel(quant::GgmlType type);
// The rows8-layout kernels (rows8.h) for `type`, nullptr where there is none (all but Q4_K, Q3_K).
DotFn GetAvx512Rows8Kernel(quant::GgmlType type);
DotFn GetAvx2Rows8Kernel(quant::GgmlType type);

// The activation quantisers with AVX2, writing exactly what quant::QuantizeBlocks writes (a Q8_K
// block holding a NaN is handed to the scalar code). The scalar ones call libm per element
// (nearbyintf; fmaxf and roundf for Q8_0): a 2048-element row takes 9 µs (Q8_K) and 12 µs (Q8_0) on
// the 2-core VM, ~15 µs (Q8_K) on the 16-core H200 host, and every gate/up item of a layer waits
// for it (docs/perf/experts.md, session 16); these take 0.5 and 1.0 µs on the VM.
void QuantizeQ8KAvx2(const float* x, quant::BlockQ8K* out, int64_t n_blocks);
void QuantizeQ8_0Avx2(const float* x, quant::BlockQ8_0* out, int64_t n_blocks);

// SiluMul (kernels.h) per ISA.
void SiluMulScalar(float* h, const float* u, int64_t n);
void SiluMulAvx2(float* h, const float* u, int64_t n);

}  // namespace tandem::experts
