#include "runtime/base/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/base/sizes.h"

namespace tandem {

ProgressBar::ProgressBar(std::string label, uint64_t total_bytes)
    : label_(std::move(label)), total_(total_bytes) {
  const char* env = std::getenv("TANDEM_PROGRESS");
  enabled_ = env != nullptr ? std::strcmp(env, "0") != 0 : ::isatty(STDERR_FILENO) == 1;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() {
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) Draw(last_done_, /*final_line=*/true);
}

void ProgressBar::Update(uint64_t done) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  last_done_ = done;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  last_draw_ = now;
  Draw(done, /*final_line=*/false);
}

void ProgressBar::Draw(uint64_t done, bool final_line) {
  constexpr int kWidth = 30;
  double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  if (frac > 1.0) frac = 1.0;
  int filled = static_cast<int>(frac * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = '\0';
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "\r%s [%s] %5.1f%%  %s / %s  %.1fs%s", label_.c_str(), bar, frac * 100.0,
               FormatBytes(done).c_str(), FormatBytes(total_).c_str(), secs,
               final_line ? "\n" : "");
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace tandem
