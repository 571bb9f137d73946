// Tests of the vocabulary loaders: GGUF tokenizer.* metadata and HF tokenizer.json, including the
// errors a file can cause.
#include "runtime/text/vocabulary.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/text/tokenizer.h"
#include "tests/text/test_vocab.h"

namespace tandem::text {
namespace {

using format::Array;
using format::Metadata;
using format::Value;
using format::ValueType;
using testing::BL;
using testing::MakeTestVocab;

Value StringArrayValue(const std::vector<std::string>& v) {
  return Value::Arr(Array{ValueType::kString, v});
}

// GGUF metadata equivalent to the hand-built test vocabulary.
Metadata TestMetadata() {
  const Vocabulary v = MakeTestVocab().vocab;
  Metadata md;
  md.Set("tokenizer.ggml.model", Value::Str("gpt2"));
  md.Set("tokenizer.ggml.pre", Value::Str("qwen2"));
  md.Set("tokenizer.ggml.tokens", StringArrayValue(v.tokens));
  std::vector<int32_t> types;
  for (TokenType t : v.types) types.push_back(static_cast<int32_t>(t));
  md.Set("tokenizer.ggml.token_type", Value::Arr(Array{ValueType::kInt32, types}));
  std::vector<std::string> merges;
  for (const auto& [l, r] : v.merges) merges.push_back(l + " " + r);
  md.Set("tokenizer.ggml.merges", StringArrayValue(merges));
  md.Set("tokenizer.ggml.bos_token_id", Value::U32(v.bos_id));
  md.Set("tokenizer.ggml.eos_token_id", Value::U32(v.eos_id));
  md.Set("tokenizer.ggml.padding_token_id", Value::U32(v.bos_id));
  md.Set("tokenizer.ggml.add_bos_token", Value::Bool(false));
  md.Set("tokenizer.chat_template", Value::Str("{{ messages }}"));
  return md;
}

std::string ErrorOf(const absl::StatusOr<Vocabulary>& v) {
  EXPECT_FALSE(v.ok());
  return v.ok() ? std::string() : std::string(v.status().message());
}

TEST(GgufVocabularyTest, LoadsAllKeys) {
  const Vocabulary expected = MakeTestVocab().vocab;
  absl::StatusOr<Vocabulary> v = Vocabulary::FromGgufMetadata(TestMetadata());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->tokens, expected.tokens);
  EXPECT_EQ(v->types, expected.types);
  EXPECT_EQ(v->merges, expected.merges);
  EXPECT_EQ(v->bos_id, expected.bos_id);
  EXPECT_EQ(v->eos_id, expected.eos_id);
  EXPECT_EQ(v->pad_id, expected.bos_id);
  // eot is not a key here: it is found from the text <|im_end|>.
  EXPECT_EQ(v->eot_id, expected.eot_id);
  EXPECT_EQ(v->pre, PreTokenizerKind::kQwen2);
  EXPECT_EQ(v->chat_template, "{{ messages }}");
  EXPECT_TRUE(v->warnings.empty());
  // The loaded vocabulary tokenises like the hand-built one.
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(*v);
  ASSERT_TRUE(tok.ok());
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode(" the hello", false);
  ASSERT_TRUE(ids.ok());
  const testing::TestVocab t = MakeTestVocab();
  EXPECT_EQ(*ids, (std::vector<int32_t>{t.Id(BL(" the")), ' ', t.Id("hello")}));
}

TEST(GgufVocabularyTest, MergeSplitsAtFirstSpaceAfterIndexZero) {
  Metadata md = TestMetadata();
  // "Ġ Ġ" style; and a part that starts with a literal space keeps it (split at index >= 1).
  md.Set("tokenizer.ggml.merges", StringArrayValue({"\xC4\xA0 \xC4\xA0", " a b"}));
  absl::StatusOr<Vocabulary> v = Vocabulary::FromGgufMetadata(md);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->merges.size(), 2u);
  EXPECT_EQ(v->merges[0], (std::pair<std::string, std::string>{"\xC4\xA0", "\xC4\xA0"}));
  EXPECT_EQ(v->merges[1], (std::pair<std::string, std::string>{" a", "b"}));
}

TEST(GgufVocabularyTest, Errors) {
  Metadata md = TestMetadata();
  md.Set("tokenizer.ggml.model", Value::Str("llama"));
  EXPECT_NE(ErrorOf(Vocabulary::FromGgufMetadata(md)).find("\"gpt2\""), std::string::npos);

  md = TestMetadata();
  md.Set("tokenizer.ggml.merges", StringArrayValue({"a b", "nospace"}));
  EXPECT_NE(ErrorOf(Vocabulary::FromGgufMetadata(md)).find("tokenizer.ggml.merges[1]"),
            std::string::npos);
  md.Set("tokenizer.ggml.merges", StringArrayValue({" x"}));  // only a leading space
  EXPECT_NE(ErrorOf(Vocabulary::FromGgufMetadata(md)).find("tokenizer.ggml.merges[0]"),
            std::string::npos);

  md = TestMetadata();
  md.Set("tokenizer.ggml.eos_token_id", Value::U32(100000));
  const std::string id_error = ErrorOf(Vocabulary::FromGgufMetadata(md));
  EXPECT_NE(id_error.find("tokenizer.ggml.eos_token_id"), std::string::npos) << id_error;
  EXPECT_NE(id_error.find("100000"), std::string::npos) << id_error;

  md = TestMetadata();
  md.Set("tokenizer.ggml.pre", Value::Str("llama-bpe"));
  const std::string pre_error = ErrorOf(Vocabulary::FromGgufMetadata(md));
  EXPECT_NE(pre_error.find("llama-bpe"), std::string::npos) << pre_error;
  EXPECT_NE(pre_error.find("qwen2"), std::string::npos) << pre_error;
  EXPECT_NE(pre_error.find("qwen35"), std::string::npos) << pre_error;

  md = TestMetadata();
  md.Set("tokenizer.ggml.token_type",
         Value::Arr(Array{ValueType::kInt32, std::vector<int32_t>{1, 1}}));
  EXPECT_NE(ErrorOf(Vocabulary::FromGgufMetadata(md)).find("tokenizer.ggml.token_type"),
            std::string::npos);

  md = TestMetadata();
  md.Set("tokenizer.ggml.tokens", Value::Str("not an array"));
  EXPECT_NE(ErrorOf(Vocabulary::FromGgufMetadata(md)).find("tokenizer.ggml.tokens"),
            std::string::npos);

  Metadata empty;
  EXPECT_NE(ErrorOf(Vocabulary::FromGgufMetadata(empty)).find("tokenizer.ggml.model"),
            std::string::npos);
}

TEST(GgufVocabularyTest, MissingPreMeansQwen2WithWarning) {
  Metadata md = TestMetadata();
  Metadata without_pre;
  for (const auto& [key, value] : md.entries()) {
    if (key != "tokenizer.ggml.pre") without_pre.Set(key, value);
  }
  absl::StatusOr<Vocabulary> v = Vocabulary::FromGgufMetadata(without_pre);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->pre, PreTokenizerKind::kQwen2);
  ASSERT_EQ(v->warnings.size(), 1u);
  EXPECT_NE(v->warnings[0].find("tokenizer.ggml.pre"), std::string::npos);

  md.Set("tokenizer.ggml.pre", Value::Str("qwen35"));
  v = Vocabulary::FromGgufMetadata(md);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->pre, PreTokenizerKind::kQwen35);
  md.Set("tokenizer.ggml.pre", Value::Str("deepseek-r1-qwen"));
  v = Vocabulary::FromGgufMetadata(md);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->pre, PreTokenizerKind::kQwen2);
}

TEST(GgufVocabularyTest, EndOfTurnTextIsForcedToControl) {
  Metadata md = TestMetadata();
  Vocabulary base = MakeTestVocab().vocab;
  std::vector<int32_t> types;
  for (TokenType t : base.types) types.push_back(static_cast<int32_t>(t));
  const int32_t im_end = MakeTestVocab().Id("<|im_end|>");
  types[im_end] = static_cast<int32_t>(TokenType::kUserDefined);
  md.Set("tokenizer.ggml.token_type", Value::Arr(Array{ValueType::kInt32, types}));
  absl::StatusOr<Vocabulary> v = Vocabulary::FromGgufMetadata(md);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->types[im_end], TokenType::kControl);
}

// ---- tokenizer.json ----------------------------------------------------------------------

class HfVocabularyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tandem_text_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // tokenizer.json for the test vocabulary; merges as "a b" strings or as [a, b] pairs.
  nlohmann::json TokenizerJson(bool pair_merges) const {
    const Vocabulary v = MakeTestVocab().vocab;
    nlohmann::json vocab = nlohmann::json::object();
    nlohmann::json added = nlohmann::json::array();
    for (int32_t id = 0; id < v.size(); ++id) {
      if (v.types[id] == TokenType::kNormal) {
        vocab[v.tokens[id]] = id;
      } else if (v.types[id] != TokenType::kUnused) {
        added.push_back({{"id", id},
                         {"content", v.tokens[id]},
                         {"special", v.types[id] == TokenType::kControl}});
      }
    }
    nlohmann::json merges = nlohmann::json::array();
    for (const auto& [l, r] : v.merges) {
      if (pair_merges) {
        merges.push_back({l, r});
      } else {
        merges.push_back(l + " " + r);
      }
    }
    return {
        {"version", "1.0"},
        {"added_tokens", added},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", std::string(kQwen2Pattern)}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"model",
         {{"type", "BPE"}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merges}}},
    };
  }
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(HfVocabularyTest, BothMergeEncodingsLoadTheSameVocabulary) {
  const Vocabulary expected = MakeTestVocab().vocab;
  for (bool pairs : {false, true}) {
    const std::string path = Write("tokenizer.json", TokenizerJson(pairs).dump());
    // The last (unused) id is not in the file; min_vocab_size pads up to it.
    absl::StatusOr<Vocabulary> v = Vocabulary::FromHfTokenizerJson(path, expected.size());
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->merges, expected.merges) << "pairs=" << pairs;
    ASSERT_EQ(v->size(), expected.size());
    for (int32_t id = 0; id < v->size(); ++id) {
      if (expected.types[id] == TokenType::kUnused) {
        // Ids the file lacks are filled as the converter does.
        EXPECT_EQ(v->tokens[id], "[PAD" + std::to_string(id) + "]");
      } else {
        EXPECT_EQ(v->tokens[id], expected.tokens[id]) << id;
      }
      EXPECT_EQ(v->types[id], expected.types[id]) << id;
    }
    EXPECT_EQ(v->pre, PreTokenizerKind::kQwen2);
    EXPECT_EQ(v->eos_id, -1);  // no tokenizer_config.json
    EXPECT_EQ(v->eot_id, expected.eot_id);
  }
}

TEST_F(HfVocabularyTest, ReadsTokenizerConfigBesideIt) {
  const std::string path = Write("tokenizer.json", TokenizerJson(false).dump());
  const std::string tmpl = "{% for message in messages %}{{ message['content'] }}{% endfor %}";
  Write("tokenizer_config.json", nlohmann::json({{"eos_token", "<|im_end|>"},
                                                 {"bos_token", nullptr},
                                                 {"pad_token", {{"content", "<|endoftext|>"}}},
                                                 {"add_bos_token", false},
                                                 {"chat_template", tmpl}})
                                     .dump());
  absl::StatusOr<Vocabulary> v = Vocabulary::FromHfTokenizerJson(path, /*min_vocab_size=*/400);
  ASSERT_TRUE(v.ok()) << v.status();
  const testing::TestVocab t = MakeTestVocab();
  EXPECT_EQ(v->eos_id, t.Id("<|im_end|>"));
  EXPECT_EQ(v->pad_id, t.Id("<|endoftext|>"));
  EXPECT_EQ(v->bos_id, -1);
  EXPECT_EQ(v->chat_template, tmpl);
  EXPECT_EQ(v->size(), 400);
  EXPECT_EQ(v->tokens[399], "[PAD399]");
  EXPECT_EQ(v->types[399], TokenType::kUnused);
}

TEST_F(HfVocabularyTest, ChatTemplateFromJinjaFile) {
  const std::string path = Write("tokenizer.json", TokenizerJson(false).dump());
  Write("chat_template.jinja", "{{ 'x' }}");
  absl::StatusOr<Vocabulary> v = Vocabulary::FromHfTokenizerJson(path);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->chat_template, "{{ 'x' }}");
}

TEST_F(HfVocabularyTest, Qwen35PatternIsRecognised) {
  nlohmann::json j = TokenizerJson(false);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = std::string(kQwen35Pattern);
  absl::StatusOr<Vocabulary> v = Vocabulary::FromHfTokenizerJson(Write("tokenizer.json", j.dump()));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->pre, PreTokenizerKind::kQwen35);
}

TEST_F(HfVocabularyTest, ErrorsNameThePath) {
  const std::string missing = (dir_ / "absent.json").string();
  std::string error = ErrorOf(Vocabulary::FromHfTokenizerJson(missing));
  EXPECT_NE(error.find(missing), std::string::npos) << error;

  const std::string malformed = Write("tokenizer.json", "{\"model\": {");
  error = ErrorOf(Vocabulary::FromHfTokenizerJson(malformed));
  EXPECT_NE(error.find(malformed), std::string::npos) << error;

  nlohmann::json j = TokenizerJson(false);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  const std::string other_regex = Write("tokenizer.json", j.dump());
  error = ErrorOf(Vocabulary::FromHfTokenizerJson(other_regex));
  EXPECT_NE(error.find("neither the qwen2 nor the qwen35"), std::string::npos) << error;

  j = TokenizerJson(false);
  j["model"]["merges"][2] = 17;
  error = ErrorOf(Vocabulary::FromHfTokenizerJson(Write("tokenizer.json", j.dump())));
  EXPECT_NE(error.find("model.merges[2]"), std::string::npos) << error;

  j = TokenizerJson(false);
  j["model"]["type"] = "Unigram";
  error = ErrorOf(Vocabulary::FromHfTokenizerJson(Write("tokenizer.json", j.dump())));
  EXPECT_NE(error.find("BPE"), std::string::npos) << error;

  const std::string good = Write("tokenizer.json", TokenizerJson(false).dump());
  Write("tokenizer_config.json", R"({"eos_token": "<|not_a_token|>"})");
  error = ErrorOf(Vocabulary::FromHfTokenizerJson(good));
  EXPECT_NE(error.find("tokenizer_config.json"), std::string::npos) << error;
  EXPECT_NE(error.find("<|not_a_token|>"), std::string::npos) << error;
}

}  // namespace
}  // namespace tandem::text
