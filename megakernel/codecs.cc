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
  return quant::RowBytes(t, cols);
}

void ToDeviceLayout(int type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  const auto t = static_cast<quant::GgmlType>(type);
  if (t != quant::GgmlType::kQ3_K) {
    std::memcpy(dst, src, static_cast<size_t>(rows * quant::RowBytes(t, cols)));
    return;
  }
  const int file_block = quant::GetTypeInfo(t).block_bytes;
  const int64_t blocks = rows * (cols / 256);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = dst + b * kQ3KDeviceBlockBytes;
    std::memcpy(out, src + b * file_block, file_block);
    std::memset(out + file_block, 0, kQ3KDeviceBlockBytes - file_block);
  }
}

}  // namespace tandem::megakernel
