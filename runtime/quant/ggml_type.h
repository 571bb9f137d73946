// The ggml tensor type ids used in GGUF files, with block size and byte size for each.
// This table is the single source of truth for "how many bytes does a row of n elements take".
// C++17, host and device: included from .cu files.
#pragma once

#include <cstdint>

namespace tandem::quant {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kMXFP4 = 39,
};

struct TypeInfo {
  GgmlType type;
  const char* name;     // lower-case, as users type it: "q4_k", "bf16"
  int32_t block_elems;  // elements per block along ne[0]
  int32_t block_bytes;  // bytes per block
  bool has_codec;       // Tandem can decode it (and quantise to it)
};

// Every type id Tandem knows, in id order. Unknown ids (removed or grid-based types) are absent.
inline constexpr TypeInfo kTypeInfos[] = {
    {GgmlType::kF32, "f32", 1, 4, true},         {GgmlType::kF16, "f16", 1, 2, true},
    {GgmlType::kQ4_0, "q4_0", 32, 18, true},     {GgmlType::kQ4_1, "q4_1", 32, 20, true},
    {GgmlType::kQ5_0, "q5_0", 32, 22, true},     {GgmlType::kQ5_1, "q5_1", 32, 24, true},
    {GgmlType::kQ8_0, "q8_0", 32, 34, true},     {GgmlType::kQ8_1, "q8_1", 32, 36, false},
    {GgmlType::kQ2_K, "q2_k", 256, 84, true},    {GgmlType::kQ3_K, "q3_k", 256, 110, true},
    {GgmlType::kQ4_K, "q4_k", 256, 144, true},   {GgmlType::kQ5_K, "q5_k", 256, 176, true},
    {GgmlType::kQ6_K, "q6_k", 256, 210, true},   {GgmlType::kQ8_K, "q8_k", 256, 292, true},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18, true}, {GgmlType::kIQ4_XS, "iq4_xs", 256, 136, true},
    {GgmlType::kI8, "i8", 1, 1, false},          {GgmlType::kI16, "i16", 1, 2, false},
    {GgmlType::kI32, "i32", 1, 4, false},        {GgmlType::kI64, "i64", 1, 8, false},
    {GgmlType::kF64, "f64", 1, 8, false},        {GgmlType::kBF16, "bf16", 1, 2, true},
    {GgmlType::kMXFP4, "mxfp4", 32, 17, true},
};

// The entry for a raw id read from a file, or nullptr when Tandem does not know the id.
constexpr const TypeInfo* FindTypeInfo(uint32_t id) {
  for (const TypeInfo& info : kTypeInfos) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

// The entry of a known type. Every GgmlType enumerator has one.
constexpr const TypeInfo& GetTypeInfo(GgmlType type) {
  return *FindTypeInfo(static_cast<uint32_t>(type));
}

// Bytes of a row of `n` elements; n must be a multiple of the block size.
constexpr int64_t RowBytes(GgmlType type, int64_t n) {
  const TypeInfo& info = GetTypeInfo(type);
  return n / info.block_elems * info.block_bytes;
}

}  // namespace tandem::quant
