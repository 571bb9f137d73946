// Order statistics of a sample, for the benchmarks' reports.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace tandem {

// The element at fraction q of v in ascending order (q = 0.5: the upper median, 1: the largest).
// v must not be empty.
inline double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto at = static_cast<size_t>(q * static_cast<double>(v.size()));
  return v[std::min(v.size() - 1, at)];
}

inline double Median(std::vector<double> v) { return Quantile(std::move(v), 0.5); }

}  // namespace tandem
