// One table maps each GgmlType to its block decoder and quantiser; the entries are instantiated
// from the per-type headers by templates, so every format goes through the same two loops.
#include "runtime/quant/codec.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/quant/blocks.h"

namespace tandem::quant {
namespace {

struct Codec {
  GgmlType type;
  void (*dequantize)(const void* src, float* dst, int64_t n_blocks);
  void (*quantize)(const float* src, void* dst, int64_t n_blocks);
};

template <typename Block>
void DequantizeBlocksOf(const void* src, float* dst, int64_t n_blocks) {
  const Block* blocks = static_cast<const Block*>(src);
  for (int64_t b = 0; b < n_blocks; ++b) DequantizeBlock(blocks[b], dst + b * Block::kElems);
}

template <typename Block>
void QuantizeBlocksOf(const float* src, void* dst, int64_t n_blocks) {
  QuantizeBlocks(src, static_cast<Block*>(dst), n_blocks);
}

template <typename Block>
constexpr Codec BlockCodec() {
  return {Block::kType, &DequantizeBlocksOf<Block>, &QuantizeBlocksOf<Block>};
}

void DequantizeF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void QuantizeF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void DequantizeF16(const void* src, float* dst, int64_t n) {
  DequantizeRowF16(static_cast<const uint16_t*>(src), dst, n);
}
void QuantizeF16(const float* src, void* dst, int64_t n) {
  QuantizeRowF16(src, static_cast<uint16_t*>(dst), n);
}
void DequantizeBF16(const void* src, float* dst, int64_t n) {
  DequantizeRowBF16(static_cast<const uint16_t*>(src), dst, n);
}
void QuantizeBF16(const float* src, void* dst, int64_t n) {
  QuantizeRowBF16(src, static_cast<uint16_t*>(dst), n);
}

constexpr Codec kCodecs[] = {
    {GgmlType::kF32, &DequantizeF32, &QuantizeF32},
    {GgmlType::kF16, &DequantizeF16, &QuantizeF16},
    {GgmlType::kBF16, &DequantizeBF16, &QuantizeBF16},
    BlockCodec<BlockQ4_0>(),
    BlockCodec<BlockQ4_1>(),
    BlockCodec<BlockQ5_0>(),
    BlockCodec<BlockQ5_1>(),
    BlockCodec<BlockQ8_0>(),
    BlockCodec<BlockQ2K>(),
    BlockCodec<BlockQ3K>(),
    BlockCodec<BlockQ4K>(),
    BlockCodec<BlockQ5K>(),
    BlockCodec<BlockQ6K>(),
    BlockCodec<BlockQ8K>(),
    BlockCodec<BlockIQ4NL>(),
    BlockCodec<BlockIQ4XS>(),
    BlockCodec<BlockMXFP4>(),
};

const Codec* FindCodec(GgmlType type) {
  for (const Codec& codec : kCodecs) {
    if (codec.type == type) return &codec;
  }
  return nullptr;
}

// The codec for a row of n elements; aborts on misuse (callers validate tensors on load).
const Codec& CodecForRow(const char* caller, GgmlType type, int64_t n) {
  const TypeInfo* info = FindTypeInfo(static_cast<uint32_t>(type));
  const Codec* codec = FindCodec(type);
  if (info == nullptr || codec == nullptr) {
    std::fprintf(stderr, "%s: no codec for ggml type id %u\n", caller, static_cast<unsigned>(type));
    std::abort();
  }
  if (n < 0 || n % info->block_elems != 0) {
    std::fprintf(stderr, "%s(%s): %lld elements is not a multiple of the block size %d\n", caller,
                 info->name, static_cast<long long>(n), info->block_elems);
    std::abort();
  }
  return *codec;
}

}  // namespace

bool CanQuantize(GgmlType type) { return FindCodec(type) != nullptr; }

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const Codec& codec = CodecForRow("DequantizeRow", type, n);
  codec.dequantize(src, dst, n / GetTypeInfo(type).block_elems);
}

void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  const Codec& codec = CodecForRow("QuantizeRow", type, n);
  codec.quantize(src, dst, n / GetTypeInfo(type).block_elems);
}

float DequantizeElement(GgmlType type, const void* row, int64_t index) {
  const TypeInfo& info = GetTypeInfo(type);
  const Codec& codec = CodecForRow("DequantizeElement", type, 0);
  const int64_t block = index / info.block_elems;
  float values[kQK_K];
  codec.dequantize(static_cast<const uint8_t*>(row) + block * info.block_bytes, values, 1);
  return values[index % info.block_elems];
}

absl::StatusOr<GgmlType> ParseTypeName(std::string_view name) {
  // Debian's absl has its own string_view type, so the text goes through std::string.
  const std::string text(name);
  const std::string lower = absl::AsciiStrToLower(text);
  std::vector<std::string> names;
  for (const TypeInfo& info : kTypeInfos) {
    if (lower == info.name) return info.type;
    names.push_back(info.name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown tensor type \"", text, "\"; expected one of: ", absl::StrJoin(names, ", ")));
}

}  // namespace tandem::quant
