// A tensor as every model source describes it: name, ggml dims (ne[0] fastest), type, bytes, and a
// pointer to its bytes when they are in memory (mapped file or generated buffer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/quant/ggml_type.h"

namespace tandem::format {

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is contiguous; at most 4
  quant::GgmlType type = quant::GgmlType::kF32;
  uint64_t offset = 0;  // from the start of the data section (GGUF); 0 elsewhere
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // nullptr while the bytes are not materialised

  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  int64_t dim(size_t i) const { return i < dims.size() ? dims[i] : 1; }
  // Rows of ne[0] elements (product of the other dims).
  int64_t rows() const { return dims.empty() ? 0 : elements() / dims[0]; }
  int64_t row_bytes() const { return quant::RowBytes(type, dims.empty() ? 0 : dims[0]); }
};

// "[2048, 768, 128]" in ggml order.
std::string DimsToString(const std::vector<int64_t>& dims);

}  // namespace tandem::format
