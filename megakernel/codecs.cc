#include "megakernel/codecs.h"

#include <cstring>
#include <span>

#include "absl/strings/str_join.h"
#include "megakernel/smem.h"

namespace tandem::megakernel {

std::string DeviceCodecNames() {
  std::vector<std::string> names;
  for (const quant::TypeInfo& info : quant::kTypeInfos) {
    if (SliceElems(static_cast<int>(info.type)) > 0) names.push_back(info.name);
  }
  return absl::StrJoin(names, ", ");
}

namespace {

// One plane of a planar device row: `bytes` bytes at `offset` of every file block (codecs.h). The
// planes follow one another in table order, the order the device's offset helpers (Q8Quants,
// Q8Scales; Q6KQuants, Q6KScales, Q6KFactors) add their sizes in.
struct Plane {
  int offset, bytes;
};
constexpr Plane kQ8Planes[] = {{2, kQ8QuantBytes}, {0, kQ8ScaleBytes}};  // quants, scale
// ql + qh, scales, d
constexpr Plane kQ6KPlanes[] = {{0, kQ6KQuantBytes}, {192, kQ6KScaleBytes}, {208, kQ6KFactorBytes}};

// The planes of a planar type (empty for the others).
std::span<const Plane> PlanesOf(quant::GgmlType t) {
  if (t == quant::GgmlType::kQ8_0) return kQ8Planes;
  if (t == quant::GgmlType::kQ6_K) return kQ6KPlanes;
  return {};
}

}  // namespace

bool DeviceLayoutIsFiles(int type) {
  const auto t = static_cast<quant::GgmlType>(type);
  return t != quant::GgmlType::kQ3_K && PlanesOf(t).empty();
}

int64_t DeviceRowBytes(int type, int64_t cols) {
  const auto t = static_cast<quant::GgmlType>(type);
  if (t == quant::GgmlType::kQ3_K) return cols / 256 * kQ3KDeviceBlockBytes;
  if (!PlanesOf(t).empty()) return Align16(quant::RowBytes(t, cols));
  return quant::RowBytes(t, cols);
}

void ToDeviceLayout(int type, const uint8_t* src, int64_t rows, int64_t cols, uint8_t* dst) {
  const auto t = static_cast<quant::GgmlType>(type);
  if (DeviceLayoutIsFiles(type)) {
    std::memcpy(dst, src, static_cast<size_t>(rows * quant::RowBytes(t, cols)));
    return;
  }
  const int file_block = quant::GetTypeInfo(t).block_bytes;
  if (t == quant::GgmlType::kQ3_K) {
    const int64_t blocks = rows * (cols / 256);
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* out = dst + b * kQ3KDeviceBlockBytes;
      std::memcpy(out, src + b * file_block, file_block);
      std::memset(out + file_block, 0, kQ3KDeviceBlockBytes - file_block);
    }
    return;
  }
  const int64_t nb = cols / quant::GetTypeInfo(t).block_elems, file_row = nb * file_block;
  const int64_t dev_row = DeviceRowBytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* in = src + r * file_row;
    uint8_t* out = dst + r * dev_row;
    for (const Plane& p : PlanesOf(t)) {
      for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(out + p.bytes * b, in + file_block * b + p.offset, p.bytes);
      }
      out += p.bytes * nb;
    }
    std::memset(out, 0, static_cast<size_t>(dev_row - file_row));
  }
}

}  // namespace tandem::megakernel
