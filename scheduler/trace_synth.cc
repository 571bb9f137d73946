#include "scheduler/trace_synth.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::scheduler {
namespace {

// The presets. Constants were tuned by measuring Calibrate() on 48x512 top-10 traces (the
// flash-next-125b shape); trace_synth_test.cc checks the targets.
const std::vector<TracePreset>& Presets() {
  static const std::vector<TracePreset> presets = [] {
    std::vector<TracePreset> v;
    TracePreset skewed;
    skewed.name = "census-skewed";  // ~41% of experts carry ~92% of routes
    skewed.sigma_global = 1.55;  // 12x512 top-10, 8192 tokens: top 41% carry 92.2%
    skewed.sigma_domain = 0.3;
    skewed.sigma_sequence = 0.3;
    skewed.reuse_bonus = 1.0;
    skewed.reuse_decay = 1.0;
    skewed.n_domains = 4;
    v.push_back(skewed);
    TracePreset mild;
    mild.name = "mild-skew-high-reuse";  // 45-51% for 90%; median reuse 2; static 70% vs 92%
    // Measured with Calibrate(), 12288 tokens, 512 experts top-10: 12 layers: 48.9% of experts
    // for 90%, median reuse 2, static 40% set 69.4%, per-prompt 95.9%; 48 layers: 48.2%, 2,
    // 72.0%, 96.2%. The per-prompt set lands ~4 points above the ~92% target: in this model a
    // prompt's own skew that brings the static set down to 70% also sharpens the per-prompt set.
    mild.sigma_global = 1.0;
    mild.sigma_domain = 0.3;
    mild.sigma_sequence = 1.5;
    mild.reuse_bonus = 1.5;
    mild.reuse_decay = 1.5;
    mild.n_domains = 8;
    mild.sequence_tokens = 1024;
    v.push_back(mild);
    return v;
  }();
  return presets;
}

std::vector<double> Normals(std::mt19937_64& rng, size_t n, double sigma) {
  std::normal_distribution<double> nd(0.0, sigma);
  std::vector<double> v(n);
  for (double& x : v) x = sigma > 0 ? nd(rng) : 0.0;
  return v;
}

}  // namespace

std::vector<std::string> TracePresetNames() {
  std::vector<std::string> names;
  for (const TracePreset& p : Presets()) names.push_back(p.name);
  return names;
}

absl::StatusOr<TracePreset> FindTracePreset(const std::string& name) {
  for (const TracePreset& p : Presets()) {
    if (p.name == name) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown trace preset '", name, "' (choose ",
                                                 absl::StrJoin(TracePresetNames(), ", "), ")"));
}

RoutingTrace SynthesizeTrace(const RoutingLogHeader& header, uint64_t tokens,
                             const TracePreset& preset, uint64_t seed) {
  RoutingTrace trace;
  trace.header = header;
  const int L = int(header.n_layer), E = int(header.n_expert), K = int(header.n_expert_used);
  const size_t cells = size_t(L) * E;
  std::mt19937_64 rng(seed);
  const std::vector<double> global = Normals(rng, cells, preset.sigma_global);
  std::vector<std::vector<double>> domains;
  for (int d = 0; d < std::max(1, preset.n_domains); ++d) {
    domains.push_back(Normals(rng, cells, preset.sigma_domain));
  }
  std::uniform_real_distribution<double> uni(1e-12, 1.0);
  std::uniform_int_distribution<int> pick_domain(0, std::max(1, preset.n_domains) - 1);
  std::vector<double> base(cells), score(E);
  std::vector<int64_t> last_used(cells, -1);
  std::vector<int> order(E);
  // Bonus by age 1..window.
  std::vector<double> bonus(preset.reuse_window + 1, 0.0);
  for (int a = 1; a <= preset.reuse_window; ++a) {
    bonus[a] = preset.reuse_bonus * std::exp(-(a - 1) / std::max(1e-9, preset.reuse_decay));
  }
  const size_t routes = size_t(L) * K;
  trace.ids.reserve(tokens * routes);
  trace.weights.reserve(tokens * routes);
  uint32_t seq = 0;
  int64_t pos = 0;
  for (uint64_t t = 0; t < tokens; ++t) {
    if (t == 0 || pos == preset.sequence_tokens) {
      if (t > 0) ++seq;
      pos = 0;
      const std::vector<double>& dom = domains[pick_domain(rng)];
      const std::vector<double> own = Normals(rng, cells, preset.sigma_sequence);
      for (size_t i = 0; i < cells; ++i) base[i] = global[i] + dom[i] + own[i];
      std::fill(last_used.begin(), last_used.end(), -1);
    }
    trace.sequence.push_back(seq);
    trace.position.push_back(uint32_t(pos));
    trace.token.push_back(int32_t(rng() % 50000));
    for (int l = 0; l < L; ++l) {
      const size_t row = size_t(l) * E;
      for (int e = 0; e < E; ++e) {
        double logit = base[row + e];
        const int64_t lu = last_used[row + e];
        if (lu >= 0 && pos - lu <= preset.reuse_window) logit += bonus[pos - lu];
        score[e] = logit - std::log(-std::log(uni(rng)));  // + Gumbel noise
      }
      for (int e = 0; e < E; ++e) order[e] = e;
      std::partial_sort(order.begin(), order.begin() + K, order.end(),
                        [&](int a, int b) { return score[a] > score[b]; });
      double sum = 0;
      for (int i = 0; i < K; ++i) sum += std::exp(base[row + order[i]] - base[row + order[0]]);
      for (int i = 0; i < K; ++i) {
        trace.ids.push_back(uint16_t(order[i]));
        trace.weights.push_back(float(std::exp(base[row + order[i]] - base[row + order[0]]) / sum));
        last_used[row + order[i]] = pos;
      }
    }
    ++pos;
  }
  return trace;
}

CalibrationReport Calibrate(const RoutingTrace& trace) {
  CalibrationReport r;
  const Census all = ComputeCensus(trace);
  r.top41_share = all.MeanTopShare(0.41);
  r.experts_for_90 = all.MeanExpertsForShare(0.9);
  r.median_reuse_distance = all.MedianReuseDistance();
  const RoutingTrace learn = SplitBySequence(trace, false);
  const RoutingTrace test = SplitBySequence(trace, true);
  const Census learned = ComputeCensus(learn);
  const int L = trace.n_layer(), E = trace.n_expert();
  const int top = int(std::ceil(0.4 * E - 1e-9));
  auto top_set = [&](const std::vector<uint64_t>& counts, int l) {
    std::vector<int> ids(E);
    for (int e = 0; e < E; ++e) ids[e] = e;
    std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) {
      return counts[size_t(l) * E + a] > counts[size_t(l) * E + b];
    });
    std::vector<uint8_t> in(E, 0);
    for (int i = 0; i < top; ++i) in[ids[i]] = 1;
    return in;
  };
  // Static: learned on the even sequences, measured on the odd ones.
  uint64_t hit = 0, total = 0;
  std::vector<std::vector<uint8_t>> sets;
  for (int l = 0; l < L; ++l) sets.push_back(top_set(learned.counts, l));
  for (size_t t = 0; t < test.n_tokens(); ++t) {
    for (int l = 0; l < L; ++l) {
      for (uint16_t e : test.Ids(t, l)) hit += sets[l][e], ++total;
    }
  }
  r.static_cover_40 = total ? double(hit) / double(total) : 0;
  // Per prompt: each odd sequence's own census.
  std::unordered_map<uint32_t, std::vector<uint64_t>> per_seq;
  for (size_t t = 0; t < test.n_tokens(); ++t) {
    auto& c = per_seq[test.sequence[t]];
    if (c.empty()) c.assign(size_t(L) * E, 0);
    for (int l = 0; l < L; ++l) {
      for (uint16_t e : test.Ids(t, l)) c[size_t(l) * E + e] += 1;
    }
  }
  double cover = 0;
  int n = 0;
  for (const auto& [s, counts] : per_seq) {
    for (int l = 0; l < L; ++l) {
      const std::vector<uint8_t> set = top_set(counts, l);
      uint64_t h = 0, all_routes = 0;
      for (int e = 0; e < E; ++e) {
        all_routes += counts[size_t(l) * E + e];
        if (set[e]) h += counts[size_t(l) * E + e];
      }
      if (all_routes) cover += double(h) / double(all_routes), ++n;
    }
  }
  r.per_prompt_cover_40 = n ? cover / n : 0;
  return r;
}

}  // namespace tandem::scheduler
