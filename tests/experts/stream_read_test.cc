// The bench's ceiling readers must read every word they are given: a reader that skipped lines
// would report a bandwidth the kernels can never reach.
#include "experts/stream_read.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>

namespace tandem::experts {
namespace {

TEST(StreamRead, BothReadersSumEveryWord) {
  constexpr size_t kWords = 16 * 1000;  // more than the 4 KiB prefetch distance, whole line pairs
  LineAlignedWords buffer(kWords);
  uint64_t* words = buffer.data();
  ASSERT_EQ(reinterpret_cast<uintptr_t>(words) % 64, 0u);
  uint64_t expected = 0;
  for (size_t i = 0; i < kWords; ++i) {
    words[i] = i * 2654435761u + 7;  // distinct values, so a skipped or repeated word shows
    expected += words[i];
  }
  EXPECT_EQ(SumWordsPlain(words, kWords), expected);
  EXPECT_EQ(SumWordsPrefetching(words, kWords), expected);
  // The last two lines alone: the loops' bounds.
  uint64_t tail = 0;
  for (size_t i = kWords - 16; i < kWords; ++i) tail += words[i];
  EXPECT_EQ(SumWordsPrefetching(words + kWords - 16, 16), tail);
  EXPECT_EQ(SumWordsPlain(words + kWords - 16, 16), tail);
}

TEST(StreamRead, ClaimsReadEveryChunkOnce) {
  constexpr size_t kWords = 3 * kStreamChunkWords;
  LineAlignedWords buffer(kWords);
  uint64_t expected = 0;
  for (size_t i = 0; i < kWords; ++i) {
    buffer.data()[i] = i * 2654435761u + 7;
    expected += buffer.data()[i];
  }
  for (int threads : {1, 2, 5}) {  // 5: more threads than chunks
    for (bool prefetching : {false, true}) {
      const StreamReading r = StreamReadClaimed(buffer, threads, prefetching);
      EXPECT_EQ(r.sum, expected) << threads << " threads, prefetching " << prefetching;
      EXPECT_GT(r.gbps, 0.0);
    }
  }
}

}  // namespace
}  // namespace tandem::experts
