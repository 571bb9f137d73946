// Matrix products of quantised weights with fp32 activations, for the reference forward pass.
// Each weight row is decoded block by block into a per-thread fp32 buffer and used for all T input
// rows at once; the model is never copied to fp32 as a whole.
#pragma once

#include <cstdint>

#include "runtime/format/tensor_info.h"

namespace tandem::reference {

// y[t][r] = sum_i W[first_row + r][i] * x[t][i] for t < T, r < n_rows.
// W is `w` viewed as rows of dims[0] elements (an expert slab of a 3-D tensor starts at
// expert * dims[1]). x is T x dims[0] row-major, y is T x n_rows row-major.
void MatMul(const format::TensorInfo& w, int64_t first_row, int64_t n_rows, const float* x, int T,
            float* y);

// Row `row` of `w` decoded to fp32 (embedding lookup).
void DecodeRow(const format::TensorInfo& w, int64_t row, float* out);

// Inner product with fixed accumulation order (eight lanes), so results do not depend on threads.
float Dot(const float* a, const float* b, int64_t n);

}  // namespace tandem::reference
