// The host's streaming read bandwidth with a pool's threads: the ceiling `tandem bench experts`
// and `tandem bench decode --backend cpu` report their rates against, measured in the same run.
#pragma once

#include <cstddef>

#include "experts/stream_read.h"

namespace tandem::cli {

// Streaming read bandwidth of `threads` threads over one buffer (filled once), read by claims
// (experts::StreamReadClaimed). Passes alternate experts/stream_read.h's two readers and the best
// pass counts.
class StreamProbe {
 public:
  // Filled by `threads` threads, one slice each (a 1 GiB fill by one thread takes seconds), started
  // under experts::WideBinding so that they spread even after a pool has pinned the caller.
  StreamProbe(int threads, size_t bytes);
  // The best of `passes` passes (even passes prefetch, odd ones do not), GB/s.
  double Measure(int passes);

 private:
  int threads_;
  experts::LineAlignedWords buf_;  // uninitialised until the threads fill it
};

// Bytes of the probe's buffer: four times the largest cache, at least 1 GiB, in whole claims of
// StreamReadClaimed.
size_t StreamProbeBytes();

}  // namespace tandem::cli
