// Self-consistency of the reference forward pass on synthetic models of every architecture:
// one prefill equals prefill-then-decode, logits stay finite and informative, bad input is refused.
// (Agreement with transformers is fixtures_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "runtime/model/model.h"
#include "runtime/quant/float16.h"
#include "runtime/reference/forward.h"

namespace tandem::reference {
namespace {

class ForwardTest : public ::testing::TestWithParam<const char*> {};

std::vector<int32_t> TestTokens(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7919 + 13) % vocab;
  return t;
}

TEST_P(ForwardTest, PrefillEqualsPrefillThenDecode) {
  auto model = model::OpenModel(std::string("synth:") + GetParam());
  ASSERT_TRUE(model.ok()) << model.status();
  auto fwd = ReferenceForward::Create(**model);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  const model::HParams& hp = (*model)->hparams();
  const int T = 12, K = 5;
  const std::vector<int32_t> tokens = TestTokens(T, hp.n_vocab);

  ForwardOptions all;
  all.all_logits = true;
  SequenceState s1 = SequenceState::Create(hp, 64);
  std::vector<float> prefill;
  ASSERT_TRUE((*fwd)->Forward(tokens, s1, all, &prefill).ok());
  ASSERT_EQ(prefill.size(), static_cast<size_t>(T) * hp.n_vocab);

  SequenceState s2 = SequenceState::Create(hp, 64);
  std::vector<float> part, step;
  ASSERT_TRUE((*fwd)->Forward(std::span(tokens).first(K), s2, all, &part).ok());
  double max_abs = 0, max_diff = 0;
  for (float v : prefill) max_abs = std::max(max_abs, std::abs(static_cast<double>(v)));
  for (size_t i = 0; i < part.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(part[i]) - prefill[i]));
  }
  for (int t = K; t < T; ++t) {
    ASSERT_TRUE((*fwd)->Forward(std::span(tokens).subspan(t, 1), s2, {}, &step).ok());
    for (int v = 0; v < hp.n_vocab; ++v) {
      max_diff = std::max(max_diff, std::abs(static_cast<double>(step[v]) -
                                             prefill[static_cast<size_t>(t) * hp.n_vocab + v]));
    }
  }
  EXPECT_EQ(s2.n_past, T);
  // Same math in another grouping of rows: only fp32 rounding may differ.
  EXPECT_LT(max_diff, 1e-5 * max_abs) << "max |logit| " << max_abs;
}

// SequenceState::f16_kv_cache: every key and value in the cache is an f16 value, the logits move
// by the rounding only (small, not zero), and a rerun gives the same logits.
TEST_P(ForwardTest, AnF16CacheHoldsF16ValuesAndMovesLogitsSlightly) {
  auto model = model::OpenModel(std::string("synth:") + GetParam());
  ASSERT_TRUE(model.ok()) << model.status();
  auto fwd = ReferenceForward::Create(**model);
  ASSERT_TRUE(fwd.ok()) << fwd.status();
  const model::HParams& hp = (*model)->hparams();
  const std::vector<int32_t> tokens = TestTokens(9, hp.n_vocab);
  ForwardOptions all;
  all.all_logits = true;
  SequenceState f32 = SequenceState::Create(hp, 16);
  SequenceState f16 = SequenceState::Create(hp, 16, true);
  std::vector<float> a, b;
  ASSERT_TRUE((*fwd)->Forward(tokens, f32, all, &a).ok());
  ASSERT_TRUE((*fwd)->Forward(tokens, f16, all, &b).ok());
  int attention_layers = 0;
  for (const LayerState& l : f16.layers) {
    if (l.k_cache.empty()) continue;
    ++attention_layers;
    for (const std::vector<float>* c : {&l.k_cache, &l.v_cache}) {
      for (float v : *c) ASSERT_EQ(v, quant::Fp16ToF32(quant::F32ToFp16(v)));
    }
  }
  ASSERT_GT(attention_layers, 0);
  double max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(static_cast<double>(a[i])));
    max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LT(max_diff, 1e-2 * max_abs) << "max |logit| " << max_abs;
  SequenceState again = SequenceState::Create(hp, 16, true);
  std::vector<float> c;
  ASSERT_TRUE((*fwd)->Forward(tokens, again, all, &c).ok());
  EXPECT_EQ(b, c);
}

TEST_P(ForwardTest, LogitsAreFiniteAndInformative) {
  auto model = model::OpenModel(std::string("synth:") + GetParam());
  ASSERT_TRUE(model.ok()) << model.status();
  auto fwd = ReferenceForward::Create(**model);
  ASSERT_TRUE(fwd.ok());
  const model::HParams& hp = (*model)->hparams();
  SequenceState s = SequenceState::Create(hp, 64);
  ForwardOptions all;
  all.all_logits = true;
  std::vector<int> experts_seen(hp.n_expert, 0);
  all.routing_hook = [&](int layer, int, std::span<const int32_t> ids, std::span<const float> w) {
    EXPECT_EQ(static_cast<int>(ids.size()), hp.n_expert_used);
    float sum = 0;
    for (float x : w) sum += x;
    EXPECT_NEAR(sum, 1.0f, 1e-5f);
    if (layer == hp.n_layer - 1) {
      for (int32_t id : ids) experts_seen[id]++;
    }
  };
  std::vector<float> logits;
  const std::vector<int32_t> tokens = TestTokens(16, hp.n_vocab);
  ASSERT_TRUE((*fwd)->Forward(tokens, s, all, &logits).ok());
  for (int t = 0; t < 16; ++t) {
    const float* row = &logits[static_cast<size_t>(t) * hp.n_vocab];
    double mean = 0, var = 0;
    for (int v = 0; v < hp.n_vocab; ++v) {
      ASSERT_TRUE(std::isfinite(row[v]));
      mean += row[v];
    }
    mean /= hp.n_vocab;
    for (int v = 0; v < hp.n_vocab; ++v) var += (row[v] - mean) * (row[v] - mean);
    EXPECT_GT(std::sqrt(var / hp.n_vocab), 0.3) << "position " << t;
  }
  // The last layer's router spreads tokens over several experts.
  int distinct = 0;
  for (int c : experts_seen) distinct += c > 0;
  EXPECT_GE(distinct, std::min(hp.n_expert, 2 * hp.n_expert_used));
}

TEST_P(ForwardTest, RefusesBadTokensAndContextOverflow) {
  auto model = model::OpenModel(std::string("synth:") + GetParam());
  ASSERT_TRUE(model.ok());
  auto fwd = ReferenceForward::Create(**model);
  ASSERT_TRUE(fwd.ok());
  const model::HParams& hp = (*model)->hparams();
  SequenceState s = SequenceState::Create(hp, 4);
  std::vector<float> logits;
  std::vector<int32_t> bad = {1, hp.n_vocab};
  absl::Status st = (*fwd)->Forward(bad, s, {}, &logits);
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(s.n_past, 0);
  std::vector<int32_t> five = {1, 2, 3, 4, 5};
  st = (*fwd)->Forward(five, s, {}, &logits);
  EXPECT_NE(st.message().find("exceed the context"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ForwardTest,
                         ::testing::Values("tiny-qwen3moe", "tiny-qwen3next", "tiny-qwen35moe",
                                           "tiny-flash-next"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace tandem::reference
