// Portable kernels: the same per-block algebra as the SIMD files (kernel_blocks.h), one element at
// a time, every activation row in turn. The oracle for the SIMD paths (integer sums are exact, so
// those agree to float rounding) and the fallback on CPUs without AVX2.
#include "experts/kernels_internal.h"

#include <cmath>

#include "experts/kernel_blocks.h"

namespace tandem::experts {
namespace {

template <bool kSigned>
float DotKScalar(const KBlock& w, const quant::BlockQ8K& y) {
  int32_t sum = 0;
  float corr = 0.0f;
  for (int j = 0; j < 16; ++j) {
    int32_t s = 0;
    for (int i = 0; i < 16; ++i) {
      const int q = kSigned ? static_cast<int8_t>(w.q[16 * j + i]) : w.q[16 * j + i];
      s += q * y.qs[16 * j + i];
    }
    sum += w.sc[j] * s;
    corr += w.corr[j] * static_cast<float>(y.bsums[j]);
  }
  return y.d * (w.d * static_cast<float>(sum) - corr);
}

template <quant::GgmlType T>
void DotScalar(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
               const uint8_t* const* act, int n_act, float* out, int64_t out_stride) {
  using F = Format<T>;
  for (int r = 0; r < n_wrows; ++r) {
    const uint8_t* w_row = w + r * w_stride;
    if constexpr (F::kFamily == Family::kFloat) {
      for (int a = 0; a < n_act; ++a) {
        const float* y = reinterpret_cast<const float*>(act[a]);
        double acc = 0;  // the SIMD paths sum in f32 lanes; fp64 keeps the oracle order-free
        for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(FloatWeight<T>(w_row, i)) * y[i];
        out[a * out_stride + r] = static_cast<float>(acc);
      }
    } else {
      using B = typename F::Block;
      const B* wb = reinterpret_cast<const B*>(w_row);
      float acc[kMaxTileRows] = {};
      for (int64_t ib = 0; ib < k / B::kElems; ++ib) {
        if constexpr (F::kK) {
          KBlock kb;
          ScalarDecodeK(wb[ib], &kb);
          for (int a = 0; a < n_act; ++a) {
            acc[a] +=
                DotKScalar<F::kSigned>(kb, reinterpret_cast<const quant::BlockQ8K*>(act[a])[ib]);
          }
        } else {
          Block32 b;
          ScalarDecode32(wb[ib], &b);
          for (int a = 0; a < n_act; ++a) {
            const quant::BlockQ8_0& y = reinterpret_cast<const quant::BlockQ8_0*>(act[a])[ib];
            int32_t s = 0;
            for (int j = 0; j < 32; ++j) s += b.q[j] * y.qs[j];
            acc[a] += b.d * Fp16ToF32(y.d) * static_cast<float>(s);
          }
        }
      }
      for (int a = 0; a < n_act; ++a) out[a * out_stride + r] = acc[a];
    }
  }
}

struct ScalarMaker {
  template <quant::GgmlType T>
  static DotFn Make() {
    return &DotScalar<T>;
  }
};

}  // namespace

DotFn GetScalarKernel(quant::GgmlType type) { return DispatchFormat<ScalarMaker>(type); }

void SiluMulScalar(float* h, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = h[i] / (1.0f + std::exp(-h[i])) * u[i];
}

}  // namespace tandem::experts
