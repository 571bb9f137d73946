// Shared helpers of the expert tests: random inputs, activations quantised for the kernels, the
// fp32 reference of one expert, the normalised error used for every bound, and the calling
// thread's CPU binding.
#pragma once

#include <gtest/gtest.h>
#include <sched.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "experts/kernels.h"
#include "runtime/quant/codec.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::experts {

// Every weight format the pool has kernels for (SupportsFormat).
inline constexpr quant::GgmlType kAllFormats[] = {
    quant::GgmlType::kQ4_K,   quant::GgmlType::kQ3_K, quant::GgmlType::kQ8_0,
    quant::GgmlType::kQ6_K,   quant::GgmlType::kQ5_K, quant::GgmlType::kQ2_K,
    quant::GgmlType::kIQ4_XS, quant::GgmlType::kQ4_0, quant::GgmlType::kIQ4_NL,
    quant::GgmlType::kMXFP4,  quant::GgmlType::kF16,  quant::GgmlType::kBF16,
    quant::GgmlType::kF32};

// A parameterised test's name for one format ("q4_k").
inline std::string FormatName(const ::testing::TestParamInfo<quant::GgmlType>& info) {
  return quant::GetTypeInfo(info.param).name;
}

// The CPUs the calling thread may run on.
inline cpu_set_t ThreadAffinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return set;
}

inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint8_t> RandomWeights(quant::GgmlType type, int64_t rows, int64_t cols,
                                          uint64_t seed) {
  std::vector<uint8_t> bytes(static_cast<size_t>(quant::RowBytes(type, cols) * rows));
  const int64_t blocks = rows * cols / quant::GetTypeInfo(type).block_elems;
  quant::RandomizeBlocks(type, seed, 0.05f, bytes.data(), blocks);
  return bytes;
}

// n_act rows of k floats (x, row-major) quantised as the kernels take them: the bytes, and one
// pointer per row into them.
struct QuantizedRows {
  std::vector<uint8_t> bytes;
  std::vector<const uint8_t*> rows;
};
inline QuantizedRows QuantizeRows(quant::GgmlType type, const std::vector<float>& x, int n_act,
                                  int64_t k) {
  const int64_t row_bytes = ActivationRowBytes(type, k);
  QuantizedRows q;
  q.bytes.resize(static_cast<size_t>(n_act * row_bytes));
  for (int a = 0; a < n_act; ++a) {
    QuantizeActivations(type, &x[a * k], k, &q.bytes[a * row_bytes]);
    q.rows.push_back(&q.bytes[a * row_bytes]);
  }
  return q;
}

// ||got - want|| / ||want||.
inline double NormalisedError(const float* got, const float* want, size_t n) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    ref += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / ref);
}

// Rows [first, first + n) of a weight matrix of `cols` columns decoded to fp32.
inline std::vector<float> DecodeRows(quant::GgmlType type, const uint8_t* data, int64_t cols,
                                     int64_t first, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n * cols));
  const int64_t row_bytes = quant::RowBytes(type, cols);
  for (int64_t r = 0; r < n; ++r) {
    quant::DequantizeRow(type, data + (first + r) * row_bytes, &out[r * cols], cols);
  }
  return out;
}

}  // namespace tandem::experts
