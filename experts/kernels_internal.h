// Internal to experts/: the per-ISA kernel tables, each defined in its own file compiled with that
// ISA's -m flags. kernels.cc calls the SIMD ones only after a cpuid check.
#pragma once

#include "experts/kernels.h"

namespace tandem::experts {

DotFn GetScalarKernel(quant::GgmlType type);
DotFn GetAvx2Kernel(quant::GgmlType type);
DotFn GetAvx512Kernel(quant::GgmlType type);

}  // namespace tandem::experts
