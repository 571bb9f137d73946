// Token sampler. See sampler.h for the order of operations.
#include "runtime/text/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tandem::text {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Sampler::Sampler(const SamplerConfig& config, int32_t vocab_size)
    : config_(config),
      vocab_size_(vocab_size),
      rng_(config.seed),
      work_(vocab_size),
      candidates_(vocab_size),
      seen_(vocab_size, 0),
      history_(static_cast<size_t>(config.penalty_last_n)) {}

absl::StatusOr<Sampler> Sampler::Create(const SamplerConfig& c, int32_t vocab_size) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: vocab_size ", vocab_size, " must be > 0"));
  }
  if (!std::isfinite(c.temperature) || c.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: temperature ", c.temperature, " must be >= 0 (0 = greedy)"));
  }
  if (c.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: top_k ", c.top_k, " must be >= 0 (0 = off)"));
  }
  if (!(c.top_p > 0 && c.top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: top_p ", c.top_p, " must be in (0, 1] (1 = off)"));
  }
  if (!(c.min_p >= 0 && c.min_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: min_p ", c.min_p, " must be in [0, 1] (0 = off)"));
  }
  if (!(c.repetition_penalty > 0) || !std::isfinite(c.repetition_penalty)) {
    return absl::InvalidArgumentError(absl::StrCat("sampler: repetition_penalty ",
                                                   c.repetition_penalty, " must be > 0 (1 = off)"));
  }
  if (c.penalty_last_n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: penalty_last_n ", c.penalty_last_n, " must be >= 0 (0 = off)"));
  }
  return Sampler(c, vocab_size);
}

void Sampler::Accept(int32_t token) {
  if (history_.empty()) return;
  history_[history_next_] = token;
  history_next_ = (history_next_ + 1) % history_.size();
  history_size_ = std::min(history_size_ + 1, history_.size());
}

void Sampler::Reset() {
  history_next_ = 0;
  history_size_ = 0;
  rng_.seed(config_.seed);
}

double Sampler::Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

absl::StatusOr<int32_t> Sampler::Sample(std::span<const float> logits) {
  if (logits.size() != static_cast<size_t>(vocab_size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: got ", logits.size(), " logits for a vocabulary of ", vocab_size_));
  }
  for (int32_t id = 0; id < vocab_size_; ++id) {
    work_[id] = std::isnan(logits[id]) ? kNegInf : logits[id];
  }

  // 1. Repetition penalty, once per distinct recent token.
  if (config_.repetition_penalty != 1.0f && history_size_ > 0) {
    for (size_t k = 0; k < history_size_; ++k) {
      const int32_t t = history_[k];
      if (t < 0 || t >= vocab_size_ || seen_[t]) continue;
      seen_[t] = 1;
      work_[t] = work_[t] > 0 ? work_[t] / config_.repetition_penalty
                              : work_[t] * config_.repetition_penalty;
    }
    for (size_t k = 0; k < history_size_; ++k) {
      const int32_t t = history_[k];
      if (t >= 0 && t < vocab_size_) seen_[t] = 0;
    }
  }

  // 2. Greedy: first maximum, so the lowest id wins ties.
  int32_t best = 0;
  for (int32_t id = 1; id < vocab_size_; ++id) {
    if (work_[id] > work_[best]) best = id;
  }
  if (work_[best] == kNegInf) return absl::InvalidArgumentError("sampler: no finite logit");
  if (config_.temperature <= 0) return best;

  // Larger logit first; lower id first among equals (a strict weak order, so results do not
  // depend on the standard library's sort).
  const auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  };
  size_t n = static_cast<size_t>(vocab_size_);
  for (int32_t id = 0; id < vocab_size_; ++id) candidates_[id] = {id, work_[id], 0.0f};
  bool sorted = false;

  // 3. Top-k.
  if (config_.top_k > 0 && static_cast<size_t>(config_.top_k) < n) {
    n = static_cast<size_t>(config_.top_k);
    std::nth_element(candidates_.begin(), candidates_.begin() + (n - 1), candidates_.end(),
                     by_logit);
    std::sort(candidates_.begin(), candidates_.begin() + n, by_logit);
    sorted = true;
  }

  // 4. Temperature and softmax (max subtracted; -inf logits get probability 0).
  const float max_logit = work_[best];
  double total = 0;
  for (size_t k = 0; k < n; ++k) {
    Candidate& c = candidates_[k];
    c.prob = c.logit == kNegInf ? 0.0f : std::exp((c.logit - max_logit) / config_.temperature);
    total += c.prob;
  }
  for (size_t k = 0; k < n; ++k)
    candidates_[k].prob = static_cast<float>(candidates_[k].prob / total);

  // 5. Top-p: sort only as far as needed, growing the sorted prefix geometrically.
  if (config_.top_p < 1.0f) {
    size_t sorted_prefix = sorted ? n : 0;
    size_t k = 0;
    double mass = 0;
    while (true) {
      if (k == sorted_prefix) {
        const size_t grow = std::min(n, std::max<size_t>(64, sorted_prefix * 4));
        // Probability order equals logit order (ties broken by id), so sort by logit.
        std::partial_sort(candidates_.begin() + sorted_prefix, candidates_.begin() + grow,
                          candidates_.begin() + n, by_logit);
        sorted_prefix = grow;
      }
      mass += candidates_[k].prob;
      ++k;
      if (mass >= config_.top_p || k == n) break;
    }
    n = k;
  }

  // 6. Min-p relative to the most likely token (whose probability is exp(0) / total).
  if (config_.min_p > 0.0f) {
    const float threshold = config_.min_p * static_cast<float>(1.0 / total);
    size_t kept = 0;
    for (size_t k = 0; k < n; ++k) {
      if (candidates_[k].prob >= threshold) candidates_[kept++] = candidates_[k];
    }
    n = kept;  // the most likely token always passes
  }

  // 7. Draw.
  double remaining = 0;
  for (size_t k = 0; k < n; ++k) remaining += candidates_[k].prob;
  const double u = Uniform() * remaining;
  double cumulative = 0;
  for (size_t k = 0; k < n; ++k) {
    cumulative += candidates_[k].prob;
    if (u < cumulative) return candidates_[k].id;
  }
  return candidates_[n - 1].id;  // rounding at the top end
}

}  // namespace tandem::text
