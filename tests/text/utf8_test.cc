// Tests of the UTF-8 helpers and the GPT-2 byte-level alphabet (spec §4.5).
#include "runtime/text/utf8.h"

#include <set>

#include "gtest/gtest.h"

namespace tandem::text {
namespace {

TEST(ByteLevelTest, KnownMappings) {
  EXPECT_EQ(ByteToUnicode(' '), U'\u0120');   // Ġ
  EXPECT_EQ(ByteToUnicode('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(ByteToUnicode('\t'), U'\u0109');  // ĉ
  EXPECT_EQ(ByteToUnicode('\r'), U'\u010D');  // č
  EXPECT_EQ(ByteToUnicode(0x00), U'\u0100');
  EXPECT_EQ(ByteToUnicode(0x7F), U'\u0121');  // ġ
  EXPECT_EQ(ByteToUnicode(0xA0), U'\u0142');  // ł
  EXPECT_EQ(ByteToUnicode(0xAD), U'\u0143');  // Ń
  EXPECT_EQ(ByteToUnicode('a'), U'a');
  EXPECT_EQ(ByteToUnicode(0xFF), U'\u00FF');
  EXPECT_EQ(ByteToUnicodeUtf8(' '), "\xC4\xA0");
  EXPECT_EQ(BytesToByteLevel("a b\n"),
            "a\xC4\xA0"
            "b\xC4\x8A");
}

TEST(ByteLevelTest, AllBytesBijective) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = ByteToUnicode(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second) << "code point repeats for byte " << b;
    EXPECT_EQ(UnicodeToByte(cp), b);
    // Printable bytes map to themselves, the other 68 into U+0100..U+0143.
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (printable) {
      EXPECT_EQ(cp, static_cast<char32_t>(b));
    } else {
      EXPECT_GE(cp, 0x100u);
      EXPECT_LE(cp, 0x143u);
    }
  }
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(UnicodeToByte(U'\u0144'), -1);
  EXPECT_EQ(UnicodeToByte(U'\u4F60'), -1);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(ByteLevelToBytes(BytesToByteLevel(all)), all);
}

TEST(Utf8Test, DecodeRejectsInvalidSequences) {
  char32_t cp = 0;
  EXPECT_EQ(DecodeUtf8("\xE4\xBD\xA0", 0, &cp), 3u);
  EXPECT_EQ(cp, U'\u4F60');
  EXPECT_EQ(DecodeUtf8("\xF0\x9F\x91\x8D", 0, &cp), 4u);
  EXPECT_EQ(cp, U'\U0001F44D');
  EXPECT_EQ(DecodeUtf8("\xC0\x80", 0, &cp), 0u);          // overlong NUL
  EXPECT_EQ(DecodeUtf8("\xE0\x80\x80", 0, &cp), 0u);      // overlong
  EXPECT_EQ(DecodeUtf8("\xED\xA0\x80", 0, &cp), 0u);      // surrogate U+D800
  EXPECT_EQ(DecodeUtf8("\xF4\x90\x80\x80", 0, &cp), 0u);  // above U+10FFFF
  EXPECT_EQ(DecodeUtf8("\xE4\xBD", 0, &cp), 0u);          // truncated
  EXPECT_EQ(DecodeUtf8("\x80", 0, &cp), 0u);              // stray continuation
}

TEST(Utf8Test, SanitizeReplacesEachInvalidByte) {
  EXPECT_EQ(SanitizeUtf8("ok"), "ok");
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b"),
            "a\xEF\xBF\xBD"
            "b");
  // A truncated 3-byte sequence: both bytes are replaced, one U+FFFD each.
  EXPECT_EQ(SanitizeUtf8("\xE4\xBD"
                         "x"),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "x");
  EXPECT_TRUE(IsValidUtf8(SanitizeUtf8("\xC0\x80\xED\xA0\x80\xF5")));
}

TEST(Utf8Test, IncompleteTail) {
  EXPECT_EQ(IncompleteUtf8Tail(""), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0\x9F\x91"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("a\xF0\x9F\x91\x8D"), 0u);  // complete
  EXPECT_EQ(IncompleteUtf8Tail("a\xE0\x80"), 0u);          // can never become valid
  EXPECT_EQ(IncompleteUtf8Tail("a\x80"), 0u);              // stray continuation
  EXPECT_EQ(IncompleteUtf8Tail("\xFF"), 0u);
}

}  // namespace
}  // namespace tandem::text
