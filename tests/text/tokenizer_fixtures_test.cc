// The tokenizer against Hugging Face `tokenizers` on the committed fixtures
// (tests/fixtures/tokenizer, made by tools/reference/make_fixtures.py): for both pre-tokenizers,
// every hard string (CJK, emoji, combining marks, digits, whitespace runs, contractions, code,
// inline special tokens) encodes to exactly the ids `tokenizers` produced, and decodes back.
#include <gtest/gtest.h>

#include <fstream>

#include "nlohmann/json.hpp"
#include "runtime/text/tokenizer.h"
#include "tests/support/fixtures.h"

namespace tandem::text {
namespace {

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

class TokenizerFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerFixtureTest, IdsEqualHuggingFaceTokenizers) {
  std::ifstream in(testing_support::FixturePath("tokenizer/cases.json"));
  ASSERT_TRUE(in.good());
  const nlohmann::json all = nlohmann::json::parse(in);
  const nlohmann::json& spec = all.at("tokenizers").at(GetParam());
  auto vocab = Vocabulary::FromHfTokenizerJson(
      testing_support::FixturePath(std::string("tokenizer/") + GetParam() + "/tokenizer.json")
          .string());
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(PreTokenizerKindName(vocab->pre), spec.at("pre").get<std::string>());
  auto tok = Tokenizer::Create(std::move(*vocab));
  ASSERT_TRUE(tok.ok()) << tok.status();
  int checked = 0;
  for (const nlohmann::json& c : spec.at("cases")) {
    const std::string text = FromHex(c.at("text_utf8_hex").get<std::string>());
    const std::vector<int32_t> expected = c.at("ids").get<std::vector<int32_t>>();
    auto ids = tok->Encode(text, /*parse_special=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, expected) << "text: " << c.at("text").get<std::string>();
    EXPECT_EQ(tok->Decode(*ids, /*render_special=*/true), text);
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFixtureTest, ::testing::Values("qwen2", "qwen35"));

}  // namespace
}  // namespace tandem::text
