// UTF-8 helpers and the GPT-2 byte-level alphabet shared by the tokenizer, the decoders and the
// chat formatter. Strict decoding (no overlongs, no surrogates, nothing above U+10FFFF); invalid
// bytes become U+FFFD one per byte. Pure functions on byte strings: no allocation beyond the
// result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::text {

inline constexpr char32_t kReplacementChar = 0xFFFD;
// U+FFFD in UTF-8.
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

// Decodes the code point that starts at s[pos]. On success returns its length (1..4) and sets
// *cp; when the bytes at pos are not a complete, valid sequence returns 0 (and leaves *cp alone).
size_t DecodeUtf8(std::string_view s, size_t pos, char32_t* cp);

// Appends the UTF-8 encoding of `cp` (which must be a valid scalar value) to `out`.
void AppendUtf8(char32_t cp, std::string* out);

// True when `s` is entirely valid UTF-8.
bool IsValidUtf8(std::string_view s);

// Returns `s` with every byte that does not belong to a valid sequence replaced by U+FFFD.
std::string SanitizeUtf8(std::string_view s);

// Length of a trailing byte run of `s` that is a proper prefix of some valid UTF-8 sequence and so
// could still be completed by more bytes (0..3). Bytes before it are not inspected.
size_t IncompleteUtf8Tail(std::string_view s);

// The GPT-2 byte-to-unicode bijection (spec §4.5): byte b is written as code point
// ByteToUnicode(b).
char32_t ByteToUnicode(uint8_t byte);
// The UTF-8 encoding of ByteToUnicode(byte) (one or two bytes).
std::string_view ByteToUnicodeUtf8(uint8_t byte);
// Inverse of ByteToUnicode; returns -1 for code points outside the 256-symbol alphabet.
int UnicodeToByte(char32_t cp);

// Maps raw bytes into the byte-level alphabet (UTF-8 of the mapped code points).
std::string BytesToByteLevel(std::string_view bytes);
// Maps byte-level text back to raw bytes. Code points outside the alphabet are copied through as
// their own UTF-8 (a malformed vocabulary entry, not a user error). Invalid UTF-8 is copied as is.
std::string ByteLevelToBytes(std::string_view byte_level);

}  // namespace tandem::text
