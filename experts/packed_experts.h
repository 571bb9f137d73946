// Expert tensors repacked once, at load, into the layouts the pool's kernels read fastest on this
// CPU (rows8.h: Q4_K and Q3_K on AVX-512 and AVX2), and owned here. The pool computes the same sums
// either way (float rounding aside); packing trades a copy of those tensors in RAM and a pass over
// them at load for less kernel time a byte (docs/perf/experts.md, session 20).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "experts/pool.h"

namespace tandem::experts {

// Memory the OS could give this process now without swapping, from MemAvailable in /proc/meminfo
// (free memory plus reclaimable caches, a model file's cached pages among them); 0 when it cannot
// tell. The engine checks a repack's copy against it before making one: an anonymous mapping of
// any size succeeds, and running out while filling it would end the process.
int64_t AvailableMemoryBytes();

class PackedExperts {
 public:
  // Packs each expert tensor of `w` that `pool`'s ISA has a rows8 kernel for (CanPackRows8 and
  // GetDotKernel(isa, type, kRows8)), gate and up only together, on the pool's threads. The rest
  // of weights() still points into `w`'s memory, which must outlive this. ResourceExhausted when
  // the copy cannot be allocated.
  static absl::StatusOr<PackedExperts> Pack(const ExpertWeights& w, ExpertPool& pool);

  // True when Pack would copy any tensor of `w` for `isa`.
  static bool WouldPack(const ExpertWeights& w, Isa isa);

  const ExpertWeights& weights() const { return weights_; }
  // Bytes this object holds (the packed tensors).
  int64_t packed_bytes() const { return packed_bytes_; }

 private:
  // Anonymous memory of its own (mmap, huge pages asked for), unmapped when destroyed.
  class Buffer {
   public:
    Buffer() = default;
    Buffer(Buffer&& o) noexcept;
    Buffer& operator=(Buffer&& o) noexcept;
    ~Buffer();
    static absl::StatusOr<Buffer> Map(int64_t bytes);
    uint8_t* data() const { return data_; }

   private:
    uint8_t* data_ = nullptr;
    int64_t bytes_ = 0;
  };
  ExpertWeights weights_;
  Buffer gate_, up_, down_;
  int64_t packed_bytes_ = 0;
};

}  // namespace tandem::experts
