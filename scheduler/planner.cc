#include "scheduler/planner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/base/sizes.h"
#include "runtime/model/tensor_map.h"
#include "runtime/model/validate.h"

namespace tandem::scheduler {
namespace {

// One layer's running sums under a residency table: the terms of G_l and C_l.
struct LayerSums {
  double res = 0;        // summed probability of resident experts
  double off = 0;        // summed probability of off-card experts
  double log_off = 0;    // sum of log(1 - p) over off-card experts with p < 1
  int certain_off = 0;   // off-card experts with p >= 1 (always hit)

  void Move(double p, bool to_resident) {
    const double sign = to_resident ? 1 : -1;
    res += sign * p;
    off -= sign * p;
    if (p >= 1) {
      certain_off -= to_resident ? 1 : -1;
    } else {
      log_off -= sign * std::log1p(-p);
    }
  }
};

double Clamp01(double p) { return std::min(1.0, std::max(0.0, p)); }

double LayerSeconds(const CostInputs& in, int l, const LayerSums& s) {
  const Ceilings& c = in.ceilings;
  const double b = double(in.bytes_per_expert[l]);
  const double gpu = (double(in.dense_layer_bytes[l]) + b * std::max(0.0, s.res)) / c.hbm_bytes_per_s;
  const double p_any = s.certain_off > 0 ? 1.0 : 1.0 - std::exp(std::min(0.0, s.log_off));
  const double cpu = b * std::max(0.0, s.off) / c.host_bytes_per_s + c.handoff_s * p_any;
  return std::max(gpu, cpu);
}

std::vector<LayerSums> SumsOf(const CostInputs& in, const std::vector<uint8_t>& resident) {
  std::vector<LayerSums> sums(in.n_layer);
  for (int l = 0; l < in.n_layer; ++l) {
    for (int e = 0; e < in.n_expert; ++e) {
      const size_t i = size_t(l) * in.n_expert + e;
      const double p = Clamp01(in.prob[i]);
      if (resident[i]) {
        sums[l].res += p;
      } else {
        sums[l].off += p;
        if (p >= 1) {
          sums[l].certain_off += 1;
        } else {
          sums[l].log_off += std::log1p(-p);
        }
      }
    }
  }
  return sums;
}

// Change of layer l's time when expert e moves in (to_resident) or out.
double MoveDelta(const CostInputs& in, int l, const LayerSums& s, int e, bool to_resident) {
  LayerSums t = s;
  t.Move(Clamp01(in.prob[size_t(l) * in.n_expert + e]), to_resident);
  return LayerSeconds(in, l, t) - LayerSeconds(in, l, s);
}

// Greedy by marginal gain per byte, then an exchange pass (drops, adds, one-for-one swaps within
// and across layers) until no move lowers the objective.
std::vector<uint8_t> PlanGreedy(const CostInputs& in, uint64_t budget) {
  const int L = in.n_layer, E = in.n_expert;
  std::vector<uint8_t> resident(size_t(L) * E, 0);
  std::vector<LayerSums> sums = SumsOf(in, resident);
  uint64_t used = 0;
  std::vector<int> best_e(L, -1);
  std::vector<double> best_gain(L, 0);
  auto refresh = [&](int l) {
    best_e[l] = -1;
    best_gain[l] = 0;
    if (used + in.bytes_per_expert[l] > budget) return;
    for (int e = 0; e < E; ++e) {
      if (resident[size_t(l) * E + e]) continue;
      const double gain = -MoveDelta(in, l, sums[l], e, true);
      if (gain > best_gain[l]) {
        best_gain[l] = gain;
        best_e[l] = e;
      }
    }
  };
  for (int l = 0; l < L; ++l) refresh(l);
  while (true) {
    int pick = -1;
    double best_ratio = 0;
    for (int l = 0; l < L; ++l) {
      if (best_e[l] < 0 || used + in.bytes_per_expert[l] > budget) continue;
      const double ratio = best_gain[l] / double(std::max<uint64_t>(1, in.bytes_per_expert[l]));
      if (ratio > best_ratio) {
        best_ratio = ratio;
        pick = l;
      }
    }
    if (pick < 0) break;
    const int e = best_e[pick];
    resident[size_t(pick) * E + e] = 1;
    sums[pick].Move(Clamp01(in.prob[size_t(pick) * E + e]), true);
    used += in.bytes_per_expert[pick];
    // Budget shrank for every layer; the picked layer's gains changed.
    for (int l = 0; l < L; ++l) {
      if (l == pick || used + in.bytes_per_expert[l] > budget) refresh(l);
    }
  }

  return resident;
}

// Exchange pass: drops, adds and one-for-one swaps within and across layers, best move first,
// until no move lowers the objective. Candidates per layer: the cheapest few drops, best few adds.
void ExchangePass(const CostInputs& in, uint64_t budget, std::vector<uint8_t>& resident) {
  const int L = in.n_layer, E = in.n_expert;
  uint64_t used = ResidentBytes(in, resident);
  std::vector<LayerSums> sums;
  const int kCandidates = std::min(E, 8);
  const double kEps = 1e-15;
  for (int round = 0; round < 64 * L; ++round) {
    sums = SumsOf(in, resident);
    std::vector<std::vector<std::pair<double, int>>> drops(L), adds(L);
    for (int l = 0; l < L; ++l) {
      for (int e = 0; e < E; ++e) {
        const bool r = resident[size_t(l) * E + e];
        const double d = MoveDelta(in, l, sums[l], e, !r);
        (r ? drops[l] : adds[l]).push_back({d, e});
      }
      for (auto* v : {&drops[l], &adds[l]}) {
        const size_t n = std::min<size_t>(v->size(), kCandidates);
        std::partial_sort(v->begin(), v->begin() + n, v->end());
        v->resize(n);
      }
    }
    double best = -kEps;
    int move_drop_l = -1, move_drop_e = -1, move_add_l = -1, move_add_e = -1;
    auto consider = [&](double delta, int dl, int de, int al, int ae) {
      if (delta < best) {
        best = delta;
        move_drop_l = dl, move_drop_e = de, move_add_l = al, move_add_e = ae;
      }
    };
    for (int l = 0; l < L; ++l) {
      for (auto [d, e] : drops[l]) consider(d, l, e, -1, -1);
      if (used + in.bytes_per_expert[l] <= budget) {
        for (auto [d, e] : adds[l]) consider(d, -1, -1, l, e);
      }
    }
    for (int a = 0; a < L; ++a) {
      for (auto [dd, de] : drops[a]) {
        for (int b = 0; b < L; ++b) {
          if (used - in.bytes_per_expert[a] + in.bytes_per_expert[b] > budget) continue;
          for (auto [ad, ae] : adds[b]) {
            double delta = dd + ad;
            if (a == b) {
              LayerSums t = sums[a];
              t.Move(Clamp01(in.prob[size_t(a) * E + de]), false);
              t.Move(Clamp01(in.prob[size_t(a) * E + ae]), true);
              delta = LayerSeconds(in, a, t) - LayerSeconds(in, a, sums[a]);
            }
            consider(delta, a, de, b, ae);
          }
        }
      }
    }
    // Within one layer: up to two out and two in at once (balancing its GPU and CPU sides can
    // need a set that no single move reaches).
    std::vector<std::pair<int, int>> group_out, group_in;  // (layer, expert)
    for (int l = 0; l < L; ++l) {
      const auto& dr = drops[l];
      const auto& ad = adds[l];
      std::vector<std::vector<int>> outs{{}}, ins{{}};
      for (size_t i = 0; i < dr.size(); ++i) {
        outs.push_back({dr[i].second});
        for (size_t j = i + 1; j < dr.size(); ++j) outs.push_back({dr[i].second, dr[j].second});
      }
      for (size_t i = 0; i < ad.size(); ++i) {
        ins.push_back({ad[i].second});
        for (size_t j = i + 1; j < ad.size(); ++j) ins.push_back({ad[i].second, ad[j].second});
      }
      const double now = LayerSeconds(in, l, sums[l]);
      for (const auto& o : outs) {
        for (const auto& a : ins) {
          if (o.size() + a.size() < 3) continue;  // singles and 1-for-1 are covered above
          if (used - o.size() * in.bytes_per_expert[l] + a.size() * in.bytes_per_expert[l] > budget) {
            continue;
          }
          LayerSums t = sums[l];
          for (int e : o) t.Move(Clamp01(in.prob[size_t(l) * E + e]), false);
          for (int e : a) t.Move(Clamp01(in.prob[size_t(l) * E + e]), true);
          const double delta = LayerSeconds(in, l, t) - now;
          if (delta < best) {
            best = delta;
            move_drop_l = move_add_l = -1;
            group_out.clear();
            group_in.clear();
            for (int e : o) group_out.push_back({l, e});
            for (int e : a) group_in.push_back({l, e});
          }
        }
      }
    }
    if (!group_out.empty() || !group_in.empty()) {
      if (move_drop_l < 0 && move_add_l < 0) {
        for (auto [l, e] : group_out) resident[size_t(l) * E + e] = 0, used -= in.bytes_per_expert[l];
        for (auto [l, e] : group_in) resident[size_t(l) * E + e] = 1, used += in.bytes_per_expert[l];
        continue;
      }
    }
    if (move_drop_l < 0 && move_add_l < 0) break;
    if (move_drop_l >= 0) {
      resident[size_t(move_drop_l) * E + move_drop_e] = 0;
      used -= in.bytes_per_expert[move_drop_l];
    }
    if (move_add_l >= 0) {
      resident[size_t(move_add_l) * E + move_add_e] = 1;
      used += in.bytes_per_expert[move_add_l];
    }
  }
}

// Exact over "each layer keeps its m most probable experts" when the budget in units of the
// experts' common byte divisor is small enough for a dynamic programme over layers; nullopt
// otherwise. Keeping a layer's most probable experts is optimal whenever that layer's CPU side is
// the slower one, which the exchange pass afterwards does not assume.
std::optional<std::vector<uint8_t>> PlanByLayers(const CostInputs& in, uint64_t budget) {
  const int L = in.n_layer, E = in.n_expert;
  uint64_t unit = 0;
  for (uint64_t b : in.bytes_per_expert) unit = std::gcd(unit, b);
  if (unit == 0 || E > 65535) return std::nullopt;
  const uint64_t units = budget / unit;
  // Bound on work (layers x budget units x experts) and on the choice table.
  if (units > (uint64_t{1} << 22) || double(L) * double(units + 1) * double(E + 1) > 2e9 ||
      double(L) * double(units + 1) > 6.4e7) {
    return std::nullopt;
  }
  const size_t U = size_t(units) + 1;
  std::vector<double> best(U, 0.0), next(U);
  std::vector<uint16_t> choice(size_t(L) * U, 0);
  std::vector<std::vector<int>> orders(L);
  for (int l = 0; l < L; ++l) {
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    const double* p = in.prob.data() + size_t(l) * E;
    std::stable_sort(order.begin(), order.end(), [p](int a, int b) { return p[a] > p[b]; });
    std::vector<double> t(E + 1);
    LayerSums s = SumsOf(in, std::vector<uint8_t>(size_t(L) * E, 0))[l];
    t[0] = LayerSeconds(in, l, s);
    for (int m = 1; m <= E; ++m) {
      s.Move(Clamp01(p[order[m - 1]]), true);
      t[m] = LayerSeconds(in, l, s);
    }
    const size_t cost = size_t(in.bytes_per_expert[l] / unit);
    for (size_t u = 0; u < U; ++u) {
      double v = best[u] + t[0];
      uint16_t pick = 0;
      for (int m = 1; m <= E && size_t(m) * cost <= u; ++m) {
        const double w = best[u - size_t(m) * cost] + t[m];
        if (w < v) v = w, pick = uint16_t(m);
      }
      next[u] = v;
      choice[size_t(l) * U + u] = pick;
    }
    best.swap(next);
    orders[l] = std::move(order);
  }
  std::vector<uint8_t> resident(size_t(L) * E, 0);
  size_t u = U - 1;
  for (int l = L - 1; l >= 0; --l) {
    const int m = choice[size_t(l) * U + u];
    for (int i = 0; i < m; ++i) resident[size_t(l) * E + orders[l][i]] = 1;
    u -= size_t(m) * size_t(in.bytes_per_expert[l] / unit);
  }
  return resident;
}

// The planner: the layer-wise optimum when it is tractable, else greedy; then the exchange pass.
std::vector<uint8_t> PlanResidents(const CostInputs& in, uint64_t budget) {
  std::optional<std::vector<uint8_t>> start = PlanByLayers(in, budget);
  std::vector<uint8_t> resident = start ? std::move(*start) : PlanGreedy(in, budget);
  ExchangePass(in, budget, resident);
  return resident;
}

// Experts the census never saw (probability 0) change the objective neither on the card nor off
// it, so the planner leaves them off. With budget to spare they take it, the layers in turn (each
// layer's first unseen expert, then each layer's second, ...): a census of a short or different
// workload misses experts that serving then routes to, and `auto` placement, planning from its
// warm-up tokens, moved them off a card that had room for the whole model.
void FillUnseen(const CostInputs& in, uint64_t budget, std::vector<uint8_t>& resident) {
  const int L = in.n_layer, E = in.n_expert;
  uint64_t used = ResidentBytes(in, resident);
  for (int e = 0; e < E; ++e) {
    for (int l = 0; l < L; ++l) {
      const size_t i = size_t(l) * E + e;
      if (resident[i] || in.prob[i] > 0 || used + in.bytes_per_expert[l] > budget) continue;
      resident[i] = 1;
      used += in.bytes_per_expert[l];
    }
  }
}

// Indices of layer l's experts, most probable first.
std::vector<int> ByProbability(const CostInputs& in, int l) {
  std::vector<int> order(in.n_expert);
  std::iota(order.begin(), order.end(), 0);
  const double* p = in.prob.data() + size_t(l) * in.n_expert;
  std::stable_sort(order.begin(), order.end(), [p](int a, int b) { return p[a] > p[b]; });
  return order;
}

}  // namespace

absl::StatusOr<KvCache> ParseKvCache(const std::string& name) {
  for (KvCache kv : {KvCache::kF32, KvCache::kF16}) {
    if (name == KvCacheName(kv)) return kv;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown --cache-type '", name, "' (choose f32 or f16)"));
}

const char* KvCacheName(KvCache kv) { return kv == KvCache::kF16 ? "f16" : "f32"; }

absl::StatusOr<MemoryBudget> ComputeMemoryBudget(const model::Model& model, uint64_t vram_budget,
                                                 int context, KvCache kv_cache,
                                                 uint64_t scratch_bytes) {
  const model::HParams& hp = model.hparams();
  const model::TensorMap map(hp);
  const model::ValidationReport report = model::ValidateTensors(map, model.tensors());
  if (!report.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.source(), ": the model does not validate: ", report.Summary()));
  }
  if (context <= 0) return absl::InvalidArgumentError(absl::StrCat("--context ", context, " must be positive"));
  MemoryBudget m;
  m.vram_budget = vram_budget;
  m.context = context;
  m.kv_cache = kv_cache;
  m.scratch_bytes = scratch_bytes;
  m.dense_bytes = report.total_bytes - report.expert_bytes() - report.mtp_bytes;
  int attention = 0, recurrent = 0;
  for (int l = 0; l < hp.n_layer; ++l) (hp.IsRecurrentLayer(l) ? recurrent : attention) += 1;
  m.kv_bytes = uint64_t(attention) * uint64_t(context) * 2 /*K and V*/ * uint64_t(hp.n_head_kv) *
               uint64_t(hp.head_dim) * (kv_cache == KvCache::kF16 ? 2 : 4);
  if (recurrent > 0) {
    const uint64_t conv = uint64_t(std::max(0, hp.ssm_conv_kernel - 1)) * hp.ssm_conv_dim() * 4;
    const uint64_t ssm = uint64_t(hp.ssm_dt_rank) * hp.ssm_d_state * hp.head_v_dim() * 4;
    m.deltanet_bytes = uint64_t(recurrent) * (conv + ssm);
  }
  if (m.needed_without_experts() > vram_budget) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "--vram-budget ", FormatBytes(vram_budget), " (", vram_budget,
        " bytes) is too small: dense weights ", FormatBytes(m.dense_bytes), " + KV cache ",
        FormatBytes(m.kv_bytes), " (", KvCacheName(kv_cache), ") at ", context,
        " tokens + DeltaNet state ", FormatBytes(m.deltanet_bytes), " + scratch ",
        FormatBytes(m.scratch_bytes), " need ", FormatBytes(m.needed_without_experts()), " (",
        m.needed_without_experts(), " bytes) before any expert"));
  }
  return m;
}

absl::StatusOr<CostInputs> MakeCostInputs(const model::Model& model, const Census& census,
                                          const Ceilings& ceilings) {
  const model::HParams& hp = model.hparams();
  if (census.n_layer != hp.n_layer || census.n_expert != hp.n_expert || census.k != hp.n_expert_used) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the census (", census.model_name, ": ", census.n_layer, " layers, ", census.n_expert,
        " experts, top-", census.k, ") does not match the model ", model.source(), " (",
        hp.n_layer, " layers, ", hp.n_expert, " experts, top-", hp.n_expert_used, ")"));
  }
  if (census.tokens == 0) return absl::FailedPreconditionError("the census has no tokens");
  const model::TensorMap map(hp);
  const model::ValidationReport report = model::ValidateTensors(map, model.tensors());
  if (report.layers.size() != size_t(hp.n_layer)) {
    return absl::InvalidArgumentError(absl::StrCat(model.source(), ": the model does not validate"));
  }
  CostInputs in;
  in.n_layer = hp.n_layer;
  in.n_expert = hp.n_expert;
  in.k = hp.n_expert_used;
  in.prob = census.Probabilities();
  in.ceilings = ceilings;
  for (const model::LayerBytes& lb : report.layers) {
    in.bytes_per_expert.push_back(lb.bytes_per_expert);
    in.dense_layer_bytes.push_back(lb.dense_bytes);
  }
  in.output_bytes = report.output_bytes;
  return in;
}

double ExpectedStepSeconds(const CostInputs& in, const std::vector<uint8_t>& resident) {
  const std::vector<LayerSums> sums = SumsOf(in, resident);
  double t = double(in.output_bytes) / in.ceilings.hbm_bytes_per_s;
  for (int l = 0; l < in.n_layer; ++l) t += LayerSeconds(in, l, sums[l]);
  return t;
}

double ExpectedHitRate(const CostInputs& in, const std::vector<uint8_t>& resident) {
  double hit = 0, all = 0;
  for (size_t i = 0; i < in.prob.size(); ++i) {
    all += in.prob[i];
    if (resident[i]) hit += in.prob[i];
  }
  return all > 0 ? hit / all : 0;
}

uint64_t ResidentBytes(const CostInputs& in, const std::vector<uint8_t>& resident) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < resident.size(); ++i) {
    if (resident[i]) bytes += in.bytes_per_expert[i / in.n_expert];
  }
  return bytes;
}

absl::StatusOr<Policy> ParsePolicy(const std::string& name) {
  for (Policy p : {Policy::kPlanner, Policy::kUniform, Policy::kFrequency, Policy::kFirstLayersOnCpu}) {
    if (name == PolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown policy '", name, "' (choose planner, uniform, frequency or first-layers-on-cpu)"));
}

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kPlanner: return "planner";
    case Policy::kUniform: return "uniform";
    case Policy::kFrequency: return "frequency";
    case Policy::kFirstLayersOnCpu: return "first-layers-on-cpu";
  }
  return "?";
}

std::vector<uint8_t> ChooseResidents(const CostInputs& in, uint64_t budget, Policy policy) {
  const int L = in.n_layer, E = in.n_expert;
  std::vector<uint8_t> resident(size_t(L) * E, 0);
  switch (policy) {
    case Policy::kPlanner:
      resident = PlanResidents(in, budget);
      FillUnseen(in, budget, resident);
      return resident;
    case Policy::kUniform: {
      // The same count m in every layer, each layer's most probable experts.
      const uint64_t per_m = std::accumulate(in.bytes_per_expert.begin(), in.bytes_per_expert.end(),
                                             uint64_t{0});
      const int m = per_m == 0 ? E : int(std::min<uint64_t>(E, budget / per_m));
      for (int l = 0; l < L; ++l) {
        const std::vector<int> order = ByProbability(in, l);
        for (int i = 0; i < m; ++i) resident[size_t(l) * E + order[i]] = 1;
      }
      return resident;
    }
    case Policy::kFrequency: {
      // Globally most routed experts first, whatever their layer, while they fit.
      std::vector<size_t> order(resident.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return in.prob[a] > in.prob[b]; });
      uint64_t used = 0;
      for (size_t i : order) {
        const uint64_t b = in.bytes_per_expert[i / E];
        if (used + b <= budget) {
          resident[i] = 1;
          used += b;
        }
      }
      return resident;
    }
    case Policy::kFirstLayersOnCpu: {
      // llama.cpp's --n-cpu-moe N: all experts of the first N layers on the CPU, the rest on the
      // card; the smallest N that fits.
      uint64_t used = 0;
      int first_gpu = L;
      for (int l = L - 1; l >= 0; --l) {
        const uint64_t layer = in.bytes_per_expert[l] * uint64_t(E);
        if (used + layer > budget) break;
        used += layer;
        first_gpu = l;
      }
      for (int l = first_gpu; l < L; ++l) {
        std::fill(resident.begin() + size_t(l) * E, resident.begin() + size_t(l + 1) * E, 1);
      }
      return resident;
    }
  }
  return resident;
}

Plan MakePlan(const CostInputs& in, const MemoryBudget& memory, Policy policy,
              const std::string& model_name, uint64_t model_fingerprint) {
  Plan plan;
  plan.policy = policy;
  plan.model_name = model_name;
  plan.model_fingerprint = model_fingerprint;
  plan.memory = memory;
  plan.expert_budget = memory.expert_budget();
  plan.inputs = in;
  plan.resident = ChooseResidents(in, plan.expert_budget, policy);
  plan.resident_bytes = ResidentBytes(in, plan.resident);
  plan.expected_hit_rate = ExpectedHitRate(in, plan.resident);
  plan.expected_step_s = ExpectedStepSeconds(in, plan.resident);
  return plan;
}

nlohmann::json PlanToJson(const Plan& plan) {
  const CostInputs& in = plan.inputs;
  nlohmann::json j;
  j["format"] = "tandem-plan";
  j["version"] = 1;
  j["policy"] = PolicyName(plan.policy);
  j["model_name"] = plan.model_name;
  j["model_fingerprint"] = absl::StrFormat("%016x", plan.model_fingerprint);
  j["n_layer"] = in.n_layer;
  j["n_expert"] = in.n_expert;
  j["k"] = in.k;
  j["memory"] = {{"vram_budget", plan.memory.vram_budget},
                 {"dense_bytes", plan.memory.dense_bytes},
                 {"kv_bytes", plan.memory.kv_bytes},
                 {"cache_type", KvCacheName(plan.memory.kv_cache)},
                 {"deltanet_bytes", plan.memory.deltanet_bytes},
                 {"scratch_bytes", plan.memory.scratch_bytes},
                 {"context", plan.memory.context}};
  j["expert_budget"] = plan.expert_budget;
  j["resident_bytes"] = plan.resident_bytes;
  j["resident_experts"] = std::count(plan.resident.begin(), plan.resident.end(), 1);
  j["expected_hit_rate"] = plan.expected_hit_rate;
  j["expected_step_s"] = plan.expected_step_s;
  j["expected_tok_s"] = plan.expected_step_s > 0 ? 1.0 / plan.expected_step_s : 0.0;
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < in.n_layer; ++l) {
    std::vector<int> ids;
    double hit = 0, all = 0;
    for (int e = 0; e < in.n_expert; ++e) {
      const size_t i = size_t(l) * in.n_expert + e;
      all += in.prob[i];
      if (plan.resident[i]) {
        ids.push_back(e);
        hit += in.prob[i];
      }
    }
    layers.push_back({{"layer", l},
                      {"bytes_per_expert", in.bytes_per_expert[l]},
                      {"dense_bytes", in.dense_layer_bytes[l]},
                      {"resident", ids},
                      {"resident_bytes", uint64_t(ids.size()) * in.bytes_per_expert[l]},
                      {"expected_hit_rate", all > 0 ? hit / all : 0.0},
                      {"prob", std::vector<double>(in.prob.begin() + size_t(l) * in.n_expert,
                                                   in.prob.begin() + size_t(l + 1) * in.n_expert)}});
  }
  j["layers"] = std::move(layers);
  j["inputs"] = {{"output_bytes", in.output_bytes},
                 {"hbm_bytes_per_s", in.ceilings.hbm_bytes_per_s},
                 {"host_bytes_per_s", in.ceilings.host_bytes_per_s},
                 {"pcie_bytes_per_s", in.ceilings.pcie_bytes_per_s},
                 {"handoff_s", in.ceilings.handoff_s},
                 {"cost_model", "sum over layers of max(GPU, CPU + handoff), expected over "
                                "independent per-expert probabilities (layers[].prob)"}};
  return j;
}

absl::StatusOr<Plan> PlanFromJson(const nlohmann::json& j, const std::string& name) {
  try {
    if (j.value("format", "") != "tandem-plan" || j.value("version", 0) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": not a tandem plan (format tandem-plan, version 1)"));
    }
    Plan plan;
    auto policy = ParsePolicy(j.at("policy").get<std::string>());
    if (!policy.ok()) return policy.status();
    plan.policy = *policy;
    plan.model_name = j.at("model_name").get<std::string>();
    plan.model_fingerprint = std::stoull(j.at("model_fingerprint").get<std::string>(), nullptr, 16);
    CostInputs& in = plan.inputs;
    in.n_layer = j.at("n_layer").get<int>();
    in.n_expert = j.at("n_expert").get<int>();
    in.k = j.at("k").get<int>();
    if (in.n_layer <= 0 || in.n_expert <= 0 || in.n_expert > 65536 || in.k <= 0 ||
        j.at("layers").size() != size_t(in.n_layer)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": plan sizes are inconsistent"));
    }
    const nlohmann::json& mem = j.at("memory");
    plan.memory.vram_budget = mem.at("vram_budget").get<uint64_t>();
    plan.memory.dense_bytes = mem.at("dense_bytes").get<uint64_t>();
    plan.memory.kv_bytes = mem.at("kv_bytes").get<uint64_t>();
    // Plans written before the key counted an fp16 cache.
    const std::string cache_type = mem.value("cache_type", std::string("f16"));
    auto kv_cache = ParseKvCache(cache_type);
    if (!kv_cache.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": memory.cache_type '", cache_type, "' is neither f32 nor f16"));
    }
    plan.memory.kv_cache = *kv_cache;
    plan.memory.deltanet_bytes = mem.at("deltanet_bytes").get<uint64_t>();
    plan.memory.scratch_bytes = mem.at("scratch_bytes").get<uint64_t>();
    plan.memory.context = mem.at("context").get<int>();
    plan.expert_budget = j.at("expert_budget").get<uint64_t>();
    const nlohmann::json& inputs = j.at("inputs");
    in.output_bytes = inputs.at("output_bytes").get<uint64_t>();
    in.ceilings.hbm_bytes_per_s = inputs.at("hbm_bytes_per_s").get<double>();
    in.ceilings.host_bytes_per_s = inputs.at("host_bytes_per_s").get<double>();
    in.ceilings.pcie_bytes_per_s = inputs.at("pcie_bytes_per_s").get<double>();
    in.ceilings.handoff_s = inputs.at("handoff_s").get<double>();
    plan.resident.assign(size_t(in.n_layer) * in.n_expert, 0);
    for (int l = 0; l < in.n_layer; ++l) {
      const nlohmann::json& layer = j.at("layers").at(l);
      in.bytes_per_expert.push_back(layer.at("bytes_per_expert").get<uint64_t>());
      in.dense_layer_bytes.push_back(layer.at("dense_bytes").get<uint64_t>());
      auto prob = layer.at("prob").get<std::vector<double>>();
      if (prob.size() != size_t(in.n_expert)) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": layer ", l, " has ", prob.size(),
                                                       " probabilities, expected ", in.n_expert));
      }
      in.prob.insert(in.prob.end(), prob.begin(), prob.end());
      for (int e : layer.at("resident").get<std::vector<int>>()) {
        if (e < 0 || e >= in.n_expert) {
          return absl::InvalidArgumentError(
              absl::StrCat(name, ": layer ", l, " lists expert ", e, " of ", in.n_expert));
        }
        plan.resident[size_t(l) * in.n_expert + e] = 1;
      }
    }
    plan.resident_bytes = ResidentBytes(in, plan.resident);
    if (plan.resident_bytes > plan.expert_budget) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": resident experts take ",
                                                     plan.resident_bytes, " bytes, over the budget ",
                                                     plan.expert_budget));
    }
    plan.expected_hit_rate = ExpectedHitRate(in, plan.resident);
    plan.expected_step_s = ExpectedStepSeconds(in, plan.resident);
    return plan;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad plan JSON: ", e.what()));
  }
}

absl::StatusOr<Plan> ReadPlan(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open plan"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return PlanFromJson(j, path);
}

}  // namespace tandem::scheduler
