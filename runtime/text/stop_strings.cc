// Stop-string matching with hold-back. See stop_strings.h.
#include "runtime/text/stop_strings.h"

#include <algorithm>

namespace tandem::text {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (std::string& s : stop_strings) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopStringMatcher::Result StopStringMatcher::Push(std::string_view text) {
  Result result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  held_.append(text);
  // The earliest stop wins; at the same position the longer one does.
  size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : stops_) {
    const size_t pos = held_.find(stop);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && stop.size() > best->size())) {
      best_pos = pos;
      best = &stop;
    }
  }
  if (best != nullptr) {
    result.text = held_.substr(0, best_pos);
    result.stopped = true;
    result.stop = *best;
    stopped_ = true;
    held_.clear();
    return result;
  }
  // Everything before the longest suffix that begins some stop string can go out. Text emitted
  // earlier can never be part of a later match: its candidate starts were held back then.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, held_.size()); len > hold; --len) {
      if (held_.compare(held_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  result.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return result;
}

std::string StopStringMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

void StopStringMatcher::Reset() {
  held_.clear();
  stopped_ = false;
}

}  // namespace tandem::text
