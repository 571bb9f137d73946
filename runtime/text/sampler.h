// Next-token sampling from a logits vector: repetition penalty, greedy, top-k, temperature, top-p,
// min-p, seeded draws. All buffers are sized at construction; Sample() does not allocate. One
// Sampler per generation stream (not thread-safe).
//
// Order of operations in Sample():
//   1. repetition penalty over the distinct tokens among the last `penalty_last_n` accepted ones
//      (llama.cpp semantics: a positive logit is divided by the penalty, a negative one
//      multiplied);
//   2. temperature <= 0: greedy, the argmax (lowest id on ties); done;
//   3. top-k: keep the k largest logits (ties: lower id first);
//   4. temperature: logits / T, then softmax over the kept tokens;
//   5. top-p: keep the smallest prefix, by probability descending, whose mass reaches p;
//   6. min-p: drop tokens whose probability is below min_p times the largest one;
//   7. draw one token from the remaining probabilities (renormalised) with the seeded generator.
// NaN logits count as -infinity.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::text {

struct SamplerConfig {
  float temperature = 0.8f;         // <= 0: greedy
  int32_t top_k = 40;               // 0: off
  float top_p = 0.95f;              // 1: off; must be in (0, 1]
  float min_p = 0.05f;              // 0: off; must be in [0, 1]
  float repetition_penalty = 1.0f;  // 1: off; must be > 0
  int32_t penalty_last_n = 64;      // window of accepted tokens the penalty looks at; 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Checks the configuration (errors name the bad field) and allocates the buffers.
  static absl::StatusOr<Sampler> Create(const SamplerConfig& config, int32_t vocab_size);

  // Chooses the next token. `logits` must hold vocab_size values. Does not record the token: call
  // Accept() with whatever token is actually appended (prompt tokens too, if they should count for
  // the repetition penalty). Errors: wrong logits size, no finite logit.
  absl::StatusOr<int32_t> Sample(std::span<const float> logits);

  // Records a token in the repetition-penalty window.
  void Accept(int32_t token);
  // Forgets the window and restarts the generator from the seed.
  void Reset();

  const SamplerConfig& config() const { return config_; }
  int32_t vocab_size() const { return vocab_size_; }

 private:
  Sampler(const SamplerConfig& config, int32_t vocab_size);
  double Uniform();  // [0, 1)

  SamplerConfig config_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  struct Candidate {
    int32_t id;
    float logit;
    float prob;
  };
  std::vector<float> work_;            // penalised logits, by id
  std::vector<Candidate> candidates_;  // the tokens still in the running
  std::vector<uint8_t> seen_;          // by id: marked while applying the penalty
  std::vector<int32_t> history_;       // ring buffer of the last penalty_last_n accepted tokens
  size_t history_next_ = 0;
  size_t history_size_ = 0;
};

}  // namespace tandem::text
