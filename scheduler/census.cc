#include "scheduler/census.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::scheduler {
namespace {

std::vector<uint64_t> SortedCounts(const Census& c, int layer) {
  std::vector<uint64_t> v(c.counts.begin() + size_t(layer) * c.n_expert,
                          c.counts.begin() + size_t(layer + 1) * c.n_expert);
  std::sort(v.begin(), v.end(), std::greater<>());
  return v;
}

}  // namespace

std::vector<double> Census::Probabilities() const {
  std::vector<double> p(counts.size(), 0.0);
  if (tokens == 0) return p;
  for (size_t i = 0; i < counts.size(); ++i) p[i] = double(counts[i]) / double(tokens);
  return p;
}

double Census::TopShare(int layer, double fraction) const {
  const std::vector<uint64_t> v = SortedCounts(*this, layer);
  const uint64_t total = std::accumulate(v.begin(), v.end(), uint64_t{0});
  if (total == 0) return 0;
  const size_t n = std::min(v.size(), size_t(std::ceil(fraction * n_expert - 1e-9)));
  return double(std::accumulate(v.begin(), v.begin() + n, uint64_t{0})) / double(total);
}

double Census::ExpertsForShare(int layer, double share) const {
  const std::vector<uint64_t> v = SortedCounts(*this, layer);
  const uint64_t total = std::accumulate(v.begin(), v.end(), uint64_t{0});
  if (total == 0) return 0;
  uint64_t sum = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    if (double(sum) >= share * double(total) - 1e-9) return double(i + 1) / n_expert;
  }
  return 1.0;
}

double Census::MeanTopShare(double fraction) const {
  double s = 0;
  for (int l = 0; l < n_layer; ++l) s += TopShare(l, fraction);
  return n_layer > 0 ? s / n_layer : 0;
}

double Census::MeanExpertsForShare(double share) const {
  double s = 0;
  for (int l = 0; l < n_layer; ++l) s += ExpertsForShare(l, share);
  return n_layer > 0 ? s / n_layer : 0;
}

int Census::MedianReuseDistance() const {
  const uint64_t total = std::accumulate(reuse.begin(), reuse.end(), reuse_overflow);
  if (total == 0) return 0;
  uint64_t sum = 0;
  for (size_t d = 0; d < reuse.size(); ++d) {
    sum += reuse[d];
    if (2 * sum >= total) return int(d + 1);
  }
  return kMaxReuseDistance + 1;
}

Census ComputeCensus(const RoutingTrace& trace) {
  Census c;
  c.model_name = trace.header.model_name;
  c.model_fingerprint = trace.header.model_fingerprint;
  c.n_layer = trace.n_layer();
  c.n_expert = trace.n_expert();
  c.k = trace.k();
  c.tokens = trace.n_tokens();
  const size_t cells = size_t(c.n_layer) * c.n_expert;
  c.counts.assign(cells, 0);
  c.mass.assign(cells, 0.0);
  c.reuse.assign(kMaxReuseDistance, 0);
  // Per sequence: the position at which each (layer, expert) was last chosen (-1: never), and the
  // last position seen, so that a sequence that starts over is treated as new.
  struct SeqState {
    std::vector<int64_t> last;
    int64_t last_pos = -1;
  };
  std::unordered_map<uint32_t, SeqState> seqs;
  for (size_t t = 0; t < trace.n_tokens(); ++t) {
    SeqState& s = seqs[trace.sequence[t]];
    const int64_t pos = trace.position[t];
    if (s.last.empty() || pos <= s.last_pos) s.last.assign(cells, -1);
    s.last_pos = pos;
    for (int l = 0; l < c.n_layer; ++l) {
      std::span<const uint16_t> ids = trace.Ids(t, l);
      std::span<const float> w = trace.Weights(t, l);
      for (size_t i = 0; i < ids.size(); ++i) {
        // A router never picks one expert twice for a token; count a duplicate once.
        if (std::find(ids.begin(), ids.begin() + i, ids[i]) != ids.begin() + i) continue;
        const size_t cell = size_t(l) * c.n_expert + ids[i];
        c.counts[cell] += 1;
        c.mass[cell] += w[i];
        const int64_t prev = s.last[cell];
        if (prev < 0) {
          c.first_use += 1;
        } else if (pos - prev <= kMaxReuseDistance) {
          c.reuse[pos - prev - 1] += 1;
        } else {
          c.reuse_overflow += 1;
        }
        s.last[cell] = pos;
      }
    }
  }
  c.sequences = seqs.size();
  return c;
}

nlohmann::json CensusToJson(const Census& c) {
  nlohmann::json j;
  j["format"] = "tandem-census";
  j["version"] = 1;
  j["model_name"] = c.model_name;
  j["model_fingerprint"] = absl::StrFormat("%016x", c.model_fingerprint);
  j["n_layer"] = c.n_layer;
  j["n_expert"] = c.n_expert;
  j["k"] = c.k;
  j["tokens"] = c.tokens;
  j["sequences"] = c.sequences;
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < c.n_layer; ++l) {
    nlohmann::json layer;
    layer["layer"] = l;
    layer["counts"] = std::vector<uint64_t>(c.counts.begin() + size_t(l) * c.n_expert,
                                            c.counts.begin() + size_t(l + 1) * c.n_expert);
    std::vector<double> mass(c.mass.begin() + size_t(l) * c.n_expert,
                             c.mass.begin() + size_t(l + 1) * c.n_expert);
    for (double& m : mass) m = std::round(m * 1e4) / 1e4;
    layer["mass"] = mass;
    nlohmann::json conc;
    for (int pct : kConcentrationPercents) conc[absl::StrCat("top", pct)] = c.TopShare(l, pct / 100.0);
    layer["concentration"] = conc;
    layer["experts_for_90"] = c.ExpertsForShare(l, 0.9);
    layers.push_back(std::move(layer));
  }
  j["layers"] = std::move(layers);
  nlohmann::json reuse;
  reuse["histogram"] = c.reuse;
  reuse["overflow"] = c.reuse_overflow;
  reuse["first_use"] = c.first_use;
  reuse["median"] = c.MedianReuseDistance();
  j["reuse_distance"] = std::move(reuse);
  return j;
}

absl::StatusOr<Census> CensusFromJson(const nlohmann::json& j, const std::string& name) {
  try {
    if (j.value("format", "") != "tandem-census" || j.value("version", 0) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": not a tandem census (format tandem-census, version 1)"));
    }
    Census c;
    c.model_name = j.at("model_name").get<std::string>();
    c.model_fingerprint = std::stoull(j.at("model_fingerprint").get<std::string>(), nullptr, 16);
    c.n_layer = j.at("n_layer").get<int>();
    c.n_expert = j.at("n_expert").get<int>();
    c.k = j.at("k").get<int>();
    c.tokens = j.at("tokens").get<uint64_t>();
    c.sequences = j.at("sequences").get<uint64_t>();
    if (c.n_layer <= 0 || c.n_expert <= 0 || c.n_expert > 65536 || c.k <= 0 || c.k > c.n_expert ||
        j.at("layers").size() != size_t(c.n_layer)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": census sizes are inconsistent"));
    }
    for (int l = 0; l < c.n_layer; ++l) {
      const nlohmann::json& layer = j.at("layers").at(l);
      auto counts = layer.at("counts").get<std::vector<uint64_t>>();
      auto mass = layer.at("mass").get<std::vector<double>>();
      if (counts.size() != size_t(c.n_expert) || mass.size() != size_t(c.n_expert)) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": layer ", l, " has ", counts.size(),
                                                       " counts, expected ", c.n_expert));
      }
      c.counts.insert(c.counts.end(), counts.begin(), counts.end());
      c.mass.insert(c.mass.end(), mass.begin(), mass.end());
    }
    const nlohmann::json& r = j.at("reuse_distance");
    c.reuse = r.at("histogram").get<std::vector<uint64_t>>();
    c.reuse.resize(kMaxReuseDistance, 0);
    c.reuse_overflow = r.at("overflow").get<uint64_t>();
    c.first_use = r.at("first_use").get<uint64_t>();
    return c;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad census JSON: ", e.what()));
  }
}

absl::StatusOr<Census> ReadCensus(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open census"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return CensusFromJson(j, path);
}

std::string CensusSummary(const Census& c) {
  std::string out = absl::StrFormat(
      "census of %s: %u tokens in %u sequences, %d layers x %d experts, top-%d\n", c.model_name,
      c.tokens, c.sequences, c.n_layer, c.n_expert, c.k);
  absl::StrAppend(&out, "layer   top10%  top25%  top41%  top50%  experts for 90%\n");
  auto row = [&](const std::string& label, auto share, double need) {
    absl::StrAppend(&out, absl::StrFormat("%-6s %6.1f%% %6.1f%% %6.1f%% %6.1f%%  %6.1f%%\n", label,
                                          100 * share(0.10), 100 * share(0.25), 100 * share(0.41),
                                          100 * share(0.50), 100 * need));
  };
  for (int l = 0; l < c.n_layer; ++l) {
    row(absl::StrCat(l), [&](double f) { return c.TopShare(l, f); }, c.ExpertsForShare(l, 0.9));
  }
  row("mean", [&](double f) { return c.MeanTopShare(f); }, c.MeanExpertsForShare(0.9));
  const uint64_t reuses = std::accumulate(c.reuse.begin(), c.reuse.end(), c.reuse_overflow);
  const uint64_t routes = reuses + c.first_use;
  auto within = [&](int d) {
    uint64_t s = 0;
    for (int i = 0; i < d && i < kMaxReuseDistance; ++i) s += c.reuse[i];
    return routes ? 100.0 * double(s) / double(routes) : 0.0;
  };
  absl::StrAppend(&out, absl::StrFormat(
                            "reuse distance: median %d tokens; routes reusing an expert of the "
                            "last 1/2/4/16 tokens: %.1f%% / %.1f%% / %.1f%% / %.1f%%; first use "
                            "in the sequence: %.1f%%\n",
                            c.MedianReuseDistance(), within(1), within(2), within(4), within(16),
                            routes ? 100.0 * double(c.first_use) / double(routes) : 0.0));
  return out;
}

}  // namespace tandem::scheduler
