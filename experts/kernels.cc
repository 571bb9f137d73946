// Kernel dispatch and activation quantisation (see kernels.h).
#include "experts/kernels.h"

#include <cstring>

#include "experts/kernels_internal.h"
#include "runtime/quant/q8_0.h"
#include "runtime/quant/q8_k.h"

namespace tandem::experts {
namespace {
// Whether the AVX2 quantisers and SwiGLU may run: read once.
bool HasAvx2() {
  static const bool avx2 = CpuSupports(Isa::kAvx2);
  return avx2;
}
}  // namespace

bool SupportsFormat(quant::GgmlType type) { return GetScalarKernel(type) != nullptr; }

quant::GgmlType ActivationType(quant::GgmlType type) {
  if (type == quant::GgmlType::kF16 || type == quant::GgmlType::kBF16 ||
      type == quant::GgmlType::kF32) {
    return quant::GgmlType::kF32;
  }
  return quant::GetTypeInfo(type).block_elems == quant::kQK_K ? quant::GgmlType::kQ8_K
                                                              : quant::GgmlType::kQ8_0;
}

int64_t ActivationRowBytes(quant::GgmlType type, int64_t n) {
  return quant::RowBytes(ActivationType(type), n);
}

void QuantizeActivations(quant::GgmlType type, const float* x, int64_t n, uint8_t* dst) {
  const quant::GgmlType act = ActivationType(type);
  if (act == quant::GgmlType::kF32) {
    std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const bool avx2 = HasAvx2();
  if (act == quant::GgmlType::kQ8_K) {
    auto* blocks = reinterpret_cast<quant::BlockQ8K*>(dst);
    if (avx2) {
      QuantizeQ8KAvx2(x, blocks, n / quant::kQK_K);
    } else {
      quant::QuantizeBlocks(x, blocks, n / quant::kQK_K);
    }
  } else {
    auto* blocks = reinterpret_cast<quant::BlockQ8_0*>(dst);
    if (avx2) {
      QuantizeQ8_0Avx2(x, blocks, n / quant::kQK);
    } else {
      quant::QuantizeBlocks(x, blocks, n / quant::kQK);
    }
  }
}

void SiluMul(Isa isa, float* h, const float* u, int64_t n) {
  if (isa != Isa::kScalar && HasAvx2()) {
    SiluMulAvx2(h, u, n);
  } else {
    SiluMulScalar(h, u, n);
  }
}

DotFn GetDotKernel(Isa isa, quant::GgmlType type, WeightLayout layout) {
  if (!CpuSupports(isa)) return nullptr;
  if (layout == WeightLayout::kRows8) {
    return isa == Isa::kAvx512 ? GetAvx512Rows8Kernel(type)
           : isa == Isa::kAvx2 ? GetAvx2Rows8Kernel(type)
                               : nullptr;
  }
  switch (isa) {
    case Isa::kScalar: return GetScalarKernel(type);
    case Isa::kAvx2: return GetAvx2Kernel(type);
    case Isa::kAvx512: return GetAvx512Kernel(type);
  }
  return nullptr;
}

}  // namespace tandem::experts
