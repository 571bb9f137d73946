// The census: what a routing log says about expert popularity and temporal reuse, the input of the
// placement planner. Computed from a RoutingTrace, written to and read from census.json
// (docs/formats/census.md). It knows nothing about bytes or budgets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "scheduler/routing_trace.h"

namespace tandem::scheduler {

// Reuse distances 1..kMaxReuseDistance get their own bin; longer ones share an overflow bin.
inline constexpr int kMaxReuseDistance = 256;
// The concentration points the census reports: share of routes on the top x% of experts.
inline constexpr int kConcentrationPercents[] = {10, 25, 41, 50};

struct Census {
  std::string model_name;
  uint64_t model_fingerprint = 0;
  int n_layer = 0;
  int n_expert = 0;
  int k = 0;
  uint64_t tokens = 0;
  uint64_t sequences = 0;
  std::vector<uint64_t> counts;  // [layer][expert]: tokens that routed to the expert
  std::vector<double> mass;      // [layer][expert]: summed router weight
  // reuse[d-1] for d = 1..kMaxReuseDistance: routes whose expert was last chosen by the same layer
  // d tokens earlier in the same sequence; reuse_overflow: farther; first_use: never before.
  std::vector<uint64_t> reuse;
  uint64_t reuse_overflow = 0;
  uint64_t first_use = 0;

  uint64_t count(int layer, int expert) const { return counts[size_t(layer) * n_expert + expert]; }
  // Probability that a token routes to the expert (count / tokens); sums to k over a layer.
  std::vector<double> Probabilities() const;
  // Share of the layer's routes covered by its top `fraction` of experts (ceil(fraction*E)).
  double TopShare(int layer, double fraction) const;
  // Smallest fraction of the layer's experts that covers `share` of its routes.
  double ExpertsForShare(int layer, double share) const;
  // Averages of the two above over layers.
  double MeanTopShare(double fraction) const;
  double MeanExpertsForShare(double share) const;
  // Median reuse distance over reuse events (overflow counts as beyond the last bin); 0 if none.
  int MedianReuseDistance() const;
};

Census ComputeCensus(const RoutingTrace& trace);
nlohmann::json CensusToJson(const Census& census);
absl::StatusOr<Census> CensusFromJson(const nlohmann::json& json, const std::string& name);
absl::StatusOr<Census> ReadCensus(const std::string& path);
// A readable table: per layer concentration, then the reuse summary.
std::string CensusSummary(const Census& census);

}  // namespace tandem::scheduler
