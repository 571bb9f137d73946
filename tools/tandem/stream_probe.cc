#include "tools/tandem/stream_probe.h"

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "experts/topology.h"

namespace tandem::cli {

StreamProbe::StreamProbe(int threads, size_t bytes) : threads_(threads), buf_(bytes / 8) {
  const size_t slice = buf_.size() / threads_;
  std::vector<std::thread> fill;
  {
    const experts::WideBinding wide;
    for (int t = 0; t < threads_; ++t) {
      fill.emplace_back([this, t, slice] {
        const size_t first = slice * t, end = t + 1 == threads_ ? buf_.size() : first + slice;
        for (size_t i = first; i < end; ++i) buf_.data()[i] = i;
      });
    }
  }
  for (auto& th : fill) th.join();
}

double StreamProbe::Measure(int passes) {
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    best = std::max(best, experts::StreamReadClaimed(buf_, threads_, pass % 2 == 0).gbps);
  }
  return best;
}

size_t StreamProbeBytes() {
  constexpr size_t kClaimBytes = experts::kStreamChunkWords * 8;
  return static_cast<size_t>(std::max<int64_t>(int64_t{1} << 30, experts::BeyondCachesBytes())) /
         kClaimBytes * kClaimBytes;
}

}  // namespace tandem::cli
