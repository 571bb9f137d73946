// The block formats as a GoogleTest type list, named by their ggml type names, plus helpers shared
// by the quant tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/quant/blocks.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::quant {

using BlockTypes =
    ::testing::Types<BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ2K, BlockQ3K,
                     BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, BlockIQ4NL, BlockIQ4XS, BlockMXFP4>;

struct BlockTypeNames {
  template <typename Block>
  static std::string GetName(int) {
    return GetTypeInfo(Block::kType).name;
  }
};

// A fresh seed per run, so the tests see new data every time; print it with SCOPED_TRACE so a
// failure can be replayed.
inline uint64_t FreshSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

inline std::vector<float> GaussianData(uint64_t seed, int64_t n) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// sqrt(Σ(x − y)² / Σx²).
inline double RelativeRmsError(const std::vector<float>& x, const std::vector<float>& y) {
  double error = 0, signal = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    error += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    signal += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(error / signal);
}

}  // namespace tandem::quant
