// PackedExperts (packed_experts.h): allocation and the parallel repack.
#include "experts/packed_experts.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "experts/kernels.h"
#include "experts/rows8.h"
#include "runtime/base/status_macros.h"

namespace tandem::experts {
namespace {

bool Packs(const ExpertTensor& t, Isa isa) {
  return t.layout == WeightLayout::kGguf && CanPackRows8(t.type, t.rows) &&
         GetDotKernel(isa, t.type, WeightLayout::kRows8) != nullptr;
}

}  // namespace

int64_t AvailableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

PackedExperts::Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PackedExperts::Buffer& PackedExperts::Buffer::operator=(Buffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

PackedExperts::Buffer::~Buffer() {
  if (data_ != nullptr) munmap(data_, static_cast<size_t>(bytes_));
}

absl::StatusOr<PackedExperts::Buffer> PackedExperts::Buffer::Map(int64_t bytes) {
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("expert pool: cannot map ", bytes, " bytes to repack experts into (",
                     std::strerror(errno), "; --no-cpu-repack reads them in place)"));
  }
  // Huge pages where the kernel grants them: the repack writes every page once, and 4 KiB pages
  // made it mostly page faults on the 2-core VM (perf: PackRows8 itself 5% of the samples).
  // Advice only: without it the pages are ordinary.
  madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);
  Buffer b;
  b.data_ = static_cast<uint8_t*>(p);
  b.bytes_ = bytes;
  return b;
}

bool PackedExperts::WouldPack(const ExpertWeights& w, Isa isa) {
  return (Packs(w.gate, isa) && Packs(w.up, isa)) || Packs(w.down, isa);
}

absl::StatusOr<PackedExperts> PackedExperts::Pack(const ExpertWeights& w, ExpertPool& pool) {
  PackedExperts packed;
  packed.weights_ = w;
  const bool gate_up = Packs(w.gate, pool.isa()) && Packs(w.up, pool.isa());
  const bool down = Packs(w.down, pool.isa());
  struct Job {
    ExpertTensor* tensor;
    Buffer* owner;
  };
  Job jobs[3];
  int n_jobs = 0;
  if (gate_up) {
    jobs[n_jobs++] = {&packed.weights_.gate, &packed.gate_};
    jobs[n_jobs++] = {&packed.weights_.up, &packed.up_};
  }
  if (down) jobs[n_jobs++] = {&packed.weights_.down, &packed.down_};
  for (int i = 0; i < n_jobs; ++i) {
    ExpertTensor& t = *jobs[i].tensor;
    const int64_t bytes = t.expert_bytes * w.n_expert;
    TANDEM_ASSIGN_OR_RETURN(*jobs[i].owner, Buffer::Map(bytes));
    uint8_t* dst = jobs[i].owner->data();
    // One expert per index: 0.9-2.4 MB each on the benchmark shapes, plenty per claim. ParallelFor
    // returns when every range has run, so t still describes the source throughout.
    pool.ParallelFor(w.n_expert, 1, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) {
        PackRows8(t.type, t.data + e * t.expert_bytes, t.rows, t.cols, dst + e * t.expert_bytes);
      }
    });
    t.data = dst;
    t.layout = WeightLayout::kRows8;
    packed.packed_bytes_ += bytes;
  }
  return packed;
}

}  // namespace tandem::experts
