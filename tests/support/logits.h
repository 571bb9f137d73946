// Helpers of the logit diff tests (reference vs transformers, GPU vs reference): reading the
// committed fixtures' raw fp32 files and the max-norm distances the tests bound. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

namespace tandem::testing_support {

// A whole file of little-endian fp32 values.
inline std::vector<float> ReadF32(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v(std::filesystem::file_size(path) / sizeof(float));
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

// max |v|
inline double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

// max |a − b| (a size mismatch fails the calling test).
inline double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// max |a − b| / max |b|
inline double RelMaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  return MaxDiff(a, b) / MaxAbs(b);
}

}  // namespace tandem::testing_support
