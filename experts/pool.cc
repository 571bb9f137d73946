// The expert pool (see pool.h). One layer is one "job" of numbered work items in five phases:
//   X: quantise input row i            (n_rows items)
//   A: gate/up rows of one ff slice of one group (≤ kMaxTileRows rows sharing an expert), write
//      silu(g)·u into the group's intermediate rows
//   Q: quantise one job's intermediate row for down
//   B: down rows of one output-column slice of one group, into the group's job slots' partials
//      (one contiguous run of one expert per item)
//   C: one output-column slice: out[row] += weight · partial for every job, in job order
// Items are claimed in order from one atomic word. An item waits only for what it reads: A for
// every X item, Q for its group's A items, B for its group's Q items, C for every B item. So a
// thread that runs out of A items starts on the first groups' down rows while the last gate/up
// items finish, instead of idling at a phase boundary. Claimed items are always being worked on
// and wait only for earlier items, so the waits cannot deadlock, and the caller's thread claims
// items too, so a job finishes even if no worker shows up.
#include "experts/pool.h"

#include <hwloc.h>
#include <immintrin.h>
#include <mimalloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "oneapi/tbb/task_arena.h"
#include "oneapi/tbb/task_scheduler_observer.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace tandem::experts {
namespace {

// Rows of gate/up per phase-A item and output columns per phase-B item (of one group): the
// largest power of two in [kMinSlice, kMaxSlice] that still gives every thread kItemsPerThread
// items of the phase.
// Small slices keep a single expert spread over every thread of a many-core host; large ones let
// each item stream a long contiguous run (the hardware prefetcher restarts at every item). On the
// 2-core VM, 32-row slices for 10 Q4_K experts at 1 row reached 0.32-0.62 of stream, 128-row
// slices 0.82-0.87 (tandem bench experts, 2026-11-29, docs/perf/experts.md); on 16 threads this
// rule keeps 32 for a single expert and gives 128 (one 55 KB run per phase-B item) for 10.
// Phase-C items (output columns of the weighted sum) use the same rule over the hidden size.
constexpr int kMinSlice = 32;
constexpr int kMaxSlice = 128;
constexpr int kItemsPerThread = 3;
constexpr int kPhases = 5;  // X, A, Q, B, C (file comment)

// Spins until a completion counter (std::atomic or std::atomic_ref) reaches target; the acquire
// load pairs with the counted items' release increments.
template <typename Counter>
void WaitUntil(const Counter& counter, uint32_t target) {
  while (counter.load(std::memory_order_acquire) < target) _mm_pause();
}

int SliceFor(int64_t work_rows, int threads) {
  int slice = kMinSlice;
  while (slice < kMaxSlice && work_rows / (2 * slice) >= int64_t{threads} * kItemsPerThread) {
    slice *= 2;
  }
  return slice;
}

// The claim word: epoch (24 bits) | total items (20 bits) | next item (20 bits).
constexpr int kItemBits = 20;
constexpr uint64_t kItemMask = (uint64_t{1} << kItemBits) - 1;
constexpr uint32_t kMaxItems = static_cast<uint32_t>(kItemMask);
uint64_t Word(uint64_t epoch, uint64_t total, uint64_t next) {
  return epoch << (2 * kItemBits) | total << kItemBits | next;
}
uint64_t EpochOf(uint64_t w) { return w >> (2 * kItemBits); }
uint32_t TotalOf(uint64_t w) { return static_cast<uint32_t>((w >> kItemBits) & kItemMask); }
uint32_t NextOf(uint64_t w) { return static_cast<uint32_t>(w & kItemMask); }

// ThreadSanitizer sees no synchronisation inside Debian's libtbb (it is not instrumented), so the
// happens-before edges this file takes from TBB are declared to it, one key per edge:
//   kEnqueued:       a thread's writes before arena->enqueue(task) -> the task's body;
//   kObserverReady:  the pool and topology set up before observe(true) -> every notification;
//   kObserverExited: an on_scheduler_exit returning -> observe(false) returning (TBB's observer
//                    destructor contract: observe(false) waits for notifications in progress).
// No-ops outside TSan builds. What TSan still reports inside TBB's own headers is suppressed,
// line by line with reasons, in tests/experts/tsan.supp.
enum class TbbEdge { kEnqueued, kObserverReady, kObserverExited };
[[maybe_unused]] char tbb_edge_keys[3];  // used in TSan builds only
void TbbRelease(TbbEdge edge) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(&tbb_edge_keys[static_cast<int>(edge)]);
#else
  (void)edge;
#endif
}
void TbbAcquire(TbbEdge edge) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(&tbb_edge_keys[static_cast<int>(edge)]);
#else
  (void)edge;
#endif
}

struct MiFree {
  void operator()(void* p) const { mi_free(p); }
};
// A growable 64-byte-aligned scratch array from mimalloc; Reserve only allocates when it grows.
template <typename T>
class Scratch {
 public:
  void Reserve(size_t n) {
    if (n <= capacity_) return;
    ptr_.reset(static_cast<T*>(mi_malloc_aligned(n * sizeof(T), 64)));
    capacity_ = n;
  }
  T* data() const { return ptr_.get(); }

 private:
  std::unique_ptr<T, MiFree> ptr_;
  size_t capacity_ = 0;
};

// The rows of one expert, at most kMaxTileRows of them. Job slot first + a (a < count) owns row
// first + a of the intermediate and down-output scratch.
struct Group {
  int32_t expert;
  int32_t first;  // into the sorted jobs
  int32_t count;  // 1..kMaxTileRows
};

float Silu(float v) { return v / (1.0f + std::exp(-v)); }

absl::Status CheckTensorType(const char* what, quant::GgmlType type, int64_t cols) {
  if (!SupportsFormat(type)) {
    return absl::UnimplementedError(absl::StrCat(
        "expert pool: ", what, " weights are ", quant::GetTypeInfo(type).name,
        ", which has no CPU expert kernel yet (supported: q4_k q3_k q8_0 q6_k q5_k q2_k iq4_xs "
        "q4_0 iq4_nl mxfp4 f16 bf16)"));
  }
  const int block = quant::GetTypeInfo(type).block_elems;
  if (cols <= 0 || cols % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("expert pool: ", what, " rows of ", cols,
                                                   " elements are not whole ",
                                                   quant::GetTypeInfo(type).name, " blocks"));
  }
  return absl::OkStatus();
}

ExpertTensor MakeTensor(const uint8_t* data, quant::GgmlType type, int64_t cols, int64_t rows) {
  ExpertTensor t;
  t.data = data;
  t.type = type;
  t.cols = cols;
  t.rows = rows;
  t.row_bytes = quant::RowBytes(type, cols);
  t.expert_bytes = t.row_bytes * rows;
  return t;
}

}  // namespace

absl::StatusOr<ExpertWeights> ExpertWeights::FromBuffers(quant::GgmlType gate_up_type,
                                                         quant::GgmlType down_type, int64_t hidden,
                                                         int64_t n_ff, int64_t n_expert,
                                                         const uint8_t* gate, const uint8_t* up,
                                                         const uint8_t* down) {
  if (auto s = CheckTensorType("gate/up", gate_up_type, hidden); !s.ok()) return s;
  if (auto s = CheckTensorType("down", down_type, n_ff); !s.ok()) return s;
  if (n_expert <= 0 || gate == nullptr || up == nullptr || down == nullptr) {
    return absl::InvalidArgumentError("expert pool: expert tensors are empty or not in memory");
  }
  ExpertWeights w;
  w.hidden = hidden;
  w.n_ff = n_ff;
  w.n_expert = n_expert;
  w.gate = MakeTensor(gate, gate_up_type, hidden, n_ff);
  w.up = MakeTensor(up, gate_up_type, hidden, n_ff);
  w.down = MakeTensor(down, down_type, n_ff, hidden);
  return w;
}

absl::StatusOr<ExpertWeights> ExpertWeights::FromTensors(const format::TensorInfo& gate,
                                                         const format::TensorInfo& up,
                                                         const format::TensorInfo& down) {
  const int64_t hidden = gate.dim(0), n_ff = gate.dim(1), n_expert = gate.dim(2);
  if (up.dims != gate.dims || down.dim(0) != n_ff || down.dim(1) != hidden ||
      down.dim(2) != n_expert) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert pool: shapes do not form an expert set: ", gate.name, " ",
        format::DimsToString(gate.dims), ", ", up.name, " ", format::DimsToString(up.dims), ", ",
        down.name, " ", format::DimsToString(down.dims)));
  }
  if (gate.type != up.type) {
    return absl::UnimplementedError(absl::StrCat(
        "expert pool: ", gate.name, " is ", quant::GetTypeInfo(gate.type).name, " but ", up.name,
        " is ", quant::GetTypeInfo(up.type).name, "; gate and up must share a type"));
  }
  return FromBuffers(gate.type, down.type, hidden, n_ff, n_expert, gate.data, up.data, down.data);
}

struct ExpertPool::Impl {
  // Threads.
  std::unique_ptr<tbb::task_arena> arena;
  std::unique_ptr<tbb::task_scheduler_observer> observer;
  hwloc_topology_t topology = nullptr;
  std::atomic<int> resident{0};    // workers inside their loop
  std::atomic<int> live_tasks{0};  // enqueued worker tasks not yet returned
  std::atomic<bool> stop{false};
  // The claim word, and the items done: of phase X (A waits for all), of phase B (C waits for
  // all) and of the whole job (the caller waits for all). Per group, the A then Q items done are
  // counted in `group_done`.
  alignas(64) std::atomic<uint64_t> work{0};
  alignas(64) std::atomic<uint32_t> x_done{0};
  alignas(64) std::atomic<uint32_t> b_done{0};
  alignas(64) std::atomic<uint32_t> done_total{0};
  uint64_t epoch = 0;  // written by the caller only
  bool noop = false;   // RunEmpty's job: items do nothing

  // The current job, stable while any of its items is not done.
  uint32_t phase_end[kPhases] = {};  // cumulative item counts
  const ExpertWeights* w = nullptr;
  const float* x = nullptr;
  float* out = nullptr;
  DotFn gate_up_dot = nullptr, down_dot = nullptr;
  int n_rows = 0, n_jobs = 0, n_groups = 0, ff_slices = 0, out_slices = 0, sum_slices = 0;
  // Rows per phase-A item, output columns per phase-B item (of one group) and per phase-C item.
  int ff_slice = 0, out_slice = 0, sum_slice = 0;
  int64_t xq_stride = 0, hq_stride = 0;

  // Scratch.
  std::vector<ExpertJob> sorted;
  std::vector<Group> groups;
  std::vector<int32_t> slot_group;  // job slot -> its group
  // Per group: phase-A items done, then phase-Q items done (ff_slices + count when ready for B).
  // Zeroed by the caller before a job is posted; counted through std::atomic_ref.
  Scratch<uint32_t> group_done;
  Scratch<uint8_t> xq, hq;  // converted activations: one per row, one per job slot
  Scratch<float> h, u;       // per job slot: gate (then silu(gate)·up) and up, n_ff each
  Scratch<float> down;       // per job slot: the expert's output before weighting, hidden each
};

absl::StatusOr<std::unique_ptr<ExpertPool>> ExpertPool::Create(const PoolOptions& options) {
  auto pool = std::unique_ptr<ExpertPool>(new ExpertPool());
  absl::StatusOr<Isa> isa = ResolveIsa(options.isa);
  if (!isa.ok()) return isa.status();
  pool->isa_ = *isa;
  if (options.threads < 0 || options.spin_us < 0) {
    return absl::InvalidArgumentError("expert pool: negative thread count or spin window");
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = options.threads == 0 ? cores : options.threads;
  pool->n_workers_ = threads - 1;
  pool->spin_us_ = options.spin_us;
  pool->impl_ = std::make_unique<Impl>();
  Impl& impl = *pool->impl_;
  if (pool->n_workers_ > 0) {
    impl.arena = std::make_unique<tbb::task_arena>(pool->n_workers_, 0);
    impl.arena->initialize();
    if (options.pin && hwloc_topology_init(&impl.topology) == 0 &&
        hwloc_topology_load(impl.topology) == 0) {
      // Worker in arena slot s runs on core s+1 (wrapping), leaving core 0 to the caller.
      class Pinner : public tbb::task_scheduler_observer {
       public:
        Pinner(tbb::task_arena& arena, hwloc_topology_t topo)
            : tbb::task_scheduler_observer(arena), topo_(topo) {
          TbbRelease(TbbEdge::kObserverReady);
          observe(true);
        }
        ~Pinner() override {
          observe(false);
          TbbAcquire(TbbEdge::kObserverExited);
        }
        void on_scheduler_entry(bool) override {
          TbbAcquire(TbbEdge::kObserverReady);
          const int n_cores = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_CORE);
          if (n_cores <= 0) return;
          const int slot = tbb::this_task_arena::current_thread_index();
          hwloc_obj_t core = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_CORE, (slot + 1) % n_cores);
          if (core != nullptr) hwloc_set_cpubind(topo_, core->cpuset, HWLOC_CPUBIND_THREAD);
        }
        void on_scheduler_exit(bool) override {
          TbbAcquire(TbbEdge::kObserverReady);
          hwloc_set_cpubind(topo_, hwloc_topology_get_allowed_cpuset(topo_),
                            HWLOC_CPUBIND_THREAD);
          TbbRelease(TbbEdge::kObserverExited);
        }

       private:
        hwloc_topology_t topo_;
      };
      impl.observer = std::make_unique<Pinner>(*impl.arena, impl.topology);
    }
  }
  return pool;
}

ExpertPool::~ExpertPool() {
  if (!impl_) return;
  impl_->stop.store(true, std::memory_order_seq_cst);
  while (impl_->live_tasks.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  impl_->observer.reset();
  impl_->arena.reset();
  if (impl_->topology != nullptr) hwloc_topology_destroy(impl_->topology);
}

void ExpertPool::EnsureWorkers() {
  Impl& impl = *impl_;
  // Pairs with the worker's decrement-then-recheck in WorkerMain (both seq_cst): either the
  // worker sees the new job or this load sees it gone and enqueues a replacement.
  const int resident = impl.resident.load(std::memory_order_seq_cst);
  TbbRelease(TbbEdge::kEnqueued);
  for (int i = resident; i < n_workers_; ++i) {
    impl.live_tasks.fetch_add(1, std::memory_order_acq_rel);
    impl.arena->enqueue([this] {
      TbbAcquire(TbbEdge::kEnqueued);  // before the first read of the captured `this`
      WorkerMain();
      impl_->live_tasks.fetch_sub(1, std::memory_order_acq_rel);
    });
  }
}

void ExpertPool::WorkerMain() {
  Impl& impl = *impl_;
  if (impl.resident.fetch_add(1, std::memory_order_seq_cst) >= n_workers_) {
    impl.resident.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  uint64_t seen = EpochOf(impl.work.load(std::memory_order_acquire));
  Participate(seen);  // the job that brought this worker here, if it is still open
  using Clock = std::chrono::steady_clock;
  auto idle_since = Clock::now();
  const auto window = std::chrono::microseconds(spin_us_);
  for (uint32_t spins = 0;; ++spins) {
    if (impl.stop.load(std::memory_order_relaxed)) break;
    const uint64_t epoch = EpochOf(impl.work.load(std::memory_order_acquire));
    if (epoch != seen) {
      seen = epoch;
      Participate(epoch);
      idle_since = Clock::now();
      continue;
    }
    _mm_pause();
    if ((spins & 63) == 0 && Clock::now() - idle_since > window) {
      impl.resident.fetch_sub(1, std::memory_order_seq_cst);
      if (EpochOf(impl.work.load(std::memory_order_seq_cst)) == seen ||
          impl.stop.load(std::memory_order_relaxed)) {
        return;  // leave the arena; EnsureWorkers brings a worker back for the next job
      }
      if (impl.resident.fetch_add(1, std::memory_order_seq_cst) >= n_workers_) {
        impl.resident.fetch_sub(1, std::memory_order_seq_cst);
        return;
      }
      idle_since = Clock::now();
    }
  }
  impl.resident.fetch_sub(1, std::memory_order_seq_cst);
}

void ExpertPool::Participate(uint64_t epoch) {
  Impl& impl = *impl_;
  uint64_t w = impl.work.load(std::memory_order_acquire);
  for (;;) {
    if (EpochOf(w) != epoch || NextOf(w) >= TotalOf(w)) return;
    if (!impl.work.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
      continue;
    }
    RunItem(NextOf(w));  // waits for the items it reads, then counts itself done for its readers
    // Release: the caller's acquire of done_total sees every write this item made.
    impl.done_total.fetch_add(1, std::memory_order_acq_rel);
    w = impl.work.load(std::memory_order_acquire);
  }
}

void ExpertPool::Post(uint32_t total_items) {
  Impl& impl = *impl_;
  impl.x_done.store(0, std::memory_order_relaxed);
  impl.b_done.store(0, std::memory_order_relaxed);
  impl.done_total.store(0, std::memory_order_relaxed);
  impl.epoch = (impl.epoch + 1) & ((uint64_t{1} << (64 - 2 * kItemBits)) - 1);
  // Release (seq_cst) publishes the job description written above to every claimer.
  impl.work.store(Word(impl.epoch, total_items, 0), std::memory_order_seq_cst);
  if (n_workers_ > 0) EnsureWorkers();
  Participate(impl.epoch);
  while (impl.done_total.load(std::memory_order_acquire) < total_items) _mm_pause();
}

void ExpertPool::RunEmpty() {
  Impl& impl = *impl_;
  // One no-op item per thread: the claim, completion count and join a real layer pays.
  const uint32_t items = static_cast<uint32_t>(threads());
  impl.noop = true;
  Post(items);
  impl.noop = false;
}

absl::Status ExpertPool::Run(const ExpertWeights& w, std::span<const ExpertJob> jobs,
                             const float* x, int n_rows, float* out) {
  Impl& impl = *impl_;
  for (const ExpertJob& job : jobs) {
    if (job.row < 0 || job.row >= n_rows || job.expert < 0 || job.expert >= w.n_expert) {
      return absl::OutOfRangeError(absl::StrCat("expert pool: job (row ", job.row, ", expert ",
                                                job.expert, ") outside ", n_rows, " rows and ",
                                                w.n_expert, " experts"));
    }
  }
  if (jobs.empty()) return absl::OkStatus();
  impl.gate_up_dot = GetDotKernel(isa_, w.gate.type);
  impl.down_dot = GetDotKernel(isa_, w.down.type);
  if (impl.gate_up_dot == nullptr || impl.down_dot == nullptr) {
    return absl::UnimplementedError("expert pool: no kernel for these weight types on this ISA");
  }

  // Group: sort by (expert, row) and cut each expert's rows into chunks of kMaxTileRows.
  impl.sorted.assign(jobs.begin(), jobs.end());
  std::sort(impl.sorted.begin(), impl.sorted.end(), [](const ExpertJob& a, const ExpertJob& b) {
    return a.expert != b.expert ? a.expert < b.expert : a.row < b.row;
  });
  impl.groups.clear();
  for (int i = 0; i < static_cast<int>(impl.sorted.size()); ++i) {
    if (impl.groups.empty() || impl.groups.back().expert != impl.sorted[i].expert ||
        impl.groups.back().count == kMaxTileRows) {
      impl.groups.push_back({impl.sorted[i].expert, i, 0});
    }
    ++impl.groups.back().count;
  }
  impl.slot_group.resize(impl.sorted.size());
  for (int gi = 0; gi < static_cast<int>(impl.groups.size()); ++gi) {
    const Group& g = impl.groups[gi];
    std::fill_n(impl.slot_group.begin() + g.first, g.count, gi);
  }

  impl.w = &w;
  impl.x = x;
  impl.out = out;
  impl.n_rows = n_rows;
  impl.n_jobs = static_cast<int>(impl.sorted.size());
  impl.n_groups = static_cast<int>(impl.groups.size());
  impl.ff_slice = SliceFor(w.n_ff * impl.n_groups, threads());
  impl.out_slice = SliceFor(w.hidden * impl.n_groups, threads());
  impl.sum_slice = SliceFor(w.hidden, threads());
  impl.ff_slices = static_cast<int>((w.n_ff + impl.ff_slice - 1) / impl.ff_slice);
  impl.out_slices = static_cast<int>((w.hidden + impl.out_slice - 1) / impl.out_slice);
  impl.sum_slices = static_cast<int>((w.hidden + impl.sum_slice - 1) / impl.sum_slice);
  impl.xq_stride = (ActivationRowBytes(w.gate.type, w.hidden) + 63) / 64 * 64;
  impl.hq_stride = (ActivationRowBytes(w.down.type, w.n_ff) + 63) / 64 * 64;
  impl.xq.Reserve(static_cast<size_t>(n_rows) * impl.xq_stride);
  impl.hq.Reserve(static_cast<size_t>(impl.n_jobs) * impl.hq_stride);
  impl.h.Reserve(static_cast<size_t>(impl.n_jobs) * w.n_ff);
  impl.u.Reserve(static_cast<size_t>(impl.n_jobs) * w.n_ff);
  impl.down.Reserve(static_cast<size_t>(impl.n_jobs) * w.hidden);
  impl.group_done.Reserve(impl.groups.size());
  std::fill_n(impl.group_done.data(), impl.groups.size(), 0u);

  const uint64_t total = static_cast<uint64_t>(n_rows) +
                         static_cast<uint64_t>(impl.n_groups) * impl.ff_slices + impl.n_jobs +
                         static_cast<uint64_t>(impl.n_groups) * impl.out_slices + impl.sum_slices;
  if (total > kMaxItems) {
    return absl::ResourceExhaustedError(absl::StrCat("expert pool: a layer of ", total,
                                                     " work items exceeds ", kMaxItems));
  }
  impl.phase_end[0] = n_rows;
  impl.phase_end[1] = impl.phase_end[0] + impl.n_groups * impl.ff_slices;
  impl.phase_end[2] = impl.phase_end[1] + impl.n_jobs;
  impl.phase_end[3] = impl.phase_end[2] + impl.n_groups * impl.out_slices;
  impl.phase_end[4] = impl.phase_end[3] + impl.sum_slices;
  Post(static_cast<uint32_t>(total));
  return absl::OkStatus();
}

void ExpertPool::RunItem(uint32_t item) {
  Impl& impl = *impl_;
  if (impl.noop) return;
  const ExpertWeights& w = *impl.w;
  auto group_done = [&impl](int gi) {
    return std::atomic_ref<uint32_t>(impl.group_done.data()[gi]);
  };
  if (item < impl.phase_end[0]) {  // X
    QuantizeActivations(w.gate.type, impl.x + static_cast<int64_t>(item) * w.hidden, w.hidden,
                        impl.xq.data() + item * impl.xq_stride);
    impl.x_done.fetch_add(1, std::memory_order_release);
    return;
  }
  if (item < impl.phase_end[1]) {  // A
    WaitUntil(impl.x_done, static_cast<uint32_t>(impl.n_rows));
    const uint32_t i = item - impl.phase_end[0];
    const int gi = static_cast<int>(i / impl.ff_slices);
    const Group& g = impl.groups[gi];
    const int64_t f0 = static_cast<int64_t>(i % impl.ff_slices) * impl.ff_slice;
    const int nf = static_cast<int>(std::min<int64_t>(impl.ff_slice, w.n_ff - f0));
    const uint8_t* act[kMaxTileRows];
    for (int a = 0; a < g.count; ++a) {
      act[a] = impl.xq.data() + impl.sorted[g.first + a].row * impl.xq_stride;
    }
    float* h = impl.h.data() + static_cast<int64_t>(g.first) * w.n_ff + f0;
    float* u = impl.u.data() + static_cast<int64_t>(g.first) * w.n_ff + f0;
    impl.gate_up_dot(w.gate.Expert(g.expert) + f0 * w.gate.row_bytes, w.gate.row_bytes, nf,
                     w.hidden, act, g.count, h, w.n_ff);
    impl.gate_up_dot(w.up.Expert(g.expert) + f0 * w.up.row_bytes, w.up.row_bytes, nf, w.hidden,
                     act, g.count, u, w.n_ff);
    for (int a = 0; a < g.count; ++a) {
      for (int r = 0; r < nf; ++r) h[a * w.n_ff + r] = Silu(h[a * w.n_ff + r]) * u[a * w.n_ff + r];
    }
    group_done(gi).fetch_add(1, std::memory_order_release);
    return;
  }
  if (item < impl.phase_end[2]) {  // Q
    const int64_t slot = item - impl.phase_end[1];
    const int gi = impl.slot_group[slot];
    WaitUntil(group_done(gi), static_cast<uint32_t>(impl.ff_slices));
    QuantizeActivations(w.down.type, impl.h.data() + slot * w.n_ff, w.n_ff,
                        impl.hq.data() + slot * impl.hq_stride);
    group_done(gi).fetch_add(1, std::memory_order_release);
    return;
  }
  if (item < impl.phase_end[3]) {  // B: output columns [c0, c0 + nc) of one group
    const uint32_t i = item - impl.phase_end[2];
    const int gi = static_cast<int>(i / impl.out_slices);
    const Group& g = impl.groups[gi];
    WaitUntil(group_done(gi), static_cast<uint32_t>(impl.ff_slices + g.count));
    const int64_t c0 = static_cast<int64_t>(i % impl.out_slices) * impl.out_slice;
    const int nc = static_cast<int>(std::min<int64_t>(impl.out_slice, w.hidden - c0));
    const uint8_t* act[kMaxTileRows];
    for (int a = 0; a < g.count; ++a) {
      act[a] = impl.hq.data() + static_cast<int64_t>(g.first + a) * impl.hq_stride;
    }
    float* part = impl.down.data() + static_cast<int64_t>(g.first) * w.hidden + c0;
    impl.down_dot(w.down.Expert(g.expert) + c0 * w.down.row_bytes, w.down.row_bytes, nc, w.n_ff,
                  act, g.count, part, w.hidden);
    impl.b_done.fetch_add(1, std::memory_order_release);
    return;
  }
  // C: output columns [c0, c0 + nc), every job's weighted partial in job order (deterministic).
  WaitUntil(impl.b_done, impl.phase_end[3] - impl.phase_end[2]);
  const int64_t c0 = static_cast<int64_t>(item - impl.phase_end[3]) * impl.sum_slice;
  const int nc = static_cast<int>(std::min<int64_t>(impl.sum_slice, w.hidden - c0));
  for (int j = 0; j < impl.n_jobs; ++j) {
    const ExpertJob& job = impl.sorted[j];
    const float* part = impl.down.data() + static_cast<int64_t>(j) * w.hidden + c0;
    float* o = impl.out + static_cast<int64_t>(job.row) * w.hidden + c0;
    for (int c = 0; c < nc; ++c) o[c] += job.weight * part[c];
  }
}

}  // namespace tandem::experts
