// Internal to experts/kernels_avx2.cc and kernels_avx512.cc: the kernel loops, written once over an
// ISA policy V (Avx2Policy, Avx512Policy) that supplies the vector width and the few instructions
// that differ (chunk assembly, scale broadcast, the scaled integer dot, reductions). Decode and dot
// are fused: each 32-element run goes from the GGUF bytes into a register (kernel_decode_avx2.h)
// and is used there for every activation row before the next run is decoded. Must not hold
// anything that needs an instruction beyond AVX2 outside V, so that both files can include it.
//
// Policy V provides: IVec/FVec (integer/float vectors of kChunkBytes), kChunks (chunks of a
// 256-element block), kFloats (floats per FVec), Chunk(src, c), PrepareScales(sc16) and
// ChunkScale(prepared, c) (the int16 scale of every pair of the chunk), LoadY, Abs, SignOf,
// DotScaled(acc, unsigned q, y, scale) = acc + Σ pairs of q·y times scale into int32 lanes,
// SubCorr, AddI, FmaScalar(isum, s, acc) = acc + float(isum)·s, Reduce, Dot32 (32 unsigned × 32
// signed bytes into 8 int32), LoadWeights<T>(row, i) (8 or 16 F16/BF16/F32 weights from element i,
// as f32), LoadF, Fma, AddF, ZeroI, ZeroF, and kOwnKernel<T, N>: true where the policy has its own
// kernel OwnKernel<T, N>::Run for T at N rows (kernel_vnni_rows.h, kernel_avx2_rows.h), which then
// replaces the generic loop.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "experts/kernel_decode_avx2.h"
#include "experts/kernel_prefetch.h"
#include "experts/kernels.h"

namespace tandem::experts {
namespace {

// Independent integer accumulators per activation row inside one K block: one row alone would
// otherwise wait on one add (AVX2) or vpdpwssd (AVX-512, 5-cycle latency) chain per chunk.
template <int N>
inline constexpr int kIntChains = N == 1   ? 4
                                  : N == 2 ? 2
                                           : 1;

// --- K family: one 256-element block of one weight row against N activation rows ---------------
template <class V, class F, int N, class Src>
static inline void KBlockRows(const Src& src, const quant::BlockQ8K* const* y,
                              typename V::FVec* acc, __m256* acc_min) {
  using IVec = typename V::IVec;
  constexpr int kChains = std::min(kIntChains<N>, V::kChunks);
  const KScales s = src.Scales();
  const auto scales = V::PrepareScales(s.sc16);
  IVec isum[N][kChains];
  for (int a = 0; a < N; ++a) {
    for (int c = 0; c < kChains; ++c) isum[a][c] = V::ZeroI();
  }
  for (int c = 0; c < V::kChunks; ++c) {
    const IVec wq = V::Chunk(src, c);
    const IVec scale = V::ChunkScale(scales, c);
    if constexpr (F::kSigned) {
      const IVec aw = V::Abs(wq);
      for (int a = 0; a < N; ++a) {
        const IVec yv = V::SignOf(V::LoadY(y[a]->qs + V::kChunkBytes * c), wq);
        isum[a][c % kChains] = V::DotScaled(isum[a][c % kChains], aw, yv, scale);
      }
    } else {
      for (int a = 0; a < N; ++a) {
        const IVec yv = V::LoadY(y[a]->qs + V::kChunkBytes * c);
        isum[a][c % kChains] = V::DotScaled(isum[a][c % kChains], wq, yv, scale);
      }
    }
  }
  for (int a = 0; a < N; ++a) {
    IVec total = isum[a][0];
    for (int c = 1; c < kChains; ++c) total = V::AddI(total, isum[a][c]);
    if constexpr (!F::kSigned) {  // IQ4_XS (the only signed K type) has no correction
      const __m256i icorr = _mm256_madd_epi16(LoadU(y[a]->bsums), s.corr16);
      if constexpr (F::kMin) {
        acc_min[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(icorr), _mm256_set1_ps(s.dmin * y[a]->d),
                                     acc_min[a]);
      } else {
        total = V::SubCorr(total, icorr);  // corr is an integer multiple of d·sc: exact
      }
    }
    acc[a] = V::FmaScalar(total, s.d * y[a]->d, acc[a]);
  }
}

// blocks [b0, b0 + nb) of one weight row, given by source(j), against N rows; returns the N sums.
template <class V, class F, int N, class SourceAt>
static inline void KRowDot(SourceAt source, int64_t b0, int64_t nb, const uint8_t* const* act,
                           float* sums) {
  typename V::FVec acc[N];
  __m256 acc_min[N];
  for (int a = 0; a < N; ++a) {
    acc[a] = V::ZeroF();
    acc_min[a] = _mm256_setzero_ps();
  }
  for (int64_t j = 0; j < nb; ++j) {
    const quant::BlockQ8K* y[N];
    for (int a = 0; a < N; ++a) y[a] = reinterpret_cast<const quant::BlockQ8K*>(act[a]) + b0 + j;
    KBlockRows<V, F, N>(source(j), y, acc, acc_min);
  }
  for (int a = 0; a < N; ++a) {
    sums[a] = V::Reduce(acc[a]);
    if constexpr (F::kMin) sums[a] -= HorizontalSum(acc_min[a]);
  }
}

template <class V, quant::GgmlType T, int N>
struct KRows {
  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    using B = typename Format<T>::Block;
    const RowPrefetch prefetch(w, w_stride, k / B::kElems * static_cast<int64_t>(sizeof(B)),
                               n_wrows);
    prefetch.Start();
    for (int r = 0; r < n_wrows; ++r) {
      prefetch.Row(r);
      const B* wb = reinterpret_cast<const B*>(w + r * w_stride);
      float sums[N];
      KRowDot<V, Format<T>, N>([wb](int64_t j) { return KSource<T>{wb[j]}; }, 0, k / B::kElems, act,
                               sums);
      for (int a = 0; a < N; ++a) out[a * out_stride + r] = sums[a];
    }
  }
};

// --- 32 family: one block per register, the sign moved onto the activation -------------------
template <class V, class F, int N>
static inline void Block32Rows(const typename F::Block& b, const uint8_t* const* act, int64_t ib,
                               __m256* acc) {
  float dw;
  const __m256i wq = Decode32(b, &dw);
  const __m256i aw = _mm256_sign_epi8(wq, wq);
  for (int a = 0; a < N; ++a) {
    const quant::BlockQ8_0& y = reinterpret_cast<const quant::BlockQ8_0*>(act[a])[ib];
    const __m256i dot = V::Dot32(aw, _mm256_sign_epi8(LoadU(y.qs), wq));
    acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * F16(y.d)), acc[a]);
  }
}

template <class V, quant::GgmlType T, int N>
struct Rows32 {
  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    using F = Format<T>;
    using B = typename F::Block;
    const int64_t nb = k / B::kElems;
    // At one row only: Q8_0 at 4 and 8 rows measured 20-30% slower with it on the 2-core VM and
    // mixed on the 16-core host (docs/perf/experts.md, session 14). A prefetch over no rows is
    // none.
    const RowPrefetch prefetch(w, w_stride, nb * static_cast<int64_t>(sizeof(B)),
                               N == 1 ? n_wrows : 0);
    prefetch.Start();
    for (int r = 0; r < n_wrows; ++r) {
      prefetch.Row(r);
      const B* wb = reinterpret_cast<const B*>(w + r * w_stride);
      // Even and odd blocks in separate accumulators: a block's work for one row is shorter than
      // the FMA latency, so one chain would bound the single-row case.
      __m256 even[N], odd[N];
      for (int a = 0; a < N; ++a) even[a] = odd[a] = _mm256_setzero_ps();
      int64_t ib = 0;
      for (; ib + 2 <= nb; ib += 2) {
        Block32Rows<V, F, N>(wb[ib], act, ib, even);
        Block32Rows<V, F, N>(wb[ib + 1], act, ib + 1, odd);
      }
      if (ib < nb) Block32Rows<V, F, N>(wb[ib], act, ib, even);
      for (int a = 0; a < N; ++a)
        out[a * out_stride + r] = HorizontalSum(_mm256_add_ps(even[a], odd[a]));
    }
  }
};

// --- F16 / BF16 / F32: f32 FMAs against f32 activations ----------------------------------------
template <class V, quant::GgmlType T, int N>
struct FloatRows {
  // Columns per pass over the weight rows. Past 4 rows, the rows' slice of one pass stays within
  // 16 KiB (L1): without it, 8 rows' f32 activations (64 KiB at k = 2048) streamed from L2 for
  // every weight row. experts_bench, 8 rows, 2026-11-30: F16 AVX2 cold 3.9 -> 4.5 GB/s, hot 6.1
  // -> 8.5; AVX-512 hot 5.7 -> 8.2. At 4 rows (32 KiB) the split measured -4..-11% cold (AVX2),
  // so rows up to 4 take whole weight rows.
  static constexpr int64_t kSpan = N <= 4 ? int64_t{1} << 40 : 16384 / (4 * N);

  static void Run(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                  const uint8_t* const* act, float* out, int64_t out_stride) {
    for (int64_t c0 = 0; c0 < k; c0 += kSpan) {
      const int64_t c1 = std::min(k, c0 + kSpan);
      constexpr int64_t kBytes = kFloatBytes<T>;
      const RowPrefetch prefetch(w + kBytes * c0, w_stride, kBytes * (c1 - c0), n_wrows);
      prefetch.Start();
      for (int r = 0; r < n_wrows; ++r) {
        prefetch.Row(r);
        float sums[N];
        SpanDot(w + r * w_stride, act, c0, c1, sums);
        for (int a = 0; a < N; ++a) {
          float& o = out[a * out_stride + r];
          o = c0 > 0 ? o + sums[a] : sums[a];
        }
      }
    }
  }

 private:
  // Σ over columns [c0, c1) of weight row wr times each activation row.
  static void SpanDot(const uint8_t* wr, const uint8_t* const* act, int64_t c0, int64_t c1,
                      float* sums) {
    using FVec = typename V::FVec;
    constexpr int kU = N == 1 ? 4 : N == 2 ? 2 : 1;  // independent FMA chains per row
    constexpr int kStep = kU * V::kFloats;
    FVec acc[N][kU];
    for (int a = 0; a < N; ++a) {
      for (int u = 0; u < kU; ++u) acc[a][u] = V::ZeroF();
    }
    int64_t i = c0;
    for (; i + kStep <= c1; i += kStep) {
      for (int u = 0; u < kU; ++u) {
        const FVec wv = V::template LoadWeights<T>(wr, i + u * V::kFloats);
        for (int a = 0; a < N; ++a) {
          const float* y = reinterpret_cast<const float*>(act[a]) + i + u * V::kFloats;
          acc[a][u] = V::Fma(wv, V::LoadF(y), acc[a][u]);
        }
      }
    }
    for (; i + V::kFloats <= c1; i += V::kFloats) {
      const FVec wv = V::template LoadWeights<T>(wr, i);
      for (int a = 0; a < N; ++a) {
        acc[a][0] = V::Fma(wv, V::LoadF(reinterpret_cast<const float*>(act[a]) + i), acc[a][0]);
      }
    }
    for (int a = 0; a < N; ++a) {
      FVec total = acc[a][0];
      for (int u = 1; u < kU; ++u) total = V::AddF(total, acc[a][u]);
      float s = V::Reduce(total);
      const float* y = reinterpret_cast<const float*>(act[a]);
      for (int64_t t = i; t < c1; ++t) s += FloatWeight<T>(wr, t) * y[t];
      sums[a] = s;
    }
  }
};

// --- dispatch on the row count ---------------------------------------------------------------
using RowsFn = void (*)(const uint8_t*, int64_t, int, int64_t, const uint8_t* const*, float*,
                        int64_t);

template <class V, quant::GgmlType T, int N>
struct RowsKernel {
  static constexpr RowsFn Get() {
    if constexpr (V::template kOwnKernel<T, N>)
      return &V::template OwnKernel<T, N>::Run;
    else if constexpr (Format<T>::kFamily == Family::kK)
      return &KRows<V, T, N>::Run;
    else if constexpr (Format<T>::kFamily == Family::k32)
      return &Rows32<V, T, N>::Run;
    else
      return &FloatRows<V, T, N>::Run;
  }
};

template <class V, quant::GgmlType T, size_t... I>
constexpr std::array<RowsFn, sizeof...(I)> RowsTable(std::index_sequence<I...>) {
  return {RowsKernel<V, T, static_cast<int>(I) + 1>::Get()...};
}

// 1..kMaxKernelRows activation rows, weights decoded in registers.
template <class V, quant::GgmlType T>
static inline void DotFewRows(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                              const uint8_t* const* act, int n_act, float* out,
                              int64_t out_stride) {
  static constexpr auto kTable = RowsTable<V, T>(std::make_index_sequence<kMaxKernelRows>());
  kTable[n_act - 1](w, w_stride, n_wrows, k, act, out, out_stride);
}

// --- tiled path: many activation rows --------------------------------------------------------
// Stack bytes of one decoded weight tile. 32 KiB leaves room in a 48 KiB L1 for the 8 activation
// rows being applied to it (8 Q8_K rows of 2048 = 18 KiB spill to L2, which streams them).
inline constexpr int64_t kTileBytes = 32 << 10;

// K family: decode a tile of weight rows × blocks once into DecodedK, then apply it to every
// activation row, kMaxKernelRows at a time. A tile that does not span k adds into out.
template <class V, quant::GgmlType T, int N>
struct KTileRows {
  static void Run(const DecodedK* tile, int n_rows, int64_t b0, int64_t nb,
                  const uint8_t* const* act, float* out, int64_t out_stride, bool add) {
    for (int r = 0; r < n_rows; ++r) {
      const DecodedK* row = tile + r * nb;
      float sums[N];
      KRowDot<V, Format<T>, N>([row](int64_t j) { return StoredK{row[j]}; }, b0, nb, act, sums);
      for (int a = 0; a < N; ++a) {
        float& o = out[a * out_stride + r];
        o = add ? o + sums[a] : sums[a];
      }
    }
  }
};

template <class V, quant::GgmlType T, size_t... I>
constexpr auto KTileTable(std::index_sequence<I...>) {
  using Fn = void (*)(const DecodedK*, int, int64_t, int64_t, const uint8_t* const*, float*,
                      int64_t, bool);
  return std::array<Fn, sizeof...(I)>{&KTileRows<V, T, static_cast<int>(I) + 1>::Run...};
}

template <class V, quant::GgmlType T>
static inline void KTiled(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                          const uint8_t* const* act, int n_act, float* out, int64_t out_stride) {
  using B = typename Format<T>::Block;
  static constexpr auto kTable = KTileTable<V, T>(std::make_index_sequence<kMaxKernelRows>());
  constexpr int64_t kTileBlocks = kTileBytes / static_cast<int64_t>(sizeof(DecodedK));
  DecodedK tile[kTileBlocks];
  const int64_t nb = k / B::kElems;
  const int64_t span = std::min(nb, kTileBlocks);  // blocks of one row in a tile
  const int tile_rows = static_cast<int>(kTileBlocks / span);
  for (int64_t b0 = 0; b0 < nb; b0 += span) {
    const int64_t nbt = std::min(span, nb - b0);
    for (int r0 = 0; r0 < n_wrows; r0 += tile_rows) {
      const int nr = std::min(tile_rows, n_wrows - r0);
      for (int r = 0; r < nr; ++r) {
        const B* wb = reinterpret_cast<const B*>(w + (r0 + r) * w_stride) + b0;
        for (int64_t j = 0; j < nbt; ++j) StoreDecoded(KSource<T>{wb[j]}, &tile[r * nbt + j]);
      }
      for (int a0 = 0; a0 < n_act; a0 += kMaxKernelRows) {
        const int n = std::min(kMaxKernelRows, n_act - a0);
        kTable[n - 1](tile, nr, b0, nbt, act + a0, out + a0 * out_stride + r0, out_stride, b0 > 0);
      }
    }
  }
}

// 32 family and F16/BF16/F32: their register decode costs a few instructions per 32 elements, less
// than re-storing it would, so the tile is the raw weight rows themselves, kept in L1 while every
// group of activation rows passes over them.
template <class V, quant::GgmlType T>
static inline void RawTiled(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k,
                            const uint8_t* const* act, int n_act, float* out, int64_t out_stride) {
  const int tile_rows = static_cast<int>(std::max<int64_t>(1, kTileBytes / w_stride));
  for (int r0 = 0; r0 < n_wrows; r0 += tile_rows) {
    const int nr = std::min(tile_rows, n_wrows - r0);
    for (int a0 = 0; a0 < n_act; a0 += kMaxKernelRows) {
      DotFewRows<V, T>(w + r0 * w_stride, w_stride, nr, k, act + a0,
                       std::min(kMaxKernelRows, n_act - a0), out + a0 * out_stride + r0,
                       out_stride);
    }
  }
}

template <class V, quant::GgmlType T>
void DotSimd(const uint8_t* w, int64_t w_stride, int n_wrows, int64_t k, const uint8_t* const* act,
             int n_act, float* out, int64_t out_stride) {
  if (n_act <= kMaxKernelRows) {
    DotFewRows<V, T>(w, w_stride, n_wrows, k, act, n_act, out, out_stride);
  } else if constexpr (Format<T>::kFamily == Family::kK) {
    KTiled<V, T>(w, w_stride, n_wrows, k, act, n_act, out, out_stride);
  } else {
    RawTiled<V, T>(w, w_stride, n_wrows, k, act, n_act, out, out_stride);
  }
}

template <class V>
struct SimdMaker {
  template <quant::GgmlType T>
  static DotFn Make() {
    return &DotSimd<V, T>;
  }
};

}  // namespace
}  // namespace tandem::experts
