// PackedExperts (packed_experts.h): allocation and the parallel repack.
#include "experts/packed_experts.h"

#include <mimalloc.h>

#include "absl/strings/str_cat.h"
#include "experts/kernels.h"
#include "experts/rows8.h"

namespace tandem::experts {
namespace {

bool Packs(const ExpertTensor& t, Isa isa) {
  return t.layout == WeightLayout::kGguf && CanPackRows8(t.type, t.rows) &&
         GetDotKernel(isa, t.type, WeightLayout::kRows8) != nullptr;
}

}  // namespace

void PackedExperts::Free::operator()(uint8_t* p) const { mi_free(p); }

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
    std::unique_ptr<uint8_t, Free>* owner;
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
    jobs[i].owner->reset(static_cast<uint8_t*>(mi_malloc_aligned(static_cast<size_t>(bytes), 64)));
    if (*jobs[i].owner == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "expert pool: cannot allocate ", bytes, " bytes to repack ",
          quant::GetTypeInfo(t.type).name, " experts (--no-cpu-repack reads them in place)"));
    }
    const uint8_t* src = t.data;
    uint8_t* dst = jobs[i].owner->get();
    const ExpertTensor view = t;
    // One expert per index: 0.9-2.4 MB each on the benchmark shapes, plenty per claim.
    pool.ParallelFor(w.n_expert, 1, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) {
        PackRows8(view.type, src + e * view.expert_bytes, view.rows, view.cols,
                  dst + e * view.expert_bytes);
      }
    });
    t.data = dst;
    t.layout = WeightLayout::kRows8;
    packed.packed_bytes_ += bytes;
  }
  return packed;
}

}  // namespace tandem::experts
