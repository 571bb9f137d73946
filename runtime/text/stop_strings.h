// Stop strings for streamed generation: detects the first occurrence of any stop string in the
// generated text and holds back any tail that could still become one, so a caller printing what
// Push() returns never prints part of a stop string. Works on bytes; it does not tokenise.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::text {

class StopStringMatcher {
 public:
  // Empty stop strings are ignored.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;  // safe to show now
    bool stopped = false;
    std::string stop;  // the stop string found (when stopped)
  };

  // Appends newly generated text. On a stop, `text` is everything up to (not including) the
  // earliest stop string, and later calls return nothing. Otherwise `text` is the new text minus
  // a held-back tail that is a proper prefix of some stop string.
  Result Push(std::string_view text);

  // End of generation without a stop: returns the held-back tail.
  std::string Flush();

  bool stopped() const { return stopped_; }
  // Bytes currently held back.
  size_t held_bytes() const { return held_.size(); }
  void Reset();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace tandem::text
