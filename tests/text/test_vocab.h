// A small hand-built byte-level vocabulary for the text tests: the 256 byte tokens (ids 0..255 in
// byte order), a few merges, and special tokens of every kind.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/text/utf8.h"
#include "runtime/text/vocabulary.h"

namespace tandem::text::testing {

// Byte-level text of raw bytes, e.g. BL(" the") == "Ġthe".
inline std::string BL(std::string_view bytes) { return BytesToByteLevel(bytes); }

struct TestVocab {
  Vocabulary vocab;
  // Ids of named tokens.
  int32_t Id(std::string_view text) const {
    for (int32_t i = 0; i < vocab.size(); ++i) {
      if (vocab.tokens[i] == text) return i;
    }
    return -1;
  }
};

inline TestVocab MakeTestVocab(PreTokenizerKind pre = PreTokenizerKind::kQwen2) {
  TestVocab t;
  Vocabulary& v = t.vocab;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(std::string(ByteToUnicodeUtf8(static_cast<uint8_t>(b))));
    v.types.push_back(TokenType::kNormal);
  }
  // Merges in rank order; each result is also a token.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {BL("h"), BL("e")},     // he
      {BL(" "), BL("t")},     // Ġt
      {BL(" t"), BL("he")},   // Ġthe
      {BL("y"), BL("z")},     // yz   (rank 3 beats "x y" at rank 4)
      {BL("x"), BL("y")},     // xy
      {BL("q"), BL("q")},     // qq   (ties: leftmost first)
      {BL("qq"), BL("qq")},   // qqqq
      {BL("l"), BL("l")},     // ll
      {BL("e"), BL("ll")},    // ell
      {BL("h"), BL("ell")},   // hell (never reached for "hello": "h e" has rank 0)
      {BL("he"), BL("ll")},   // hell via he + ll
      {BL("hell"), BL("o")},  // hello
      {BL(" "), BL("w")},     // Ġw
      {BL("a"), BL("\xF0")},  // a + first byte of a 4-byte sequence
      {BL("\n"), BL("\n")},   // ĊĊ
  };
  for (const auto& [left, right] : merges) {
    v.merges.emplace_back(left, right);
    const std::string merged = left + right;
    bool present = false;
    for (const std::string& token : v.tokens) present = present || token == merged;
    if (!present) {
      v.tokens.push_back(merged);
      v.types.push_back(TokenType::kNormal);
    }
  }
  auto add = [&](std::string text, TokenType type) {
    v.tokens.push_back(std::move(text));
    v.types.push_back(type);
    return v.size() - 1;
  };
  v.bos_id = v.eos_id = add("<|endoftext|>", TokenType::kControl);
  add("<|im_start|>", TokenType::kControl);
  v.eot_id = add("<|im_end|>", TokenType::kControl);
  add("<think>", TokenType::kUserDefined);
  add("</think>", TokenType::kUserDefined);
  add("<a>", TokenType::kUserDefined);
  add("<a><b>", TokenType::kUserDefined);
  add("[PAD999]", TokenType::kUnused);
  v.pre = pre;
  return t;
}

}  // namespace tandem::text::testing
