// AVX-512 kernels (compiled with -mavx512f/bw/vl/vnni; called only after CpuSupports(kAvx512)).
// The loops are kernel_simd.h's; this policy gives them 64-byte chunks (two 32-element runs),
// maddubs (u8 × s8 → s16 pairs) then vpdpwssd with the chunk's per-16 scales (s16 × s16 → s32,
// accumulating: one instruction for AVX2's madd + add) for K blocks, the 256-bit vpdpbusd for
// 32-element blocks, and vcvtph2ps / a 16-bit shift for F16 / BF16 (the activations stay f32, so
// AVX512_BF16's bf16 × bf16 dot does not apply).
#include <immintrin.h>

#include <type_traits>

#include "experts/kernel_rows8_avx512.h"
#include "experts/kernel_simd.h"
#include "experts/kernel_vnni_rows.h"
#include "experts/kernels_internal.h"

namespace tandem::experts {
namespace {

struct Avx512Policy {
  using IVec = __m512i;
  using FVec = __m512;
  static constexpr int kChunkBytes = 64, kChunks = 4, kFloats = 16;
  // Q4_K and Q3_K at 1..8 rows, Q5_K at 2..8: one vpdpbusd per chunk and row
  // (kernel_vnni_rows.h). At one row, experts_bench on the 16-core H200 host (2026-11-30): Q4_K hot
  // 12.5 -> 16.7 GB/s, cold 10.3 -> 11.7; Q3_K hot 9.8 -> 11.4, cold 9.1 -> 10.2; Q5_K cold 9.2 ->
  // 8.6 (its high bits cost four ops per chunk), so Q5_K keeps the generic loop at one row.
  template <quant::GgmlType T, int N>
  static constexpr bool kOwnKernel = T == quant::GgmlType::kQ4_K || T == quant::GgmlType::kQ3_K ||
                                     (T == quant::GgmlType::kQ5_K && N >= 2);
  template <quant::GgmlType T, int N>
  using OwnKernel = VnniKRows<T, N>;

  static IVec ZeroI() { return _mm512_setzero_si512(); }
  static FVec ZeroF() { return _mm512_setzero_ps(); }
  // Chunk c = runs 2c and 2c+1. For Q3_K and Q6_K both runs come from the same 32 source bytes
  // at different shifts, so one broadcast load and one per-half variable shift replace two AVX2
  // run decodes and the insert. Best of 9 on 2026-11-29 (experts_bench hot, Zen 4): Q3_K 1 row
  // 10.8 -> 11.4 GB/s, Q6_K 24.0 -> 25.0; the same for Q4_K measured 17.7 -> 17.5, so Q4_K keeps
  // the generic pair (the kernels are bound by double-pumped maddubs/vpdpwssd/vpermd, not decode).
  template <class Src>
  static IVec Chunk(const Src& src, int c) {
    using quant::GgmlType;
    if constexpr (Src::kStored) {
      return _mm512_load_si512(src.t.q + 64 * c);
    } else if constexpr (std::is_same_v<Src, KSource<GgmlType::kQ3_K>>) {
      const int h = c >> 1, s = 2 * (c & 1);  // runs 2c, 2c+1 are bit pairs s, s+1 of half h
      const __m512i low2 =
          _mm512_and_si512(HalfShift(Broadcast32(src.b.qs + 32 * h), 2 * s, 2 * s + 2), Set8(3));
      const __mmask64 high = _mm512_test_epi8_mask(
          Broadcast32(src.b.hmask),
          _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                             _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1));
      return _mm512_mask_add_epi8(low2, high, low2, Set8(4));  // q + 4
    } else if constexpr (std::is_same_v<Src, KSource<GgmlType::kQ6_K>>) {
      const int h = c >> 1, g = 2 * (c & 1);  // runs g, g+1 of half h: 64 bytes of ql, one nibble
      const __m512i ql = _mm512_loadu_si512(src.b.ql + 64 * h);
      const __m512i low4 = _mm512_and_si512(_mm512_srli_epi16(ql, 4 * (c & 1)), Set8(0x0F));
      const __m512i high2 =
          _mm512_and_si512(HalfShift(Broadcast32(src.b.qh + 32 * h), 2 * g, 2 * g + 2), Set8(3));
      return _mm512_or_si512(low4, _mm512_slli_epi16(high2, 4));  // q + 32
    } else {
      return _mm512_inserti64x4(_mm512_castsi256_si512(src.Run(2 * c)), src.Run(2 * c + 1), 1);
    }
  }
  static __m512i Set8(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }
  static __m512i Broadcast32(const uint8_t* p) {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  // 16-bit lanes of the low 32 bytes shifted right by lo, of the high 32 bytes by hi.
  static __m512i HalfShift(__m512i v, int lo, int hi) {
    return _mm512_srlv_epi16(v, _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)),
                                                   _mm256_set1_epi16(static_cast<int16_t>(hi)), 1));
  }

  // Scales as (sc_j, sc_j) int32 pairs in lane j; chunk c needs S_4c..S_4c+3, four lanes each.
  using Scales = __m512i;
  static Scales PrepareScales(__m256i sc16) {
    const __m512i x = _mm512_cvtepu16_epi32(sc16);
    return _mm512_or_si512(x, _mm512_slli_epi32(x, 16));
  }
  static IVec ChunkScale(const Scales& s, int c) {
    const int j = 4 * c;
    return _mm512_permutexvar_epi32(
        _mm512_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1, j + 2, j + 2, j + 2, j + 2, j + 3,
                          j + 3, j + 3, j + 3),
        s);
  }
  static IVec LoadY(const int8_t* p) { return _mm512_loadu_si512(p); }
  static IVec Abs(IVec w) { return _mm512_abs_epi8(w); }
  static IVec SignOf(IVec y, IVec w) {
    return _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(w), _mm512_setzero_si512(), y);
  }
  static IVec DotScaled(IVec acc, IVec uq, IVec y, IVec scale) {
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(uq, y), scale);
  }
  static IVec AddI(IVec a, IVec b) { return _mm512_add_epi32(a, b); }
  static IVec SubCorr(IVec total, __m256i corr) {
    return _mm512_sub_epi32(total, _mm512_zextsi256_si512(corr));
  }
  static FVec FmaScalar(IVec isum, float s, FVec acc) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(s), acc);
  }
  static float Reduce(FVec v) { return _mm512_reduce_add_ps(v); }
  static __m256i Dot32(__m256i uw, __m256i y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), uw, y);
  }

  template <quant::GgmlType T>
  static FVec LoadWeights(const uint8_t* row, int64_t i) {
    if constexpr (T == quant::GgmlType::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    }
    const __m256i v = LoadU(reinterpret_cast<const uint16_t*>(row) + i);
    if constexpr (T == quant::GgmlType::kF16) {
      return _mm512_cvtph_ps(v);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
    }
  }
  static FVec LoadF(const float* p) { return _mm512_loadu_ps(p); }
  static FVec Fma(FVec a, FVec b, FVec c) { return _mm512_fmadd_ps(a, b, c); }
  static FVec AddF(FVec a, FVec b) { return _mm512_add_ps(a, b); }
};

}  // namespace

DotFn GetAvx512Kernel(quant::GgmlType type) {
  return DispatchFormat<SimdMaker<Avx512Policy>>(type);
}

DotFn GetAvx512Rows8Kernel(quant::GgmlType type) {
  switch (type) {
    case quant::GgmlType::kQ4_K:
      return &DotRows8<Rows8Q4K>;
    case quant::GgmlType::kQ3_K:
      return &DotRows8<Rows8Q3K>;
    default:
      return nullptr;
  }
}

}  // namespace tandem::experts
