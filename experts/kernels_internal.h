// Internal to experts/: the per-ISA kernel tables, each defined in its own file compiled with that
// ISA's -m flags. kernels.cc calls the SIMD ones only after a cpuid check.
#pragma once

#include "experts/kernels.h"
#include "runtime/quant/q8_k.h"

namespace tandem::experts {

DotFn GetScalarKernel(quant::GgmlType type);
DotFn GetAvx2Kernel(quant::GgmlType type);
DotFn GetAvx512Kernel(quant::GgmlType type);

// quant::QuantizeBlocks for Q8_K with AVX2, the same bytes (a block holding a NaN is handed to the
// scalar code). The scalar one rounds
// through a libm call per element: ~15 µs a 2048-element row on the 16-core H200 host, a wait for
// every thread of a layer (docs/perf/experts.md, session 16).
void QuantizeQ8KAvx2(const float* x, quant::BlockQ8K* out, int64_t n_blocks);

}  // namespace tandem::experts
