// UTF-8 decoding/encoding and the GPT-2 byte-level table. See utf8.h.
#include "runtime/text/utf8.h"

#include <array>

namespace tandem::text {
namespace {

// Valid range of the second byte for each lead byte (RFC 3629 table); rejects overlongs,
// surrogates and code points above U+10FFFF at the second byte already.
struct LeadInfo {
  uint8_t length;  // 0: not a lead byte
  uint8_t second_lo;
  uint8_t second_hi;
};

constexpr LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};  // continuation bytes and the overlong leads C0, C1
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates D800..DFFF
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // up to U+10FFFF
  return {0, 0, 0};
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

struct ByteTables {
  std::array<char32_t, 256> to_unicode{};
  std::array<std::string, 256> to_unicode_utf8;
  std::array<int16_t, 0x144> from_unicode{};  // every mapped code point is below U+0144
};

ByteTables MakeByteTables() {
  ByteTables t;
  t.from_unicode.fill(-1);
  int next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const char32_t cp =
        printable ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + next_extra++);
    t.to_unicode[b] = cp;
    t.from_unicode[cp] = static_cast<int16_t>(b);
    AppendUtf8(cp, &t.to_unicode_utf8[b]);
  }
  return t;
}

const ByteTables& Tables() {
  static const ByteTables tables = MakeByteTables();
  return tables;
}

}  // namespace

size_t DecodeUtf8(std::string_view s, size_t pos, char32_t* cp) {
  if (pos >= s.size()) return 0;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
  const size_t left = s.size() - pos;
  const LeadInfo lead = Lead(p[0]);
  if (lead.length == 0 || lead.length > left) return 0;
  if (lead.length == 1) {
    *cp = p[0];
    return 1;
  }
  if (p[1] < lead.second_lo || p[1] > lead.second_hi) return 0;
  for (size_t i = 2; i < lead.length; ++i) {
    if (!IsContinuation(p[i])) return 0;
  }
  char32_t value = p[0] & (0x7F >> lead.length);
  for (size_t i = 1; i < lead.length; ++i) value = (value << 6) | (p[i] & 0x3F);
  *cp = value;
  return lead.length;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  size_t pos = 0;
  char32_t cp;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t n = DecodeUtf8(s, pos, &cp);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  char32_t cp;
  while (pos < s.size()) {
    const size_t n = DecodeUtf8(s, pos, &cp);
    if (n == 0) {
      out.append(kReplacementUtf8);
      ++pos;
    } else {
      out.append(s.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

size_t IncompleteUtf8Tail(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  // Find the last non-continuation byte within the last 4 bytes.
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const size_t i = n - back;
    if (IsContinuation(p[i])) continue;
    const LeadInfo lead = Lead(p[i]);
    if (lead.length <= back)
      return 0;  // ASCII, invalid lead, or a sequence that is already long enough
    if (back >= 2 && (p[i + 1] < lead.second_lo || p[i + 1] > lead.second_hi)) return 0;
    return back;  // the remaining bytes are continuations by construction of the loop
  }
  return 0;
}

char32_t ByteToUnicode(uint8_t byte) { return Tables().to_unicode[byte]; }

std::string_view ByteToUnicodeUtf8(uint8_t byte) { return Tables().to_unicode_utf8[byte]; }

int UnicodeToByte(char32_t cp) {
  if (cp >= Tables().from_unicode.size()) return -1;
  return Tables().from_unicode[cp];
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out.append(ByteToUnicodeUtf8(static_cast<uint8_t>(c)));
  return out;
}

std::string ByteLevelToBytes(std::string_view byte_level) {
  std::string out;
  out.reserve(byte_level.size());
  size_t pos = 0;
  char32_t cp;
  while (pos < byte_level.size()) {
    const size_t n = DecodeUtf8(byte_level, pos, &cp);
    if (n == 0) {
      out.push_back(byte_level[pos]);
      ++pos;
      continue;
    }
    const int byte = UnicodeToByte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(byte_level.substr(pos, n));
    }
    pos += n;
  }
  return out;
}

}  // namespace tandem::text
