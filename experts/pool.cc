// The expert pool (see pool.h). One layer is one "job" of numbered work items in five phases:
//   X: quantise input row i            (n_rows items)
//   A: gate/up rows of one ff slice of one group (≤ kMaxTileRows rows sharing an expert), write
//      silu(g)·u into the group's intermediate rows
//   Q: quantise one job's intermediate row for down
//   B: down rows of one output-column slice of one group, into the group's job slots' partials
//      (one contiguous run of one expert per item)
//   C: one output-column slice: out[row] += weight · partial for every job, in job order
// An item waits only for what it reads: A for every X item, Q for its group's A items, B for its
// group's Q items, C for every B item. So a thread that runs out of A items starts on the first
// groups' down rows while the last gate/up items finish, instead of idling at a phase boundary.
// Items are claimed from claim lists, each taken in order through one atomic word: the X items;
// per NUMA node, the A, Q and B items of the groups whose expert is homed there (groups are sorted
// by expert and homes are contiguous expert ranges, so these are three ranges of item numbers);
// the C items. A thread takes X, then its own node's list, then the other nodes' lists, then C.
// The waits cannot deadlock: a thread reaches a node list only when X is fully claimed, and C
// only when every node list is; within a list an item waits only for earlier ones; and claimed
// items are always being worked on. The caller's thread claims items too, so a job finishes even
// if no worker shows up. Which thread runs an item never changes a result: every item writes its
// own outputs and C adds the partials in job order.
#include "experts/pool.h"

#include <hwloc.h>
#include <immintrin.h>
#include <mimalloc.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "oneapi/tbb/blocked_range.h"
#include "oneapi/tbb/parallel_for.h"
#include "oneapi/tbb/task_arena.h"
#include "oneapi/tbb/task_scheduler_observer.h"
#include "runtime/base/status_macros.h"

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
//   kEnqueued:       a WorkerTask copied inside arena->enqueue (and all before) -> its body;
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

namespace {

// A claim list: items taken in order, as up to three ranges of item numbers. The ranges are
// written by the caller before it stores the list's word for a new epoch (release). They live on
// their own cache line: idle workers spin on the X list's word, and each of the caller's writes to
// a line they spin on would pull it back from every one of them (docs/perf/experts.md, session 6).
struct ClaimList {
  alignas(64) std::atomic<uint64_t> word{0};  // epoch | items | next claimed
  alignas(64) uint32_t begin[3] = {};
  uint32_t size[3] = {};

  void Set(std::initializer_list<std::pair<uint32_t, uint32_t>> ranges) {  // (begin, end)
    int i = 0;
    for (auto [b, e] : ranges) begin[i] = b, size[i++] = e - b;
    for (; i < 3; ++i) begin[i] = size[i] = 0;
  }
  uint32_t items() const { return size[0] + size[1] + size[2]; }
  uint32_t ItemAt(uint32_t i) const {
    if (i < size[0]) return begin[0] + i;
    i -= size[0];
    if (i < size[1]) return begin[1] + i;
    return begin[2] + i - size[1];
  }
  // Claims the next item of this list in `epoch`, if any is left.
  bool Claim(uint64_t epoch, uint32_t* item) {
    uint64_t w = word.load(std::memory_order_acquire);
    for (;;) {
      if (EpochOf(w) != epoch || NextOf(w) >= TotalOf(w)) return false;
      if (word.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        *item = ItemAt(NextOf(w));
        return true;
      }
    }
  }
};

// One NUMA node's workers: their arena, the observer that pins them, and how many are inside their
// loop.
struct NodeWorkers {
  std::unique_ptr<tbb::task_arena> arena;
  std::unique_ptr<tbb::task_scheduler_observer> observer;
  std::atomic<int> resident{0};
  int n_workers = 0;
  int first_thread = 0;  // the pool-wide thread number of its arena slot 0 (the caller is 0)
};

// Per thread, single writer: node-list items run at home and away (ExpertPool::claim_counts).
struct alignas(64) ThreadCounts {
  std::atomic<uint64_t> home{0}, away{0};
};

}  // namespace

struct ExpertPool::Impl {
  // Threads.
  hwloc_topology_t topology = nullptr;
  bool this_system = false;
  std::unique_ptr<NodeWorkers[]> node_workers;  // one per nodes_ entry
  std::unique_ptr<ThreadCounts[]> counts;       // one per thread
  std::atomic<int> live_tasks{0};               // enqueued worker tasks not yet returned
  std::atomic<bool> stop{false};
  // The claim lists (X, one per node, C; every job has X items, so workers watch the X list's
  // word for a new epoch), and the items done: of phase X (A waits for all), of phase B (C waits
  // for all) and of the whole job (the caller waits for all). Per group, the A then Q items done
  // are counted in `group_done`.
  std::unique_ptr<ClaimList[]> lists;
  int n_lists = 0;
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
  std::vector<int32_t> node_group;  // per node + 1: its first group (the last entry: n_groups)
  // Per group: phase-A items done, then phase-Q items done (ff_slices + count when ready for B).
  // Zeroed by the caller before a job is posted; counted through std::atomic_ref.
  Scratch<uint32_t> group_done;
  Scratch<uint8_t> xq, hq;  // converted activations: one per row, one per job slot
  Scratch<float> h, u;       // per job slot: gate (then silu(gate)·up) and up, n_ff each
  Scratch<float> down;       // per job slot: the expert's output before weighting, hidden each
};

namespace {

// Pins the workers of one node's arena: arena slot s runs on the node's s-th worker core.
class Pinner : public tbb::task_scheduler_observer {
 public:
  Pinner(tbb::task_arena& arena, hwloc_topology_t topo, std::vector<int> cores)
      : tbb::task_scheduler_observer(arena), topo_(topo), cores_(std::move(cores)) {
    TbbRelease(TbbEdge::kObserverReady);
    observe(true);
  }
  ~Pinner() override {
    observe(false);
    TbbAcquire(TbbEdge::kObserverExited);
  }
  void on_scheduler_entry(bool) override {
    TbbAcquire(TbbEdge::kObserverReady);
    const int slot = std::max(0, tbb::this_task_arena::current_thread_index());
    hwloc_obj_t core = hwloc_get_obj_by_type(topo_, PinUnitType(topo_),
                                             static_cast<unsigned>(cores_[slot % cores_.size()]));
    if (core != nullptr) hwloc_set_cpubind(topo_, core->cpuset, HWLOC_CPUBIND_THREAD);
  }
  void on_scheduler_exit(bool) override {
    TbbAcquire(TbbEdge::kObserverReady);
    hwloc_set_cpubind(topo_, hwloc_topology_get_allowed_cpuset(topo_), HWLOC_CPUBIND_THREAD);
    TbbRelease(TbbEdge::kObserverExited);
  }

 private:
  hwloc_topology_t topo_;
  std::vector<int> cores_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertPool>> ExpertPool::Create(const PoolOptions& options) {
  auto pool = std::unique_ptr<ExpertPool>(new ExpertPool());
  absl::StatusOr<Isa> isa = ResolveIsa(options.isa);
  if (!isa.ok()) return isa.status();
  pool->isa_ = *isa;
  if (options.threads < 0 || options.spin_us < 0) {
    return absl::InvalidArgumentError("expert pool: negative thread count or spin window");
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pool->n_threads_ = options.threads == 0 ? cores : options.threads;
  pool->spin_us_ = options.spin_us;
  pool->impl_ = std::make_unique<Impl>();
  Impl& impl = *pool->impl_;

  if (hwloc_topology_init(&impl.topology) != 0) {
    return absl::InternalError("expert pool: hwloc_topology_init failed");
  }
  if (!options.synthetic_topology.empty() &&
      hwloc_topology_set_synthetic(impl.topology, options.synthetic_topology.c_str()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("expert pool: '", options.synthetic_topology,
                                                   "' is not an hwloc synthetic topology"));
  }
  if (hwloc_topology_load(impl.topology) != 0) {
    return absl::InternalError(
        absl::StrCat("expert pool: hwloc could not read the topology: ", std::strerror(errno)));
  }
  impl.this_system = hwloc_topology_is_thissystem(impl.topology) != 0;
  TANDEM_ASSIGN_OR_RETURN(pool->nodes_,
                          PlanPoolNodes(impl.topology, pool->n_threads_, options.numa));

  const int n_nodes = static_cast<int>(pool->nodes_.size());
  impl.n_lists = n_nodes + 2;
  impl.lists = std::make_unique<ClaimList[]>(impl.n_lists);
  impl.counts = std::make_unique<ThreadCounts[]>(pool->n_threads_);
  impl.node_workers = std::make_unique<NodeWorkers[]>(n_nodes);
  int first_thread = 1;
  for (int k = 0; k < n_nodes; ++k) {
    const PoolNode& node = pool->nodes_[k];
    NodeWorkers& nw = impl.node_workers[k];
    nw.n_workers = static_cast<int>(node.worker_cores.size());
    nw.first_thread = first_thread;
    first_thread += nw.n_workers;
    if (nw.n_workers == 0) continue;
    nw.arena = std::make_unique<tbb::task_arena>(nw.n_workers, 0);
    nw.arena->initialize();
    if (options.pin && impl.this_system) {
      nw.observer = std::make_unique<Pinner>(*nw.arena, impl.topology, node.worker_cores);
    }
  }
  return pool;
}

ExpertPool::~ExpertPool() {
  if (!impl_) return;
  impl_->stop.store(true, std::memory_order_seq_cst);
  while (impl_->live_tasks.load(std::memory_order_acquire) > 0) std::this_thread::yield();
  if (impl_->node_workers) {
    for (size_t k = 0; k < nodes_.size(); ++k) {
      impl_->node_workers[k].observer.reset();
      impl_->node_workers[k].arena.reset();
    }
  }
  if (impl_->topology != nullptr) hwloc_topology_destroy(impl_->topology);
}

void ExpertPool::EnsureWorkers() {
  Impl& impl = *impl_;
  // The task TBB runs on a worker: a copy made inside enqueue(), after any release we could do
  // before the call. So the copy releases once its fields are written, and the body acquires
  // before it reads them (the call is opaque, so the reads cannot move above it).
  struct WorkerTask {
    ExpertPool* pool;
    int node;
    WorkerTask(ExpertPool* p, int k) : pool(p), node(k) { TbbRelease(TbbEdge::kEnqueued); }
    WorkerTask(const WorkerTask& o) : pool(o.pool), node(o.node) { TbbRelease(TbbEdge::kEnqueued); }
    void operator()() const {
      TbbAcquire(TbbEdge::kEnqueued);
      pool->WorkerMain(node);
      pool->impl_->live_tasks.fetch_sub(1, std::memory_order_acq_rel);
    }
  };
  for (int k = 0; k < static_cast<int>(nodes_.size()); ++k) {
    NodeWorkers& nw = impl.node_workers[k];
    // Pairs with the worker's decrement-then-recheck in WorkerMain (both seq_cst): either the
    // worker sees the new job or this load sees it gone and enqueues a replacement.
    const int resident = nw.resident.load(std::memory_order_seq_cst);
    for (int i = resident; i < nw.n_workers; ++i) {
      impl.live_tasks.fetch_add(1, std::memory_order_acq_rel);
      nw.arena->enqueue(WorkerTask(this, k));
    }
  }
}

void ExpertPool::WorkerMain(int node) {
  Impl& impl = *impl_;
  NodeWorkers& nw = impl.node_workers[node];
  if (nw.resident.fetch_add(1, std::memory_order_seq_cst) >= nw.n_workers) {
    nw.resident.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  const int thread = nw.first_thread +
                     std::clamp(tbb::this_task_arena::current_thread_index(), 0, nw.n_workers - 1);
  const std::atomic<uint64_t>& announced = impl.lists[0].word;
  uint64_t seen = EpochOf(announced.load(std::memory_order_acquire));
  Participate(seen, node, thread);  // the job that brought this worker here, if it is still open
  using Clock = std::chrono::steady_clock;
  auto idle_since = Clock::now();
  const auto window = std::chrono::microseconds(spin_us_);
  for (uint32_t spins = 0;; ++spins) {
    if (impl.stop.load(std::memory_order_relaxed)) break;
    const uint64_t epoch = EpochOf(announced.load(std::memory_order_acquire));
    if (epoch != seen) {
      seen = epoch;
      Participate(epoch, node, thread);
      idle_since = Clock::now();
      continue;
    }
    _mm_pause();
    if ((spins & 63) == 0 && Clock::now() - idle_since > window) {
      nw.resident.fetch_sub(1, std::memory_order_seq_cst);
      if (EpochOf(announced.load(std::memory_order_seq_cst)) == seen ||
          impl.stop.load(std::memory_order_relaxed)) {
        return;  // leave the arena; EnsureWorkers brings a worker back for the next job
      }
      if (nw.resident.fetch_add(1, std::memory_order_seq_cst) >= nw.n_workers) {
        nw.resident.fetch_sub(1, std::memory_order_seq_cst);
        return;
      }
      idle_since = Clock::now();
    }
  }
  nw.resident.fetch_sub(1, std::memory_order_seq_cst);
}

void ExpertPool::Participate(uint64_t epoch, int node, int thread) {
  Impl& impl = *impl_;
  const int n_nodes = static_cast<int>(nodes_.size());
  ThreadCounts& counts = impl.counts[thread];
  // X, then this node's list, the other nodes' lists, then C (file comment).
  for (int step = 0; step < impl.n_lists; ++step) {
    const bool node_list = step > 0 && step <= n_nodes;
    const int list = node_list ? 1 + (node + step - 1) % n_nodes : step;
    uint32_t item;
    while (impl.lists[list].Claim(epoch, &item)) {
      RunItem(item);  // waits for the items it reads, then counts itself done for its readers
      if (node_list) {
        std::atomic<uint64_t>& c = step == 1 ? counts.home : counts.away;
        c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      }
      // Release: the caller's acquire of done_total sees every write this item made.
      impl.done_total.fetch_add(1, std::memory_order_acq_rel);
    }
  }
}

void ExpertPool::Post() {
  Impl& impl = *impl_;
  impl.x_done.store(0, std::memory_order_relaxed);
  impl.b_done.store(0, std::memory_order_relaxed);
  impl.done_total.store(0, std::memory_order_relaxed);
  impl.epoch = (impl.epoch + 1) & ((uint64_t{1} << (64 - 2 * kItemBits)) - 1);
  // Release publishes the job description written before to every claimer of the list; the X
  // list goes last (seq_cst: it is the announcement, see WorkerMain). An empty list keeps its old
  // word: another epoch's, fully claimed, so it reads as empty, and its cache line stays shared
  // instead of moving to every claimer again.
  uint32_t total_items = impl.lists[0].items();
  for (int l = impl.n_lists - 1; l > 0; --l) {
    const uint32_t items = impl.lists[l].items();
    total_items += items;
    if (items > 0) impl.lists[l].word.store(Word(impl.epoch, items, 0), std::memory_order_release);
  }
  impl.lists[0].word.store(Word(impl.epoch, impl.lists[0].items(), 0), std::memory_order_seq_cst);
  if (n_threads_ > 1) EnsureWorkers();
  Participate(impl.epoch, 0, 0);
  while (impl.done_total.load(std::memory_order_acquire) < total_items) _mm_pause();
}

void ExpertPool::RunEmpty() {
  Impl& impl = *impl_;
  // One no-op item per thread: the claim, completion count and join a real layer pays.
  impl.lists[0].Set({{0, static_cast<uint32_t>(threads())}});
  for (int l = 1; l < impl.n_lists; ++l) {
    if (impl.lists[l].items() > 0) impl.lists[l].Set({});  // untouched lines stay shared
  }
  impl.noop = true;
  Post();
  impl.noop = false;
}

ExpertPool::ClaimCounts ExpertPool::claim_counts() const {
  ClaimCounts c;
  for (int t = 0; t < n_threads_; ++t) {
    c.home += impl_->counts[t].home.load(std::memory_order_relaxed);
    c.away += impl_->counts[t].away.load(std::memory_order_relaxed);
  }
  return c;
}

absl::StatusOr<int64_t> ExpertPool::BindWeights(const ExpertWeights& w) {
  Impl& impl = *impl_;
  if (!impl.this_system) {
    return absl::FailedPreconditionError(
        "expert pool: cannot bind memory on a synthetic topology "
        "(PoolOptions::synthetic_topology)");
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const int n_nodes = static_cast<int>(nodes_.size());
  hwloc_bitmap_t nodeset = hwloc_bitmap_alloc();
  int64_t bound = 0;
  absl::Status status;
  for (const ExpertTensor* t : {&w.gate, &w.up, &w.down}) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
    // Range boundaries rounded down to pages (the last one up), so the areas tile the tensor.
    auto boundary = [&](int k) {
      if (k == n_nodes) return (base + w.n_expert * t->expert_bytes + page - 1) / page * page;
      return (base + HomeBegin(k, n_nodes, w.n_expert) * t->expert_bytes) / page * page;
    };
    const uintptr_t first = base, last = base + w.n_expert * t->expert_bytes - 1;
    for (int k = 0; k < n_nodes && status.ok(); ++k) {
      const uintptr_t lo = boundary(k), hi = boundary(k + 1);
      if (hi <= lo) continue;
      // Read one byte of every page on the node's own threads first: a file mapping's pages that
      // are not in memory yet are read in by the faulting CPU's node (the page cache ignores an
      // area's binding), and resident pages are cheap to read. The binding then moves the rest.
      auto touch = [&](size_t p0, size_t p1) {
        uint8_t sum = 0;
        for (size_t p = p0; p < p1; ++p) {
          // Clamped to the tensor's own bytes: the first and last pages are shared with neighbours.
          sum ^= *reinterpret_cast<const volatile uint8_t*>(std::clamp(lo + p * page, first, last));
        }
        return sum;
      };
      const size_t pages = (hi - lo) / page;
      NodeWorkers& nw = impl.node_workers[k];
      if (nw.arena) {
        nw.arena->execute([&] {
          tbb::parallel_for(
              tbb::blocked_range<size_t>(0, pages, 256),
              [&](const tbb::blocked_range<size_t>& r) { touch(r.begin(), r.end()); });
        });
      } else {
        touch(0, pages);
      }
      hwloc_bitmap_only(nodeset, static_cast<unsigned>(nodes_[k].os_index));
      if (hwloc_set_area_membind(impl.topology, reinterpret_cast<const void*>(lo), hi - lo, nodeset,
                                 HWLOC_MEMBIND_BIND,
                                 HWLOC_MEMBIND_MIGRATE | HWLOC_MEMBIND_BYNODESET) != 0) {
        status = absl::FailedPreconditionError(
            absl::StrCat("expert pool: binding ", hi - lo, " bytes of expert weights to NUMA node ",
                         nodes_[k].os_index, " failed: ", std::strerror(errno)));
      } else {
        bound += static_cast<int64_t>(hi - lo);
      }
    }
  }
  hwloc_bitmap_free(nodeset);
  if (!status.ok()) return status;
  return bound;
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

  // Claim lists: X; per node, the A, Q and B items of its home experts' groups; C.
  const int n_nodes = static_cast<int>(nodes_.size());
  impl.node_group.assign(n_nodes + 1, impl.n_groups);
  for (int k = n_nodes - 1; k >= 0; --k) {
    const int64_t first_expert = HomeBegin(k, n_nodes, w.n_expert);
    int gi = impl.node_group[k + 1];
    while (gi > 0 && impl.groups[gi - 1].expert >= first_expert) --gi;
    impl.node_group[k] = gi;
  }
  auto first_slot = [&impl](int gi) {
    return static_cast<uint32_t>(gi < impl.n_groups ? impl.groups[gi].first : impl.n_jobs);
  };
  impl.lists[0].Set({{0, impl.phase_end[0]}});
  for (int k = 0; k < n_nodes; ++k) {
    const uint32_t g0 = impl.node_group[k], g1 = impl.node_group[k + 1];
    const uint32_t ff = impl.ff_slices, oc = impl.out_slices;
    impl.lists[1 + k].Set({{impl.phase_end[0] + g0 * ff, impl.phase_end[0] + g1 * ff},
                           {impl.phase_end[1] + first_slot(g0), impl.phase_end[1] + first_slot(g1)},
                           {impl.phase_end[2] + g0 * oc, impl.phase_end[2] + g1 * oc}});
  }
  impl.lists[n_nodes + 1].Set({{impl.phase_end[3], impl.phase_end[4]}});
  Post();
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
