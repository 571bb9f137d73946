// Pre-tokenizer splits for hard strings, worked out by hand from the regex semantics of spec §4.4
// (alternatives tried in order; the first that matches at a position is the piece).
#include "runtime/text/pretokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::text {
namespace {

using Pieces = std::vector<std::string>;

Pieces Split(PreTokenizerKind kind, std::string_view text) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(kind);
  EXPECT_TRUE(pre.ok()) << pre.status();
  absl::StatusOr<Pieces> pieces = pre->SplitToStrings(text);
  EXPECT_TRUE(pieces.ok()) << pieces.status();
  return *pieces;
}

// Cases where qwen2 and qwen35 agree (no combining marks).
struct Case {
  const char* name;
  std::string text;
  Pieces expected;
};

const std::vector<Case>& SharedCases() {
  static const std::vector<Case> cases = {
      // Alternative 1: contractions in any case; the apostrophe does not join the word before.
      {"contraction", "I'm", {"I", "'m"}},
      {"contraction_upper", "they'LL", {"they", "'LL"}},
      {"contraction_in_sentence", " they'LL go", {" they", "'LL", " go"}},
      {"contraction_all_caps", "DON'T", {"DON", "'T"}},
      // After a space the apostrophe is punctuation (alternative 4) and the letter stands alone.
      {"apostrophe_after_space", "it 's", {"it", " '", "s"}},
      // Alternative 3: one numeric code point per piece, any script, also No (½).
      {"digits", "12345", {"1", "2", "3", "4", "5"}},
      {"digits_in_word", "abc123def", {"abc", "1", "2", "3", "def"}},
      {"other_numerals", "\u0663\u00BD", {"\u0663", "\u00BD"}},
      // Alternative 6: a run of spaces gives its last space to the next word.
      {"space_run", "a   b", {"a", "  ", " b"}},
      {"trailing_spaces", "end   ", {"end", "   "}},
      // Alternative 5: whitespace up to the last newline.
      {"newlines_then_word", "\n\n x", {"\n\n", " x"}},
      {"spaces_newline_spaces", "  \n  hi", {"  \n", " ", " hi"}},
      {"crlf", "\r\n", {"\r\n"}},
      // Alternative 4: optional space, punctuation run, trailing newlines.
      {"punctuation", " ...!!\n", {" ...!!\n"}},
      // Letters of any script form one run.
      {"cjk", "\u4F60\u597D\u4E16\u754C", {"\u4F60\u597D\u4E16\u754C"}},
      // 👍 (So) + skin-tone modifier (Sk): both symbols, one piece.
      {"emoji_modifier", "\U0001F44D\U0001F3FD", {"\U0001F44D\U0001F3FD"}},
      // A single non-letter lead glues onto a letter run: "(i", ";i", "<n".
      {"code", "for(i=0;i<n;i++){", {"for", "(i", "=", "0", ";i", "<n", ";i", "++){"}},
      // A tab leads a word like a space does; of two tabs the first stands alone.
      {"tabs", "\tif x:\n\t\treturn", {"\tif", " x", ":\n", "\t", "\treturn"}},
      // NBSP is whitespace but also a valid single lead character for a word.
      {"nbsp", "x\u00A0y", {"x", "\u00A0y"}},
      {"hello_world", "Hello world", {"Hello", " world"}},
  };
  return cases;
}

TEST(PreTokenizerTest, Qwen2HardStrings) {
  for (const Case& c : SharedCases()) {
    EXPECT_EQ(Split(PreTokenizerKind::kQwen2, c.text), c.expected) << c.name;
  }
}

TEST(PreTokenizerTest, Qwen35HardStrings) {
  for (const Case& c : SharedCases()) {
    EXPECT_EQ(Split(PreTokenizerKind::kQwen35, c.text), c.expected) << c.name;
  }
}

TEST(PreTokenizerTest, CombiningMarksDifferBetweenQwen2AndQwen35) {
  // "é" decomposed as e + U+0301 COMBINING ACUTE ACCENT (Mn).
  const std::string e_acute = "e\u0301";
  // qwen2: the mark is not a letter, so it ends the run and forms a punctuation-like piece.
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, e_acute), (Pieces{"e", "\u0301"}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "cafe\u0301 ok"), (Pieces{"cafe", "\u0301", " ok"}));
  // qwen35: [\p{L}\p{M}]+ keeps the mark inside the word.
  EXPECT_EQ(Split(PreTokenizerKind::kQwen35, e_acute), (Pieces{"e\u0301"}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen35, "cafe\u0301 ok"), (Pieces{"cafe\u0301", " ok"}));
  // Precomposed é (U+00E9) is a letter for both.
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "caf\u00E9"), (Pieces{"caf\u00E9"}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen35, "caf\u00E9"), (Pieces{"caf\u00E9"}));
}

TEST(PreTokenizerTest, PiecesCoverInputExactly) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::Create(PreTokenizerKind::kQwen2);
  ASSERT_TRUE(pre.ok());
  const std::string text = "Mixed: 3 apples,\ttwo\u00A0pears  and \u4F60\u597D!\r\n\r\n  end";
  std::vector<PieceRange> pieces;
  ASSERT_TRUE(pre->Split(text, &pieces).ok());
  size_t expected_begin = 0;
  for (const PieceRange& p : pieces) {
    EXPECT_EQ(p.begin, expected_begin);
    EXPECT_LT(p.begin, p.end);
    expected_begin = p.end;
  }
  EXPECT_EQ(expected_begin, text.size());
}

TEST(PreTokenizerTest, EmptyInputHasNoPieces) {
  EXPECT_TRUE(Split(PreTokenizerKind::kQwen2, "").empty());
}

TEST(PreTokenizerTest, LongWhitespaceRunDoesNotFail) {
  // A megabyte of spaces followed by a word exercises backtracking in \s+(?!\S).
  std::string text(1 << 20, ' ');
  text += "x";
  const Pieces pieces = Split(PreTokenizerKind::kQwen2, text);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), (1u << 20) - 1);
  EXPECT_EQ(pieces[1], " x");
}

}  // namespace
}  // namespace tandem::text
