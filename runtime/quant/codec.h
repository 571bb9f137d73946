// Row-level access to every block format Tandem can decode, dispatched on the GgmlType read from a
// file: decode a row to f32, quantise f32 to a row, parse a type name, synthesise random rows.
// Host-only (C++20). Fast paths (SIMD, CUDA) are tested against these functions; nothing here is
// meant to be fast beyond the scalar codec itself.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/quant/ggml_type.h"
#include "runtime/quant/random_blocks.h"  // RandomizeBlocks

namespace tandem::quant {

// True for every type with a scalar codec (GetTypeInfo(type).has_codec): decode and quantise.
bool CanQuantize(GgmlType type);

// Decodes n elements (a multiple of the block size) from src to dst. Aborts on a type without a
// codec or a misaligned n: callers validate tensors when they load them.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// Quantises n finite elements (a multiple of the block size) into RowBytes(type, n) bytes at dst.
// Aborts like DequantizeRow.
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

// Element `index` of a row, decoding only the block that holds it.
float DequantizeElement(GgmlType type, const void* row, int64_t index);

// A type from its name in kTypeInfos ("q4_k", "BF16", ...), case-insensitive. The error lists
// every accepted name.
absl::StatusOr<GgmlType> ParseTypeName(std::string_view name);

}  // namespace tandem::quant
