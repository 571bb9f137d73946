// Scale searches shared by the host quantisers. Each fits one small group of values (a block or a
// sub-block) with a grid of integers or codebook entries and returns float scales; the caller then
// stores the scales in the block's own precision and re-assigns the integers with the stored scale.
// Host-only (C++20), not included from device code; inputs must be finite.
#pragma once

#include <cmath>
#include <cstdint>

namespace tandem::quant::fit {

// Round half to even (the default rounding mode), as ggml's nearest_int.
inline int NearestInt(float v) { return static_cast<int>(std::nearbyint(v)); }

inline int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Per-element importance for the weighted fits: w = mean(x²) + x². Large magnitudes dominate dot
// products, so they get more weight, but small ones never get zero weight.
void ImportanceWeights(const float* x, int n, float* w);

// x[i] ≈ scale·q[i] with integer q[i] in [qmin, qmax] (qmin < 0 <= qmax). Minimises Σ w·(x −
// scale·q)² over a sweep of candidate grids; the scale may be negative (the grid is asymmetric, so
// the extreme value can land on either end). Returns 0 when every x is 0.
float FitSymmetric(const float* x, const float* w, int n, int qmin, int qmax);

// The largest group FitAsymmetric accepts (it keeps the integers on the stack).
inline constexpr int kMaxFitGroup = 32;

// x[i] ≈ scale·q[i] + offset with q[i] in [0, qmax] and scale >= 0, n <= kMaxFitGroup. With
// `offset_at_most_zero` the offset stays <= 0, because the K-quants store −offset as an unsigned
// "min".
struct ScaleOffset {
  float scale;
  float offset;
};
ScaleOffset FitAsymmetric(const float* x, const float* w, int n, int qmax,
                          bool offset_at_most_zero);

// x[i] ≈ scale·codebook[k[i]] over a sorted 16-entry codebook (IQ4_NL / IQ4_XS). Returns 0 when
// every x is 0.
float FitCodebook(const float* x, const float* w, int n, const int8_t* codebook);

// Index of the codebook entry nearest to v (v in codebook units); `codebook` is sorted ascending.
int NearestCodebookIndex(const int8_t* codebook, float v);

// Stores signed group scales as integer codes times one shared f16 factor: picks the factor so
// that the scale of largest magnitude maps onto code_min (the wider, negative end), writes
// codes[i] = clamp(round(scales[i] / factor), code_min, code_max) and returns the factor as f16
// bits. All-zero scales give factor 0 and zero codes.
uint16_t QuantizeSignedScales(const float* scales, int n, int code_min, int code_max, int* codes);

// Same for non-negative scales (or mins) with codes 0..code_max: factor = max / code_max.
uint16_t QuantizeUnsignedScales(const float* scales, int n, int code_max, int* codes);

// A K-quant super-block with asymmetric sub-blocks (Q2_K, Q4_K, Q5_K) before bit packing:
// x[e] ≈ d·scale[j]·q[e] − dmin·min[j] for e in sub-block j.
struct AsymmetricSuperBlock {
  uint16_t d;     // f16
  uint16_t dmin;  // f16
  int scale[16];
  int min[16];
  uint8_t q[256];
};

// Fits n_sub sub-blocks of sub_size elements (n_sub·sub_size <= 256, sub_size <= kMaxFitGroup)
// with q in 0..qmax and scale/min codes in 0..code_max: a least-squares scale and min per
// sub-block, codes under f16 factors, then a joint least-squares refit of (d, dmin) that is kept
// only when it lowers the error.
void FitAsymmetricSuperBlock(const float* x, int n_sub, int sub_size, int qmax, int code_max,
                             AsymmetricSuperBlock* out);

// A K-quant super-block with symmetric sub-blocks (Q3_K, Q6_K): x[e] ≈ d·scale[j]·q[e].
struct SymmetricSuperBlock {
  uint16_t d;  // f16
  int scale[16];
  int q[256];
};

// As FitAsymmetricSuperBlock, with q in qmin..qmax and signed codes in code_min..code_max.
void FitSymmetricSuperBlock(const float* x, int n_sub, int sub_size, int qmin, int qmax,
                            int code_min, int code_max, SymmetricSuperBlock* out);

}  // namespace tandem::quant::fit
