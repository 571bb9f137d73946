// Quantised matrix-times-rows kernels for the CPU expert pool: weight rows read in place from GGUF
// bytes, activations quantised once per row to the format the weight type pairs with (spec §3:
// Q8_K for the K-quants and IQ4_XS, Q8_0 for the 32-element formats), integer dot products per
// block with float scales applied per block. Every weight block is read once for all (up to 8)
// activation rows. No allocation, no threads: the pool (pool.h) splits work and calls these.
#pragma once

#include <cstdint>

#include "experts/isa.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::experts {

// Most activation rows one kernel call serves; larger groups are cut into chunks of this size.
inline constexpr int kMaxKernelRows = 8;

// True when the pool has an integer kernel for weights of `type` on every ISA (scalar included).
// F16, BF16 and the Q4_1/Q5_0/Q5_1 types are not supported yet: callers must refuse them.
bool SupportsFormat(quant::GgmlType type);

// The activation block format paired with weights of `type` (kQ8_K or kQ8_0).
quant::GgmlType ActivationType(quant::GgmlType type);

// Bytes of one quantised activation row of n elements for weights of `type`.
int64_t ActivationRowBytes(quant::GgmlType type, int64_t n);

// Quantises x[0..n) into the activation format paired with `type` (n a multiple of its block).
void QuantizeActivations(quant::GgmlType type, const float* x, int64_t n, uint8_t* dst);

// out[a * out_stride + r] = dot(weight row r, activation row a) for r < n_wrows, a < n_act.
// Weight rows are w + r * w_stride, each k elements of the kernel's type; act[a] points at a row
// quantised by QuantizeActivations; 1 <= n_act <= kMaxKernelRows.
using DotFn = void (*)(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                       const uint8_t* const* act, int n_act, float* out, int64_t out_stride);

// The kernel for (isa, type); nullptr when SupportsFormat(type) is false or the CPU lacks `isa`.
DotFn GetDotKernel(Isa isa, quant::GgmlType type);

}  // namespace tandem::experts
