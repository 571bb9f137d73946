// Matrix-times-rows kernels for the CPU expert pool: weight rows read in place from GGUF bytes,
// activations converted once per row to the form the weight type pairs with (spec §3: Q8_K for the
// K-quants and IQ4_XS, Q8_0 for the 32-element formats, plain f32 for F16, BF16 and F32), integer
// dot products per block with float scales applied per block. Every weight block is decoded once
// for all (up to 8) activation rows in registers; more rows take the tiled path, which decodes a
// tile of weight rows once and applies it to every row. No allocation, no threads: the pool
// (pool.h) splits work and calls these.
#pragma once

#include <cstdint>

#include "experts/isa.h"
#include "experts/rows8.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::experts {

// Most activation rows the register-blocked kernels serve at once; calls with more take the tiled
// path (decode a tile of weight rows once, apply it to every activation row in groups of this size).
inline constexpr int kMaxKernelRows = 8;

// Most activation rows one kernel call accepts: a 512-token prefill chunk whose rows all chose one
// expert.
inline constexpr int kMaxTileRows = 512;

// True when the pool has a kernel for weights of `type` on every ISA (scalar included):
// Q4_K Q3_K Q8_0 Q6_K Q5_K Q2_K IQ4_XS Q4_0 IQ4_NL MXFP4 F16 BF16 F32. Q4_1/Q5_0/Q5_1 are not
// supported: callers must refuse them.
bool SupportsFormat(quant::GgmlType type);

// The activation format paired with weights of `type`: kQ8_K, kQ8_0, or kF32 (for F16, BF16, F32).
quant::GgmlType ActivationType(quant::GgmlType type);

// Bytes of one converted activation row of n elements for weights of `type`.
int64_t ActivationRowBytes(quant::GgmlType type, int64_t n);

// Converts x[0..n) into the activation format paired with `type` (n a multiple of its block). The
// same bytes on every CPU: Q8_K and Q8_0 take AVX2 where the CPU has it, which writes what
// quant::QuantizeBlocks writes.
void QuantizeActivations(quant::GgmlType type, const float* x, int64_t n, uint8_t* dst);

// out[a * out_stride + r] = dot(weight row r, activation row a) for r < n_wrows, a < n_act.
// Weight rows are w + r * w_stride, each k elements of the kernel's type; act[a] points at a row
// converted by QuantizeActivations; 1 <= n_act <= kMaxTileRows.
using DotFn = void (*)(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                       const uint8_t* const* act, int n_act, float* out, int64_t out_stride);

// The kernel for (isa, type) over weights in `layout`; nullptr when SupportsFormat(type) is false,
// the CPU lacks `isa`, or there is no kernel for that layout (kRows8: Q4_K and Q3_K on kAvx512
// and kAvx2; its n_wrows must be a multiple of 8 and w the first row of a group).
DotFn GetDotKernel(Isa isa, quant::GgmlType type, WeightLayout layout = WeightLayout::kGguf);

// SwiGLU between gate/up and down: h[i] = silu(h[i]) · u[i] = h[i] / (1 + e^-h[i]) · u[i] for
// i < n. kScalar calls libm's expf per element (~5 ns each: at 4 rows the 512 calls of a gate/up
// item took longer than some items' kernels); kAvx2 and kAvx512 (CPU with AVX2) take 8 elements at
// a time through a polynomial exp within 2 ulp of expf (kernels_avx2.cc). Finite inputs only are
// specified; NaN stays NaN.
void SiluMul(Isa isa, float* h, const float* u, int64_t n);

}  // namespace tandem::experts
