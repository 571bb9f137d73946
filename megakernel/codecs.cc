#include "megakernel/codecs.h"

#include <cstring>

#include "absl/strings/str_join.h"

namespace tandem::megakernel {

std::string DeviceCodecNames() {
  std::vector<std::string> names;
  for (const quant::TypeInfo& info : quant::kTypeInfos) {
    if (SliceElems(static_cast<int>(info.type)) > 0) names.push_back(info.name);
  }
  return absl::StrJoin(names, ", ");
}

int64_t DeviceRowBytes(int type, int64_t cols) {
  const auto t = static_cast<quant::GgmlType>(type);
  if (t == quant::GgmlType::kQ3_K) return cols / 256 * kQ3KDeviceBlockBytes;
  if (t == quant::GgmlType::kQ8_0) return Q8DeviceRowBytes(cols);
  if (t == quant::GgmlType::kQ6_K) return Q6DeviceRowBytes(cols);
  return quant::RowBytes(t, cols);
}

void ToDeviceLayout(int type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  const auto t = static_cast<quant::GgmlType>(type);
  if (DeviceLayoutIsFiles(type)) {
    std::memcpy(dst, src, static_cast<size_t>(rows * quant::RowBytes(t, cols)));
    return;
  }
  if (t == quant::GgmlType::kQ3_K) {
    const int file_block = quant::GetTypeInfo(t).block_bytes;
    const int64_t blocks = rows * (cols / 256);
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* out = dst + b * kQ3KDeviceBlockBytes;
      std::memcpy(out, src + b * file_block, file_block);
      std::memset(out + file_block, 0, kQ3KDeviceBlockBytes - file_block);
    }
    return;
  }
  if (t == quant::GgmlType::kQ6_K) {
    // Each 210-byte block is ql (128), qh (64), scales (16), then d (2).
    const int64_t nb = cols / 256, file_row = nb * 210, dev_row = Q6DeviceRowBytes(cols);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* in = src + r * file_row;
      uint8_t* out = dst + r * dev_row;
      for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(out + 192 * b, in + 210 * b, 192);
        std::memcpy(out + 192 * nb + 16 * b, in + 210 * b + 192, 16);
        std::memcpy(out + 208 * nb + 2 * b, in + 210 * b + 208, 2);
      }
      std::memset(out + 210 * nb, 0, static_cast<size_t>(dev_row - 210 * nb));
    }
    return;
  }
  // Q8_0: each 34-byte block is its fp16 scale, then its 32 quants.
  const int64_t nb = cols / 32, file_row = nb * 34, dev_row = Q8DeviceRowBytes(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* in = src + r * file_row;
    uint8_t* out = dst + r * dev_row;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(out + 32 * b, in + 34 * b + 2, 32);
      std::memcpy(out + 32 * nb + 2 * b, in + 34 * b, 2);
    }
    std::memset(out + 34 * nb, 0, static_cast<size_t>(dev_row - 34 * nb));
  }
}

}  // namespace tandem::megakernel
