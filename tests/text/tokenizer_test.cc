// Tests of the BPE tokenizer on a hand-built vocabulary: merge order, special tokens, round trips,
// decoding rules and the streaming decoder.
#include "runtime/text/tokenizer.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/text/utf8.h"
#include "tests/text/test_vocab.h"

namespace tandem::text {
namespace {

using testing::BL;
using testing::MakeTestVocab;
using testing::TestVocab;

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test_ = MakeTestVocab();
    absl::StatusOr<Tokenizer> tok = Tokenizer::Create(test_.vocab);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::make_unique<Tokenizer>(std::move(*tok));
  }
  std::vector<int32_t> Enc(std::string_view text, bool parse_special = false) {
    absl::StatusOr<std::vector<int32_t>> ids = tok_->Encode(text, parse_special);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }
  int32_t Id(std::string_view text) const { return test_.Id(text); }
  int32_t Byte(char c) const { return static_cast<uint8_t>(c); }  // byte tokens are ids 0..255

  TestVocab test_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TokenizerTest, MergesFollowRankThenPosition) {
  // " the": h+e (rank 0) first, then Ġ+t (rank 1), then Ġt+he (rank 2).
  EXPECT_EQ(Enc(" the"), (std::vector<int32_t>{Id(BL(" the"))}));
  // "xyz": y+z has rank 3 and beats x+y (rank 4) although x+y is further left.
  EXPECT_EQ(Enc("xyz"), (std::vector<int32_t>{Byte('x'), Id("yz")}));
  // "qqq": both pairs have the same rank; the leftmost merges first.
  EXPECT_EQ(Enc("qqq"), (std::vector<int32_t>{Id("qq"), Byte('q')}));
  // "qqqq" -> qq qq -> qqqq; "qqqqq" leaves the last q alone.
  EXPECT_EQ(Enc("qqqq"), (std::vector<int32_t>{Id("qqqq")}));
  EXPECT_EQ(Enc("qqqqq"), (std::vector<int32_t>{Id("qqqq"), Byte('q')}));
  // "hello": he (0), ll (7), he+ll (10), hell+o (11). "h ell" (9) never applies: "ell" never forms.
  EXPECT_EQ(Enc("hello"), (std::vector<int32_t>{Id("hello")}));
  // Pre-tokenisation separates words, so merges never cross pieces: " the the".
  EXPECT_EQ(Enc(" the the"), (std::vector<int32_t>{Id(BL(" the")), Id(BL(" the"))}));
  // "\n\n" merges; "\n\n\n" is one piece (alternative 5) with a leftover newline.
  EXPECT_EQ(Enc("\n\n\n"), (std::vector<int32_t>{Id(BL("\n\n")), Byte('\n')}));
}

TEST_F(TokenizerTest, MergeResultThatIsNotATokenFallsBackToBytes) {
  Vocabulary v = MakeTestVocab().vocab;
  v.merges.insert(v.merges.begin(), {BL("z"), BL("z")});  // "zz" is not a token
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode("zz", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{Byte('z'), Byte('z')}));
}

TEST_F(TokenizerTest, ControlTokensOnlyWithParseSpecial) {
  const std::string text = "<|im_start|>hello<|im_end|>";
  const std::vector<int32_t> parsed = Enc(text, /*parse_special=*/true);
  EXPECT_EQ(parsed, (std::vector<int32_t>{Id("<|im_start|>"), Id("hello"), Id("<|im_end|>")}));
  const std::vector<int32_t> plain = Enc(text, /*parse_special=*/false);
  for (int32_t id : plain) {
    EXPECT_NE(tok_->TokenTypeOf(id), TokenType::kControl) << "id " << id;
  }
  EXPECT_EQ(tok_->Decode(plain), text);
  // Special rendering: control tokens are dropped unless asked for.
  EXPECT_EQ(tok_->Decode(parsed), "hello");
  EXPECT_EQ(tok_->Decode(parsed, /*render_special=*/true), text);
}

TEST_F(TokenizerTest, UserDefinedTokensAlwaysMatchLongestFirst) {
  EXPECT_EQ(Enc("<think>hello</think>"),
            (std::vector<int32_t>{Id("<think>"), Id("hello"), Id("</think>")}));
  // "<a><b>" is longer than "<a>" and wins; the remaining "<a>" is matched afterwards.
  EXPECT_EQ(Enc("<a><b><a>"), (std::vector<int32_t>{Id("<a><b>"), Id("<a>")}));
  // Text around special tokens is pre-tokenised per fragment: " the" keeps its leading space.
  EXPECT_EQ(Enc("<think> the"), (std::vector<int32_t>{Id("<think>"), Id(BL(" the"))}));
  EXPECT_EQ(tok_->Decode(Enc("<think> the")), "<think> the");
}

TEST_F(TokenizerTest, AddSpecialFollowsFlags) {
  Vocabulary v = MakeTestVocab().vocab;
  v.add_bos = true;
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok());
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode("hello", false, /*add_special=*/true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{v.bos_id, Id("hello")}));
  ids = tok_->Encode("hello", false, /*add_special=*/true);  // add_bos is false by default
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{Id("hello")}));
}

std::string RandomUtf8(std::mt19937& rng, int length) {
  // Code points from several ranges, including ones the regex treats specially.
  static const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},       {0x09, 0x0D},        {0xA0, 0x2FF},    {0x300, 0x36F}, {0x4E00, 0x9FFF},
      {0x1F300, 0x1F6FF}, {0x10000, 0x10FFFF}, {0xE000, 0xFFFD}, {0x0, 0x1F}};
  std::string out;
  for (int i = 0; i < length; ++i) {
    const auto& [lo, hi] = ranges[rng() % ranges.size()];
    char32_t cp = lo + rng() % (hi - lo + 1);
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    AppendUtf8(cp, &out);
  }
  return out;
}

TEST_F(TokenizerTest, RoundTripArbitraryUtf8) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const std::string text = RandomUtf8(rng, 1 + trial % 40);
    ASSERT_EQ(tok_->Decode(Enc(text)), text) << "trial " << trial;
  }
  const std::string fixed =
      "I'm here:\t12345 \u4F60\u597D\u4E16\u754C \U0001F44D\U0001F3FD e\u0301\r\n  x";
  EXPECT_EQ(tok_->Decode(Enc(fixed)), fixed);
}

TEST_F(TokenizerTest, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(tok_->Decode(Enc("a\xFF"
                             "b")),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(tok_->Decode(Enc("\xE4\xBD")), "\xEF\xBF\xBD\xEF\xBF\xBD");
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes(1 + trial % 30, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const std::string decoded = tok_->Decode(Enc(bytes));
    EXPECT_EQ(decoded, SanitizeUtf8(bytes)) << "trial " << trial;
    EXPECT_TRUE(IsValidUtf8(decoded));
  }
}

TEST_F(TokenizerTest, DecodeRulesPerTokenType) {
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{Id(BL(" the"))}), " the");
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{Id("<think>")}), "<think>");
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{Id("<|im_end|>")}), "");
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{Id("<|im_end|>")}, true), "<|im_end|>");
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{Id("[PAD999]")}, true), "");
  EXPECT_EQ(tok_->Decode(std::vector<int32_t>{-1, tok_->size(), 1 << 30}), "");
  EXPECT_EQ(tok_->TokenText(Id(BL(" the"))), "\xC4\xA0the");
  EXPECT_EQ(tok_->FindToken("<think>"), Id("<think>"));
  EXPECT_EQ(tok_->FindToken("no such token"), -1);
}

TEST_F(TokenizerTest, ByteTokensDecodeToTheirByte) {
  Vocabulary v = MakeTestVocab().vocab;
  v.tokens.push_back("<0x41>");
  v.types.push_back(TokenType::kByte);
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{v.size() - 1}), "A");
}

TEST_F(TokenizerTest, EndOfGeneration) {
  EXPECT_TRUE(tok_->IsEndOfGeneration(Id("<|im_end|>")));
  EXPECT_TRUE(tok_->IsEndOfGeneration(Id("<|endoftext|>")));
  EXPECT_FALSE(tok_->IsEndOfGeneration(Id("<|im_start|>")));
  EXPECT_FALSE(tok_->IsEndOfGeneration(Id("hello")));
  EXPECT_FALSE(tok_->IsEndOfGeneration(-5));
}

TEST_F(TokenizerTest, StreamingDecoderNeverEmitsPartialUtf8) {
  // 👍 = F0 9F 91 8D fed one byte token at a time.
  StreamingDecoder dec(*tok_);
  const std::string thumbs = "\xF0\x9F\x91\x8D";
  std::string all;
  for (size_t i = 0; i < thumbs.size(); ++i) {
    const std::string out = dec.Push(Byte(thumbs[i]));
    EXPECT_TRUE(IsValidUtf8(out));
    if (i + 1 < thumbs.size()) {
      EXPECT_EQ(out, "") << "byte " << i;
      EXPECT_EQ(dec.pending_bytes(), i + 1);
    } else {
      EXPECT_EQ(out, thumbs);
    }
    all += out;
  }
  EXPECT_EQ(dec.Flush(), "");
  // A token that ends inside a character: "a" + F0 is emitted as "a", F0 held back.
  EXPECT_EQ(dec.Push(Id(BL("a\xF0"))), "a");
  EXPECT_EQ(dec.Push(Byte('\x9F')), "");
  EXPECT_EQ(dec.Push(Byte('\x91')), "");
  EXPECT_EQ(dec.Push(Byte('\x8D')), thumbs);
  // A dangling sequence at the end becomes one U+FFFD.
  EXPECT_EQ(dec.Push(Byte('\xE4')), "");
  EXPECT_EQ(dec.Push(Byte('\xBD')), "");
  EXPECT_EQ(dec.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.pending_bytes(), 0u);
  // A byte that can never be completed is replaced at once; the next text follows.
  EXPECT_EQ(dec.Push(Byte('\xE4')), "");
  EXPECT_EQ(dec.Push(Byte('x')), "\xEF\xBF\xBDx");
  // Control tokens are skipped unless rendering specials.
  EXPECT_EQ(dec.Push(Id("<|im_end|>")), "");
  StreamingDecoder special(*tok_, /*render_special=*/true);
  EXPECT_EQ(special.Push(Id("<|im_end|>")), "<|im_end|>");
}

TEST_F(TokenizerTest, StreamingDecoderMatchesDecodeOnRandomText) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    const std::string text = RandomUtf8(rng, 30);
    StreamingDecoder dec(*tok_);
    std::string streamed;
    for (int32_t id : Enc(text)) {
      const std::string out = dec.Push(id);
      ASSERT_TRUE(IsValidUtf8(out));
      streamed += out;
    }
    streamed += dec.Flush();
    EXPECT_EQ(streamed, text);
  }
}

TEST(TokenizerCreateTest, RejectsInvalidVocabulary) {
  Vocabulary v = MakeTestVocab().vocab;
  v.types.pop_back();
  EXPECT_FALSE(Tokenizer::Create(v).ok());
  v = MakeTestVocab().vocab;
  v.eos_id = v.size();
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(v);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("eos"), std::string::npos) << tok.status();
}

TEST(TokenizerCreateTest, MissingByteTokensAreReported) {
  Vocabulary v = MakeTestVocab().vocab;
  v.tokens[0xBF] = "unused-slot";  // byte 0xBF ("¿" in the byte-level alphabet) has no token
  absl::StatusOr<Tokenizer> tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok());
  EXPECT_FALSE(tok->warnings().empty());
  // "ÿ" is C3 BF: without an unknown token the byte cannot be encoded, and the error says which.
  absl::StatusOr<std::vector<int32_t>> ids = tok->Encode("\xC3\xBF", false);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("0xBF"), std::string::npos) << ids.status();
  v.unk_id = 0;
  tok = Tokenizer::Create(v);
  ASSERT_TRUE(tok.ok());
  ids = tok->Encode("\xC3\xBF", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{0xC3, 0}));
}

}  // namespace
}  // namespace tandem::text
