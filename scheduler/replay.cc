#include "scheduler/replay.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::scheduler {
namespace {

// Accumulates per-token model time and per-layer hit counts.
class Tally {
 public:
  Tally(const CostInputs& in, std::string name) : in_(in) {
    result_.name = std::move(name);
    layer_hits_.assign(in.n_layer, 0);
    layer_routes_.assign(in.n_layer, 0);
  }
  // Adds one layer of the current token.
  void Layer(int l, int hits, int misses) {
    const Ceilings& c = in_.ceilings;
    const double b = double(in_.bytes_per_expert[l]);
    const double gpu = (double(in_.dense_layer_bytes[l]) + b * hits) / c.hbm_bytes_per_s;
    const double cpu = b * misses / c.host_bytes_per_s + (misses > 0 ? c.handoff_s : 0.0);
    token_s_ += std::max(gpu, cpu);
    layer_hits_[l] += hits;
    layer_routes_[l] += hits + misses;
  }
  void EndToken(uint64_t migrated_bytes) {
    const Ceilings& c = in_.ceilings;
    const double compute = token_s_ + double(in_.output_bytes) / c.hbm_bytes_per_s;
    total_s_ += std::max(compute, double(migrated_bytes) / c.pcie_bytes_per_s);
    result_.migrated_bytes += migrated_bytes;
    token_s_ = 0;
    ++tokens_;
  }
  PolicyResult Finish(uint64_t resident_bytes) {
    result_.resident_bytes = resident_bytes;
    for (int l = 0; l < in_.n_layer; ++l) {
      result_.hits += layer_hits_[l];
      result_.routes += layer_routes_[l];
      result_.layer_hit_rate.push_back(
          layer_routes_[l] ? double(layer_hits_[l]) / double(layer_routes_[l]) : 0.0);
    }
    result_.mean_step_s = tokens_ ? total_s_ / double(tokens_) : 0;
    return result_;
  }

 private:
  const CostInputs& in_;
  PolicyResult result_;
  std::vector<uint64_t> layer_hits_, layer_routes_;
  double token_s_ = 0, total_s_ = 0;
  uint64_t tokens_ = 0;
};

std::vector<int> UniformCapacity(const CostInputs& in, uint64_t budget) {
  const std::vector<uint8_t> uniform = ChooseResidents(in, budget, Policy::kUniform);
  std::vector<int> cap(in.n_layer, 0);
  for (size_t i = 0; i < uniform.size(); ++i) cap[i / in.n_expert] += uniform[i];
  return cap;
}

}  // namespace

PolicyResult ReplayStatic(const CostInputs& in, const std::vector<uint8_t>& resident,
                          const RoutingTrace& trace, const std::string& name) {
  Tally tally(in, name);
  for (size_t t = 0; t < trace.n_tokens(); ++t) {
    for (int l = 0; l < in.n_layer; ++l) {
      int hits = 0, misses = 0;
      for (uint16_t e : trace.Ids(t, l)) (resident[size_t(l) * in.n_expert + e] ? hits : misses)++;
      tally.Layer(l, hits, misses);
    }
    tally.EndToken(0);
  }
  return tally.Finish(ResidentBytes(in, resident));
}

PolicyResult ReplayCache(const CostInputs& in, const std::vector<int>& capacity,
                         const RoutingTrace& trace, bool lfru, const ReplayOptions& options) {
  const int L = in.n_layer, E = in.n_expert;
  Tally tally(in, lfru ? "lfru" : "lru");
  // Eviction order per layer: the smallest key goes first. LRU: key = last access time. LFRU: key =
  // log2(decayed count at last access) + last access / half-life, which orders experts as their
  // decayed counts would at any common later time.
  const double h = options.lfru_half_life;
  std::vector<std::set<std::pair<double, int>>> order(L);
  std::vector<double> key(size_t(L) * E, 0), last(size_t(L) * E, 0), count(size_t(L) * E, 0);
  std::vector<uint8_t> resident(size_t(L) * E, 0);
  uint64_t max_bytes = 0;
  for (int l = 0; l < L; ++l) {
    std::vector<int> ids(E);
    std::iota(ids.begin(), ids.end(), 0);
    const double* p = in.prob.data() + size_t(l) * E;
    std::stable_sort(ids.begin(), ids.end(), [p](int a, int b) { return p[a] > p[b]; });
    for (int r = 0; r < std::min(E, capacity[l]); ++r) {
      const size_t i = size_t(l) * E + ids[r];
      resident[i] = 1;
      // Warm start: more probable experts look more recent / more frequent.
      count[i] = p[ids[r]] * h / std::log(2.0) + 1e-9;
      last[i] = 0;
      key[i] = lfru ? std::log2(count[i]) : -double(r);
      order[l].insert({key[i], ids[r]});
    }
    max_bytes += uint64_t(std::min(E, capacity[l])) * in.bytes_per_expert[l];
  }
  for (size_t t = 0; t < trace.n_tokens(); ++t) {
    uint64_t migrated = 0;
    const double now = double(t + 1);
    for (int l = 0; l < L; ++l) {
      std::span<const uint16_t> ids = trace.Ids(t, l);
      int hits = 0, misses = 0;
      for (uint16_t e : ids) (resident[size_t(l) * E + e] ? hits : misses)++;
      tally.Layer(l, hits, misses);
      // Hits refresh their keys first, so that a miss of the same token never evicts them.
      std::array<std::vector<uint16_t>, 2> by_kind;
      for (uint16_t e : ids) by_kind[resident[size_t(l) * E + e] ? 0 : 1].push_back(e);
      for (const std::vector<uint16_t>& kind : by_kind) for (uint16_t e : kind) {
        const size_t i = size_t(l) * E + e;
        if (capacity[l] <= 0) break;
        if (resident[i]) {
          order[l].erase({key[i], e});
        } else {
          if (int(order[l].size()) >= capacity[l]) {
            const int victim = order[l].begin()->second;
            order[l].erase(order[l].begin());
            resident[size_t(l) * E + victim] = 0;
          }
          resident[i] = 1;
          migrated += in.bytes_per_expert[l];
        }
        count[i] = count[i] * std::exp2(-(now - last[i]) / h) + 1.0;
        last[i] = now;
        key[i] = lfru ? std::log2(count[i]) + now / h : now;
        order[l].insert({key[i], e});
      }
    }
    tally.EndToken(migrated);
  }
  return tally.Finish(max_bytes);
}

PolicyResult ReplayOnline(const CostInputs& in, uint64_t expert_budget,
                          const std::vector<uint8_t>& initial, const RoutingTrace& trace,
                          const ReplayOptions& options) {
  const int L = in.n_layer, E = in.n_expert;
  Tally tally(in, "online");
  std::vector<uint8_t> resident = initial;
  std::vector<double> window_counts(size_t(L) * E, 0);
  const size_t window = size_t(std::max(1, options.window));
  const size_t every = size_t(std::max(1, options.replan_every));
  CostInputs blended = in;
  uint64_t max_bytes = ResidentBytes(in, resident);
  for (size_t t = 0; t < trace.n_tokens(); ++t) {
    uint64_t migrated = 0;
    if (t > 0 && t % every == 0) {
      // Census prior worth `window` tokens, plus the recent window.
      const double seen = double(std::min(t, window));
      for (size_t i = 0; i < blended.prob.size(); ++i) {
        blended.prob[i] = (in.prob[i] * double(window) + window_counts[i]) / (double(window) + seen);
      }
      std::vector<uint8_t> next = ChooseResidents(blended, expert_budget, Policy::kPlanner);
      for (size_t i = 0; i < next.size(); ++i) {
        if (next[i] && !resident[i]) migrated += in.bytes_per_expert[i / E];
      }
      resident = std::move(next);
      max_bytes = std::max(max_bytes, ResidentBytes(in, resident));
    }
    for (int l = 0; l < L; ++l) {
      int hits = 0, misses = 0;
      for (uint16_t e : trace.Ids(t, l)) {
        (resident[size_t(l) * E + e] ? hits : misses)++;
        window_counts[size_t(l) * E + e] += 1;
      }
      tally.Layer(l, hits, misses);
    }
    if (t >= window) {
      for (int l = 0; l < L; ++l) {
        for (uint16_t e : trace.Ids(t - window, l)) window_counts[size_t(l) * E + e] -= 1;
      }
    }
    tally.EndToken(migrated);
  }
  return tally.Finish(max_bytes);
}

absl::Status CheckTraceMatchesPlan(const Plan& plan, const RoutingTrace& trace,
                                   const std::string& trace_name) {
  const RoutingLogHeader& h = trace.header;
  if (int(h.n_layer) != plan.inputs.n_layer || int(h.n_expert) != plan.inputs.n_expert ||
      int(h.n_expert_used) != plan.inputs.k ||
      (plan.model_fingerprint != 0 && h.model_fingerprint != plan.model_fingerprint)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: routing log of %s (fingerprint %016x, %u layers, %u experts, top-%u) does not match "
        "the plan for %s (fingerprint %016x, %d layers, %d experts, top-%d)",
        trace_name, h.model_name, h.model_fingerprint, h.n_layer, h.n_expert, h.n_expert_used,
        plan.model_name, plan.model_fingerprint, plan.inputs.n_layer, plan.inputs.n_expert,
        plan.inputs.k));
  }
  return absl::OkStatus();
}

std::vector<PolicyResult> ReplayAll(const Plan& plan, const RoutingTrace& trace,
                                    const ReplayOptions& options) {
  std::vector<PolicyResult> out;
  const CostInputs& in = plan.inputs;
  out.push_back(ReplayStatic(in, plan.resident, trace, "plan"));
  for (Policy p : {Policy::kPlanner, Policy::kFrequency, Policy::kUniform, Policy::kFirstLayersOnCpu}) {
    out.push_back(ReplayStatic(in, ChooseResidents(in, plan.expert_budget, p), trace, PolicyName(p)));
  }
  const std::vector<int> cap = UniformCapacity(in, plan.expert_budget);
  out.push_back(ReplayCache(in, cap, trace, /*lfru=*/false, options));
  out.push_back(ReplayCache(in, cap, trace, /*lfru=*/true, options));
  out.push_back(ReplayOnline(in, plan.expert_budget, plan.resident, trace, options));
  return out;
}

nlohmann::json ReplayToJson(const Plan& plan, const std::vector<PolicyResult>& results) {
  nlohmann::json j;
  j["plan_policy"] = PolicyName(plan.policy);
  j["model_name"] = plan.model_name;
  j["expert_budget"] = plan.expert_budget;
  j["plan_expected_hit_rate"] = plan.expected_hit_rate;
  j["plan_expected_step_s"] = plan.expected_step_s;
  nlohmann::json policies = nlohmann::json::array();
  nlohmann::json summary = nlohmann::json::object();
  for (const PolicyResult& r : results) {
    policies.push_back({{"policy", r.name},
                        {"routes", r.routes},
                        {"hits", r.hits},
                        {"hit_rate", r.hit_rate()},
                        {"layer_hit_rate", r.layer_hit_rate},
                        {"expected_step_s", r.mean_step_s},
                        {"expected_tok_s", r.tok_s()},
                        {"migrated_bytes", r.migrated_bytes},
                        {"resident_bytes", r.resident_bytes}});
    summary[r.name] = {{"hit_rate", r.hit_rate()}, {"expected_tok_s", r.tok_s()}};
  }
  j["policies"] = std::move(policies);
  j["summary"] = std::move(summary);  // last key written: nlohmann orders keys alphabetically
  return j;
}

std::string ReplayTable(const std::vector<PolicyResult>& results) {
  std::string out = "policy                hit rate   step (ms)   tok/s   migrated\n";
  for (const PolicyResult& r : results) {
    absl::StrAppend(&out, absl::StrFormat("%-20s %8.1f%% %11.3f %7.1f %10.2f GB\n", r.name,
                                          100 * r.hit_rate(), 1e3 * r.mean_step_s, r.tok_s(),
                                          r.migrated_bytes / 1e9));
  }
  return out;
}

std::vector<SweepPoint> Sweep(const Plan& plan, const RoutingTrace& trace,
                              const ReplayOptions& options, int points) {
  const CostInputs& in = plan.inputs;
  uint64_t all = 0;
  for (int l = 0; l < in.n_layer; ++l) all += in.bytes_per_expert[l] * uint64_t(in.n_expert);
  std::vector<SweepPoint> sweep;
  for (int i = 0; i < points; ++i) {
    SweepPoint pt;
    pt.expert_budget = points > 1 ? uint64_t(double(all) * i / (points - 1)) : all;
    for (Policy p : {Policy::kPlanner, Policy::kFrequency, Policy::kUniform, Policy::kFirstLayersOnCpu}) {
      pt.results.push_back(
          ReplayStatic(in, ChooseResidents(in, pt.expert_budget, p), trace, PolicyName(p)));
    }
    const std::vector<int> cap = UniformCapacity(in, pt.expert_budget);
    pt.results.push_back(ReplayCache(in, cap, trace, false, options));
    pt.results.push_back(ReplayCache(in, cap, trace, true, options));
    pt.results.push_back(ReplayOnline(in, pt.expert_budget,
                                      ChooseResidents(in, pt.expert_budget, Policy::kPlanner), trace,
                                      options));
    sweep.push_back(std::move(pt));
  }
  return sweep;
}

namespace {
std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}
}  // namespace

std::string SweepSvg(const std::vector<SweepPoint>& sweep, const std::string& title) {
  const double W = 960, H = 420, panel_w = 400, panel_h = 300, top = 60, left0 = 70, gap = 80;
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};
  double max_x = 1, max_tok = 1e-9;
  for (const SweepPoint& p : sweep) {
    max_x = std::max(max_x, double(p.expert_budget) / double(1ull << 30));
    for (const PolicyResult& r : p.results) max_tok = std::max(max_tok, r.tok_s());
  }
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" font-size=\"15\">%s</text>\n",
      W, H, W, H, left0, Escape(title));
  for (int panel = 0; panel < 2; ++panel) {
    const double x0 = left0 + panel * (panel_w + gap), y0 = top;
    const double ymax = panel == 0 ? 1.0 : max_tok * 1.05;
    absl::StrAppend(&svg, absl::StrFormat(
                              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                              "fill=\"none\" stroke=\"black\"/>\n",
                              x0, y0, panel_w, panel_h));
    absl::StrAppend(&svg, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", x0, y0 - 8,
                                          panel == 0 ? "hit rate" : "expected tok/s"));
    absl::StrAppend(&svg, absl::StrFormat(
                              "<text x=\"%.1f\" y=\"%.1f\">expert budget (GiB)</text>\n",
                              x0 + panel_w / 2 - 50, y0 + panel_h + 34));
    for (int t = 0; t <= 4; ++t) {
      const double fx = t / 4.0;
      absl::StrAppend(&svg, absl::StrFormat(
                                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.1f</text>\n",
                                x0 + fx * panel_w, y0 + panel_h + 16, fx * max_x));
      absl::StrAppend(&svg, absl::StrFormat(
                                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n",
                                x0 - 6, y0 + panel_h - fx * panel_h + 4, panel == 0 ? 2 : 0,
                                fx * ymax));
    }
    if (sweep.empty()) continue;
    for (size_t s = 0; s < sweep[0].results.size(); ++s) {
      std::string pts;
      for (const SweepPoint& p : sweep) {
        const PolicyResult& r = p.results[s];
        const double fx = double(p.expert_budget) / double(1ull << 30) / max_x;
        const double fy = (panel == 0 ? r.hit_rate() : r.tok_s()) / ymax;
        absl::StrAppend(&pts, absl::StrFormat("%.1f,%.1f ", x0 + fx * panel_w,
                                              y0 + panel_h - fy * panel_h));
      }
      absl::StrAppend(&svg, absl::StrFormat(
                                "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                                "points=\"%s\"/>\n",
                                colors[s % 7], pts));
    }
  }
  if (!sweep.empty()) {
    for (size_t s = 0; s < sweep[0].results.size(); ++s) {
      const double x = left0 + s * 120.0, y = H - 16;
      absl::StrAppend(&svg, absl::StrFormat(
                                "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"%s\"/>\n"
                                "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                                x, y - 4, colors[s % 7], x + 18, y, Escape(sweep[0].results[s].name)));
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tandem::scheduler
