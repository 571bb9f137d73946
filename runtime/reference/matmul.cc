#include "runtime/reference/matmul.h"

#include <vector>

#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/enumerable_thread_specific.h"
#include "oneapi/tbb/parallel_for.h"
#include "runtime/quant/codec.h"

namespace tandem::reference {

float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) acc[i & 7] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void DecodeRow(const format::TensorInfo& w, int64_t row, float* out) {
  const int64_t n = w.dims[0];
  quant::DequantizeRow(w.type, w.data + row * w.row_bytes(), out, n);
}

void MatMul(const format::TensorInfo& w, int64_t first_row, int64_t n_rows, const float* x, int T,
            float* y) {
  const int64_t n = w.dims[0];
  const int64_t row_bytes = w.row_bytes();
  const bool is_f32 = w.type == quant::GgmlType::kF32;
  static tbb::enumerable_thread_specific<std::vector<float>> scratch;
  // Rows are independent; 16 rows per task keeps scheduling overhead small next to decoding.
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n_rows, 16),
                    [&](const tbb::blocked_range<int64_t>& range) {
                      std::vector<float>& buf = scratch.local();
                      if (buf.size() < static_cast<size_t>(n)) buf.resize(n);
                      for (int64_t r = range.begin(); r < range.end(); ++r) {
                        const uint8_t* src = w.data + (first_row + r) * row_bytes;
                        const float* row;
                        if (is_f32) {
                          row = reinterpret_cast<const float*>(src);
                        } else {
                          quant::DequantizeRow(w.type, src, buf.data(), n);
                          row = buf.data();
                        }
                        for (int t = 0; t < T; ++t) y[t * n_rows + r] = Dot(row, x + t * n, n);
                      }
                    });
}

}  // namespace tandem::reference
