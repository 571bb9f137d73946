#include "experts/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "experts/attention_internal.h"

namespace tandem::experts {
namespace {

// Work items per thread to aim for: chunks short enough that a single decode row and key-value
// head spread over every thread, and the last items are short.
constexpr int64_t kItemsPerThread = 4;
constexpr int64_t kMinChunk = 32, kMaxChunk = 512;

}  // namespace

void AttendChunkScalar(const AttendChunkArgs& a) {
  const int64_t n = a.j1 - a.j0;
  for (int i = 0; i < a.n_heads; ++i) {
    const float* q = a.q + i * a.q_head_stride;
    float* s = a.scores + i * n;
    float max_s = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      const float* k = a.k + (a.j0 + j) * a.kv_stride;
      float dot = 0;
      for (int d = 0; d < a.head_dim; ++d) dot += q[d] * k[d];
      s[j] = dot * a.scale;
      max_s = std::max(max_s, s[j]);
    }
    float* out = a.partial + i * a.partial_stride;
    float* o = out + 2;
    std::fill_n(o, a.head_dim, 0.0f);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float p = std::exp(s[j] - max_s);
      sum += p;
      const float* v = a.v + (a.j0 + j) * a.kv_stride;
      for (int d = 0; d < a.head_dim; ++d) o[d] += p * v[d];
    }
    out[0] = max_s;
    out[1] = sum;
  }
}

absl::Status Attend(ExpertPool& pool, Isa isa, const AttentionProblem& p,
                    AttentionScratch& scratch) {
  if (p.n_rows < 1 || p.n_rows > kMaxAttendRows || p.n_head_kv < 1 || p.n_head < 1 ||
      p.n_head % p.n_head_kv != 0 || p.head_dim < 1 || p.n_past < 0 || p.q == nullptr ||
      p.k == nullptr || p.v == nullptr || p.out == nullptr ||
      p.kv_stride < static_cast<int64_t>(p.n_head_kv) * p.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention: bad shape (rows ", p.n_rows, ", heads ", p.n_head, "/", p.n_head_kv,
        ", head dim ", p.head_dim, ", past ", p.n_past, ", kv stride ", p.kv_stride, ")"));
  }
  if (!CpuSupports(isa)) {
    return absl::FailedPreconditionError(
        absl::StrCat("attention: this CPU cannot run the ", IsaName(isa), " kernels"));
  }
  const int group = p.n_head / p.n_head_kv;
  const int64_t max_keys = static_cast<int64_t>(p.n_past) + p.n_rows;
  // Chunk length: about kItemsPerThread items per thread over (row, key-value head, chunk), in
  // multiples of 16 positions.
  const int64_t want_chunks = std::max<int64_t>(
      1, kItemsPerThread * pool.threads() / (static_cast<int64_t>(p.n_rows) * p.n_head_kv));
  const int64_t per_chunk = (max_keys + want_chunks - 1) / want_chunks;
  const int64_t chunk = std::clamp<int64_t>((per_chunk + 15) / 16 * 16, kMinChunk, kMaxChunk);
  const int64_t n_chunks = (max_keys + chunk - 1) / chunk;
  const int64_t slot = 2 + p.head_dim;  // max, sum, weighted values
  scratch.partial.resize(
      std::max(scratch.partial.size(),
               static_cast<size_t>(p.n_rows) * p.n_head * n_chunks * static_cast<size_t>(slot)));
  float* const partial = scratch.partial.data();
  auto partial_at = [&](int64_t t, int64_t h, int64_t c) {
    return partial + ((t * p.n_head + h) * n_chunks + c) * slot;
  };
  const bool simd = isa != Isa::kScalar && p.head_dim % 8 == 0;
  const int64_t items = static_cast<int64_t>(p.n_rows) * p.n_head_kv * n_chunks;
  pool.ParallelFor(items, 1, [&](int64_t begin, int64_t end) {
    // The chunk's scores, per thread, grown once.
    thread_local std::vector<float> scores;
    scores.resize(std::max(scores.size(), static_cast<size_t>(group * chunk)));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = i / (p.n_head_kv * n_chunks);
      const int64_t g = i / n_chunks % p.n_head_kv, c = i % n_chunks;
      const int64_t keys = p.n_past + t + 1;  // positions row t sees
      const int64_t j0 = c * chunk, j1 = std::min(keys, j0 + chunk);
      if (j0 >= j1) {  // past this row's last position: an empty chunk
        for (int h = 0; h < group; ++h) {
          float* out = partial_at(t, g * group + h, c);
          out[0] = -std::numeric_limits<float>::infinity();
          out[1] = 0;
        }
        continue;
      }
      const AttendChunkArgs args{
          .q = p.q + t * p.q_row_stride + g * group * p.q_head_stride,
          .q_head_stride = p.q_head_stride,
          .n_heads = group,
          .k = p.k + g * p.head_dim,
          .v = p.v + g * p.head_dim,
          .kv_stride = p.kv_stride,
          .head_dim = p.head_dim,
          .j0 = j0,
          .j1 = j1,
          .scale = p.scale,
          .scores = scores.data(),
          .partial = partial_at(t, g * group, c),
          .partial_stride = n_chunks * slot,
      };
      if (simd) {
        AttendChunkAvx2(args);
      } else {
        AttendChunkScalar(args);
      }
    }
  });
  // Merge each (row, head)'s chunks: rescale every chunk to the largest max.
  pool.ParallelFor(static_cast<int64_t>(p.n_rows) * p.n_head, 1, [&](int64_t begin, int64_t end) {
    for (int64_t th = begin; th < end; ++th) {
      const int64_t t = th / p.n_head, h = th % p.n_head;
      float max_all = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < n_chunks; ++c) {
        const float* part = partial_at(t, h, c);
        if (part[1] > 0) max_all = std::max(max_all, part[0]);
      }
      float* o = p.out + th * p.head_dim;
      std::fill_n(o, p.head_dim, 0.0f);
      float sum = 0;
      for (int64_t c = 0; c < n_chunks; ++c) {
        const float* part = partial_at(t, h, c);
        if (part[1] == 0) continue;
        const float w = std::exp(part[0] - max_all);
        sum += w * part[1];
        for (int d = 0; d < p.head_dim; ++d) o[d] += w * part[2 + d];
      }
      const float inv = 1.0f / sum;
      for (int d = 0; d < p.head_dim; ++d) o[d] *= inv;
    }
  });
  return absl::OkStatus();
}

}  // namespace tandem::experts
