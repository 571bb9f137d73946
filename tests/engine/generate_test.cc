// Generation on the reference backend: the stop conditions and seeded determinism.
#include "runtime/engine/generate.h"

#include <gtest/gtest.h>

#include "tests/support/fixtures.h"

namespace tandem::engine {
namespace {

std::unique_ptr<Engine> LoadFixture(int n_ctx) {
  EngineOptions o;
  o.model = testing_support::FixturePath("hf/qwen3_next").string();
  o.tokenizer = testing_support::FixturePath("tokenizer/qwen2/tokenizer.json").string();
  o.n_ctx = n_ctx;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

text::Sampler MakeSampler(float temperature, uint64_t seed, int vocab) {
  text::SamplerConfig c;
  c.temperature = temperature;
  c.seed = seed;
  return *text::Sampler::Create(c, vocab);
}

absl::StatusOr<GenerateResult> GenerateFrom(Engine& e, float temp, uint64_t seed, GenerateOptions o) {
  auto session = e.NewSession();
  text::Sampler sampler = MakeSampler(temp, seed, e.hparams().n_vocab);
  auto prompt = e.tokenizer()->Encode("The sea looks blue because", true);
  if (!prompt.ok()) return prompt.status();
  return Generate(*session, sampler, *prompt, o);
}

TEST(GenerateTest, MaxTokensAndSeededDeterminism) {
  auto e = LoadFixture(256);
  ASSERT_NE(e, nullptr);
  GenerateOptions o;
  o.max_tokens = 12;
  o.ignore_eos = true;
  auto a = GenerateFrom(*e, 0.9f, 7, o);
  auto b = GenerateFrom(*e, 0.9f, 7, o);
  auto c = GenerateFrom(*e, 0.9f, 8, o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->stop, StopReason::kMaxTokens);
  EXPECT_EQ(a->tokens.size(), 12u);
  EXPECT_EQ(a->tokens, b->tokens);  // same seed, same tokens
  EXPECT_NE(a->tokens, c->tokens);  // another seed draws differently (12 tokens at T=0.9)
}

TEST(GenerateTest, StopStringCutsTheTextBeforeIt) {
  auto e = LoadFixture(256);
  ASSERT_NE(e, nullptr);
  GenerateOptions o;
  o.max_tokens = 24;
  o.ignore_eos = true;
  auto full = GenerateFrom(*e, 0.0f, 0, o);
  ASSERT_TRUE(full.ok());
  ASSERT_GE(full->text.size(), 8u) << "greedy output too short to pick a stop string";
  const size_t at = full->text.size() / 2;
  o.stop_strings = {full->text.substr(at, 3)};
  std::string streamed;
  o.on_text = [&streamed](const std::string& s) { streamed += s; };
  auto cut = GenerateFrom(*e, 0.0f, 0, o);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->stop, StopReason::kStopString);
  const size_t first = full->text.find(o.stop_strings[0]);
  EXPECT_EQ(cut->text, full->text.substr(0, first));
  EXPECT_EQ(streamed, cut->text);  // nothing of the stop string was ever handed out
}

TEST(GenerateTest, StopsWhenTheContextIsFull) {
  auto e = LoadFixture(24);  // the prompt is 19 tokens
  ASSERT_NE(e, nullptr);
  GenerateOptions o;
  o.max_tokens = 50;
  o.ignore_eos = true;
  auto r = GenerateFrom(*e, 0.0f, 0, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stop, StopReason::kContextFull);
}

TEST(GenerateTest, RefusesPromptsThatDoNotFit) {
  auto e = LoadFixture(4);
  ASSERT_NE(e, nullptr);
  auto r = GenerateFrom(*e, 0.0f, 0, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not fit the context of 4"), std::string::npos);
}

}  // namespace
}  // namespace tandem::engine
