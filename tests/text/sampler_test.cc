// Sampler tests: greedy, seeds, top-k/top-p/min-p filtering, repetition penalty, and the sampled
// distribution against known probabilities.
#include "runtime/text/sampler.h"

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::text {
namespace {

SamplerConfig Plain(float temperature, uint64_t seed = 1) {
  SamplerConfig c;
  c.temperature = temperature;
  c.top_k = 0;
  c.top_p = 1.0f;
  c.min_p = 0.0f;
  c.repetition_penalty = 1.0f;
  c.seed = seed;
  return c;
}

std::vector<float> RandomLogits(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(n);
  for (float& l : logits) l = normal(rng);
  return logits;
}

int32_t Draw(Sampler& s, const std::vector<float>& logits) {
  absl::StatusOr<int32_t> t = s.Sample(logits);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : -1;
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  absl::StatusOr<Sampler> s = Sampler::Create(Plain(0.0f), 6);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Draw(*s, {0.1f, 2.0f, -1.0f, 1.9f, 0.0f, 2.0f - 1e-6f}), 1);
  EXPECT_EQ(Draw(*s, {1.0f, 3.0f, 3.0f, 3.0f, 0.0f, 0.0f}), 1);  // tie: lowest id
  EXPECT_EQ(Draw(*s, {NAN, -INFINITY, -5.0f, NAN, -7.0f, -6.0f}), 2);
  const std::vector<float> big = RandomLogits(5000, 3);
  absl::StatusOr<Sampler> g = Sampler::Create(Plain(0.0f), 5000);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Draw(*g, big), std::max_element(big.begin(), big.end()) - big.begin());
}

TEST(SamplerTest, SameSeedSameSequence) {
  const std::vector<float> logits = RandomLogits(1000, 5);
  SamplerConfig c = Plain(1.0f, 1234);
  c.top_k = 50;
  c.top_p = 0.9f;
  absl::StatusOr<Sampler> a = Sampler::Create(c, 1000);
  absl::StatusOr<Sampler> b = Sampler::Create(c, 1000);
  c.seed = 4321;
  absl::StatusOr<Sampler> other = Sampler::Create(c, 1000);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  std::vector<int32_t> seq_a, seq_b, seq_other;
  for (int i = 0; i < 200; ++i) {
    seq_a.push_back(Draw(*a, logits));
    seq_b.push_back(Draw(*b, logits));
    seq_other.push_back(Draw(*other, logits));
  }
  EXPECT_EQ(seq_a, seq_b);
  EXPECT_NE(seq_a, seq_other);
  EXPECT_GT(std::set<int32_t>(seq_a.begin(), seq_a.end()).size(), 5u);  // it does sample
  a->Reset();
  std::vector<int32_t> again;
  for (int i = 0; i < 200; ++i) again.push_back(Draw(*a, logits));
  EXPECT_EQ(again, seq_a);
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  SamplerConfig k1 = Plain(1.5f, 9);
  k1.top_k = 1;
  SamplerConfig p_tiny = Plain(1.5f, 9);
  p_tiny.top_p = 1e-6f;
  absl::StatusOr<Sampler> a = Sampler::Create(k1, 2000);
  absl::StatusOr<Sampler> b = Sampler::Create(p_tiny, 2000);
  ASSERT_TRUE(a.ok() && b.ok());
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> logits = RandomLogits(2000, seed);
    const int32_t argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(Draw(*a, logits), argmax);
    EXPECT_EQ(Draw(*b, logits), argmax);
  }
}

TEST(SamplerTest, TopKAndTopPRestrictTheSupport) {
  // Probabilities 0.5, 0.25, 0.125, 0.0625, ... (logits ln 2 apart), ids shuffled.
  const std::vector<int32_t> order = {4, 7, 1, 0, 6, 2, 5, 3};
  std::vector<float> logits(8);
  for (int r = 0; r < 8; ++r) logits[order[r]] = -0.6931472f * r;
  SamplerConfig k3 = Plain(1.0f, 2);
  k3.top_k = 3;
  SamplerConfig p80 = Plain(1.0f, 2);
  p80.top_p = 0.8f;  // 0.5 + 0.25 < 0.8 <= 0.5 + 0.25 + 0.125: three tokens
  for (const SamplerConfig& c : {k3, p80}) {
    absl::StatusOr<Sampler> s = Sampler::Create(c, 8);
    ASSERT_TRUE(s.ok());
    std::set<int32_t> seen;
    for (int i = 0; i < 3000; ++i) seen.insert(Draw(*s, logits));
    EXPECT_EQ(seen, (std::set<int32_t>{4, 7, 1})) << "top_k " << c.top_k << " top_p " << c.top_p;
  }
}

TEST(SamplerTest, TopPOnALargeVocabulary) {
  // A peaked distribution over 100k tokens: the nucleus for p = 0.5 is the few top tokens.
  std::vector<float> logits = RandomLogits(100000, 17);
  const std::vector<int32_t> top = {77, 5, 99999};
  logits[77] = 30.0f;
  logits[5] = 29.5f;
  logits[99999] = 29.0f;
  SamplerConfig c = Plain(1.0f, 5);
  c.top_p = 0.9f;
  absl::StatusOr<Sampler> s = Sampler::Create(c, 100000);
  ASSERT_TRUE(s.ok());
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(Draw(*s, logits));
  for (int32_t id : seen) EXPECT_TRUE(id == 77 || id == 5 || id == 99999) << id;
  EXPECT_EQ(seen.count(77), 1u);
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  // Probabilities 0.4, 0.3, 0.2, 0.1: min_p 0.45 keeps tokens with p >= 0.18.
  const std::vector<float> logits = {std::log(0.1f), std::log(0.4f), std::log(0.2f),
                                     std::log(0.3f)};
  SamplerConfig c = Plain(1.0f, 8);
  c.min_p = 0.45f;
  absl::StatusOr<Sampler> s = Sampler::Create(c, 4);
  ASSERT_TRUE(s.ok());
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 9000; ++i) ++counts[Draw(*s, logits)];
  EXPECT_EQ(counts[0], 0);
  // Renormalised: 0.4/0.9, 0.3/0.9, 0.2/0.9.
  EXPECT_NEAR(counts[1] / 9000.0, 0.4 / 0.9, 0.02);
  EXPECT_NEAR(counts[3] / 9000.0, 0.3 / 0.9, 0.02);
  EXPECT_NEAR(counts[2] / 9000.0, 0.2 / 0.9, 0.02);
}

TEST(SamplerTest, RepetitionPenaltyChangesTheArgmax) {
  SamplerConfig c = Plain(0.0f);
  c.repetition_penalty = 1.5f;
  c.penalty_last_n = 2;
  absl::StatusOr<Sampler> s = Sampler::Create(c, 4);
  ASSERT_TRUE(s.ok());
  const std::vector<float> positive = {3.0f, 2.5f, 0.0f, -1.0f};
  EXPECT_EQ(Draw(*s, positive), 0);
  s->Accept(0);  // 3.0 / 1.5 = 2.0 < 2.5
  EXPECT_EQ(Draw(*s, positive), 1);
  // Negative logits are multiplied: -1 * 1.5 = -1.5 < -1.2.
  const std::vector<float> negative = {-5.0f, -5.0f, -1.2f, -1.0f};
  EXPECT_EQ(Draw(*s, negative), 3);
  s->Accept(3);
  EXPECT_EQ(Draw(*s, negative), 2);
  // The window holds two tokens: after two more, token 0 is no longer penalised.
  s->Accept(2);
  s->Accept(2);
  EXPECT_EQ(Draw(*s, positive), 0);
  // A token repeated in the window is penalised once: 2.0 / 1.5 > 1.0 (twice would be < 1.0).
  EXPECT_EQ(Draw(*s, std::vector<float>{0.0f, 0.0f, 2.0f, 1.0f}), 2);
  EXPECT_EQ(Draw(*s, negative), 3);
  s->Reset();
  EXPECT_EQ(Draw(*s, negative), 3);
}

TEST(SamplerTest, DistributionMatchesProbabilities) {
  const std::vector<double> probs = {0.05, 0.1, 0.15, 0.3, 0.4};
  std::vector<float> logits;
  for (double p : probs)
    logits.push_back(static_cast<float>(std::log(p)) + 3.0f);  // shift-invariant
  absl::StatusOr<Sampler> s = Sampler::Create(Plain(1.0f, 77), 5);
  ASSERT_TRUE(s.ok());
  constexpr int kDraws = 20000;
  std::vector<int> counts(5, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[Draw(*s, logits)];
  for (size_t k = 0; k < probs.size(); ++k) {
    EXPECT_NEAR(counts[k] / static_cast<double>(kDraws), probs[k], 0.02) << "token " << k;
  }
  // Temperature 2 flattens: p ~ sqrt(p0), renormalised.
  absl::StatusOr<Sampler> hot = Sampler::Create(Plain(2.0f, 78), 5);
  ASSERT_TRUE(hot.ok());
  double z = 0;
  for (double p : probs) z += std::sqrt(p);
  std::fill(counts.begin(), counts.end(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[Draw(*hot, logits)];
  for (size_t k = 0; k < probs.size(); ++k) {
    EXPECT_NEAR(counts[k] / static_cast<double>(kDraws), std::sqrt(probs[k]) / z, 0.02)
        << "token " << k;
  }
}

TEST(SamplerTest, ConfigurationAndInputErrors) {
  SamplerConfig c = Plain(1.0f);
  EXPECT_FALSE(Sampler::Create(c, 0).ok());
  c.top_p = 0.0f;
  absl::StatusOr<Sampler> bad = Sampler::Create(c, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("top_p"), std::string::npos);
  c = Plain(-1.0f);
  EXPECT_FALSE(Sampler::Create(c, 4).ok());
  c = Plain(1.0f);
  c.min_p = 1.5f;
  EXPECT_FALSE(Sampler::Create(c, 4).ok());
  c = Plain(1.0f);
  c.repetition_penalty = 0.0f;
  EXPECT_FALSE(Sampler::Create(c, 4).ok());
  c = Plain(1.0f);
  c.top_k = -1;
  EXPECT_FALSE(Sampler::Create(c, 4).ok());

  absl::StatusOr<Sampler> s = Sampler::Create(Plain(1.0f), 4);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->Sample(std::vector<float>{1.0f, 2.0f}).ok());
  EXPECT_FALSE(s->Sample(std::vector<float>{NAN, -INFINITY, NAN, -INFINITY}).ok());
}

}  // namespace
}  // namespace tandem::text
