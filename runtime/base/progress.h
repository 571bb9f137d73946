// A progress bar on stderr for long loads and syntheses. It draws only when stderr is a terminal
// (or TANDEM_PROGRESS=1) and redraws at most ten times a second, so it costs nothing in pipelines.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace tandem {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total_bytes);
  ~ProgressBar();  // draws the final state and a newline if anything was drawn
  // Thread-safe; `done` is cumulative.
  void Update(uint64_t done);

 private:
  void Draw(uint64_t done, bool final_line);
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool drawn_ = false;
  uint64_t last_done_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::mutex mu_;
};

}  // namespace tandem
