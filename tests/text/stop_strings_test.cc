// Stop strings: detection across chunk boundaries and hold-back of possible prefixes.
#include "runtime/text/stop_strings.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::text {
namespace {

TEST(StopStringsTest, StopInsideOneChunk) {
  StopStringMatcher m({"</s>", "User:"});
  StopStringMatcher::Result r = m.Push("Hello there.\nUser: hi");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "Hello there.\n");
  EXPECT_EQ(r.stop, "User:");
  EXPECT_TRUE(m.stopped());
  r = m.Push("more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopStringsTest, HoldsBackPossiblePrefixes) {
  StopStringMatcher m({"<|im_end|>"});
  StopStringMatcher::Result r = m.Push("answer <|im");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, "answer ");
  EXPECT_EQ(m.held_bytes(), 4u);
  r = m.Push("_e");
  EXPECT_EQ(r.text, "");
  r = m.Push("nd|> trailing");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopStringsTest, FalseAlarmIsReleased) {
  StopStringMatcher m({"<|im_end|>"});
  EXPECT_EQ(m.Push("a <|i").text, "a ");
  EXPECT_EQ(m.Push("x").text, "<|ix");  // no longer a prefix: released at once
  EXPECT_EQ(m.Push("y <").text, "y ");
  EXPECT_EQ(m.Flush(), "<");  // end of generation: the tail is shown
  EXPECT_FALSE(m.stopped());
}

TEST(StopStringsTest, EarliestStopWinsAndOverlaps) {
  StopStringMatcher m({"abc", "bcd", "b"});
  StopStringMatcher::Result r = m.Push("xxabcd");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "xx");  // "abc" at 2 is earlier than "bcd" and "b" at 3
  EXPECT_EQ(r.stop, "abc");
  // At the same position the longer stop string is reported.
  StopStringMatcher same({"b", "bc"});
  r = same.Push("abc");
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(r.stop, "bc");
}

TEST(StopStringsTest, NoStopsPassesEverything) {
  StopStringMatcher m({"", ""});
  EXPECT_EQ(m.Push("abc").text, "abc");
  EXPECT_EQ(m.held_bytes(), 0u);
}

TEST(StopStringsTest, RandomChunkingNeverLeaksAStopPrefixAndFindsTheStop) {
  const std::vector<std::string> stops = {"STOP", "\n\nUser", "ab"};
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    // Random text over a small alphabet (so partial matches are common).
    std::string text;
    const int len = 5 + rng() % 40;
    for (int i = 0; i < len; ++i) text += "STOPU\nsera b"[rng() % 13];
    // Reference: earliest match over the whole text.
    size_t first = std::string::npos;
    for (const std::string& s : stops) first = std::min(first, text.find(s));
    StopStringMatcher m(stops);
    std::string shown;
    bool stopped = false;
    for (size_t pos = 0; pos < text.size() && !stopped;) {
      const size_t n = 1 + rng() % 5;
      StopStringMatcher::Result r = m.Push(std::string_view(text).substr(pos, n));
      shown += r.text;
      stopped = r.stopped;
      pos += n;
      // Whatever has been shown is a prefix of the text before the first stop.
      ASSERT_LE(shown.size(), std::min(first, text.size())) << text;
    }
    if (!stopped) shown += m.Flush();
    EXPECT_EQ(stopped, first != std::string::npos) << text;
    EXPECT_EQ(shown, text.substr(0, first)) << text;
  }
}

}  // namespace
}  // namespace tandem::text
