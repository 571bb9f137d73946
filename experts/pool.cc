// The expert pool (see pool.h). One layer's experts are one "job" of numbered work items in four
// phases:
//   X: quantise input row i            (n_rows items)
//   A: gate/up rows of one ff slice of one group (≤ kMaxTileRows rows sharing an expert), write
//      silu(g)·u into the group's intermediate rows
//   Q: quantise one job's intermediate row for down (large jobs only: in a small one, the A
//      item that completes a group quantises the group's rows, so that no thread claims a Q item
//      and then waits for the last gate/up items of its group)
//   B: down rows of one output-column slice of one group, into the group's job slots' partials
//      (one contiguous run of one expert per item). The B item that completes a column slice
//      over all groups then adds out[row] += weight · partial for every job, in job order, over
//      that slice's columns.
// An item waits only for what it reads: A for every X item, Q for its group's A items, B for its
// group's Q items (in a small job, for the quantisation its group's last A item did). So a thread
// that runs out of A items starts on the first groups' down rows while the last gate/up items
// finish, instead of idling at a phase boundary; and the weighted sum waits for nothing (a slice's
// sum runs in the thread that finished its last partial), so a layer ends with its last B item.
// Items are claimed from claim lists, each taken in order through one atomic word: the X items;
// per NUMA node, the A, Q and B items of the groups whose expert is homed there (groups are sorted
// by expert and homes are contiguous expert ranges, so these are three ranges of item numbers).
// A thread takes X, then its own node's list, then the other nodes' lists.
// The waits cannot deadlock: a thread reaches a node list only when X is fully claimed; within a
// list an item waits only for earlier ones; and claimed items are always being worked on. The
// caller's thread claims items too, so a job finishes even if no worker shows up. Which thread
// runs an item never changes a result: every item writes its own outputs and each slice's sum
// adds the partials in job order.
//
// A dense product (MatMul) is a job of two of these phases: X converts each row of x, and each A
// item computes one slice of weight rows for up to kMaxTileRows rows of x, straight into y. A
// ParallelFor is a job of X items only, each one range of the caller's loop.
//
// Backups. A thread descheduled while it holds an item stalls the layer until it runs again (a
// scheduler slice, milliseconds). So in small layers (decode and verify) a thread that waits in an
// item, and the caller while it waits for the job's end, reruns a claimed A or B item of an earlier
// phase than the one it waits in once that item has been claimed for backup_us (a worker with
// nothing left to claim leaves the job, so late B items are the caller's): at most one backup per
// item. Each run writes its outputs in its own lane (0: the claimer, 1: the backup) and the first
// to finish publishes its lane in the item's state word, then counts the item done; readers (Q,
// the sums) take each item's winning lane, so a losing run, which goes on writing its lane, is
// never read. The short X and Q items run once, and so does a small job's quantisation of a group
// (by the winning run that completes the group) and each slice's sum (it writes the
// caller's `out`): only the winning run of a B item counts it, so one run completes the slice. A
// losing run can outlast its job, so each job lives in a job set (description, scratch, counters)
// that is reused only when no thread is inside it; small jobs rotate over several sets. The
// deadlock argument above holds: a wait in phase P reruns only items of phases below P, which never
// wait for it.
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
#include <functional>
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
constexpr int kMinSlice = 32;
constexpr int kMaxSlice = 128;
constexpr int kItemsPerThread = 3;
constexpr int kPhases = 4;  // X, A, Q, B (file comment)

int SliceFor(int64_t work_rows, int threads) {
  int slice = kMinSlice;
  while (slice < kMaxSlice && work_rows / (2 * slice) >= int64_t{threads} * kItemsPerThread) {
    slice *= 2;
  }
  return slice;
}

// Work items of one job, at most (per-item state is sized by it; a prefill of 512 rows has ~10^4).
constexpr uint32_t kMaxItems = (uint32_t{1} << 20) - 1;

// ThreadSanitizer sees no synchronisation inside Debian's libtbb (it is not instrumented), so the
// happens-before edges this file takes from TBB are declared to it, one key per edge:
//   kEnqueued:       a WorkerTask copied inside arena->enqueue (and all before) -> its body;
//   kObserverReady:  the pool and topology set up before observe(true) -> every notification;
//   kObserverExited: a notification (on_scheduler_entry or _exit) returning -> observe(false)
//                    returning (TBB's observer destructor contract: observe(false) waits for
//                    notifications in progress).
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

absl::Status CheckTensorType(const char* what, quant::GgmlType type, int64_t cols) {
  if (!SupportsFormat(type)) {
    return absl::UnimplementedError(absl::StrCat(
        "expert pool: ", what, " weights are ", quant::GetTypeInfo(type).name,
        ", which has no CPU kernel yet (supported: q4_k q3_k q8_0 q6_k q5_k q2_k iq4_xs "
        "q4_0 iq4_nl mxfp4 f16 bf16 f32)"));
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

absl::StatusOr<WeightMatrix> WeightMatrix::FromTensor(const format::TensorInfo& t, int64_t rows) {
  TANDEM_RETURN_IF_ERROR(CheckTensorType(t.name.c_str(), t.type, t.dim(0)));
  if (rows <= 0 || rows > t.rows() || t.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("expert pool: ", rows, " rows of ", t.name, " ",
                                                   format::DimsToString(t.dims),
                                                   " are not in memory"));
  }
  WeightMatrix m;
  m.data = t.data;
  m.type = t.type;
  m.cols = t.dim(0);
  m.rows = rows;
  m.row_bytes = quant::RowBytes(t.type, m.cols);
  return m;
}

namespace {

// A claim list of one job set: items taken in order, as up to three ranges of item numbers, through
// one atomic word (items << 32 | next claimed) on a cache line of its own with the ranges. A claim
// is a fetch_add, which cannot fail: threads that arrive together take one item each with one
// transfer of the line, where a compare-exchange fails and retries for every thread that got in
// first. `next` runs past `items` by at most one failed claim per thread and job. The word needs no
// epoch because a set, lists included, is reused only when no thread is inside it (TakeJobSet).
struct ClaimList {
  alignas(64) std::atomic<uint64_t> word{0};
  uint32_t begin[3] = {};
  uint32_t size[3] = {};

  // Written by the caller before it announces the job (which publishes it). An empty list is not
  // written: the set's previous job claimed all of it, so it reads empty already, and its line
  // stays shared in the claimers' caches instead of moving to the caller and back to each of them.
  void Open(std::initializer_list<std::pair<uint32_t, uint32_t>> ranges) {  // (begin, end)
    uint64_t items = 0;
    for (auto [b, e] : ranges) items += e - b;
    if (items == 0) return;
    int i = 0;
    for (auto [b, e] : ranges) begin[i] = b, size[i++] = e - b;
    for (; i < 3; ++i) begin[i] = size[i] = 0;
    word.store(items << 32, std::memory_order_relaxed);
  }

  // Claims the next item of this list, if any is left.
  bool Claim(uint32_t* item) {
    // A load first, so that a list already taken is only read.
    if (!Left(word.load(std::memory_order_relaxed))) return false;
    const uint64_t w = word.fetch_add(1, std::memory_order_relaxed);
    if (!Left(w)) return false;
    *item = ItemAt(static_cast<uint32_t>(w));
    return true;
  }

 private:
  static bool Left(uint64_t w) { return static_cast<uint32_t>(w) < (w >> 32); }
  uint32_t ItemAt(uint32_t i) const {
    if (i < size[0]) return begin[0] + i;
    i -= size[0];
    if (i < size[1]) return begin[1] + i;
    return begin[2] + i - size[1];
  }
};

// A growable array of atomic slots, value-initialised when it grows (like Scratch, no allocation
// in steady state).
template <typename E>
class SlotArray {
 public:
  void Reserve(size_t n) {
    if (n <= capacity_) return;
    ptr_ = std::make_unique<E[]>(n);
    capacity_ = n;
  }
  E& operator[](size_t i) const { return ptr_[i]; }

 private:
  std::unique_ptr<E[]> ptr_;
  size_t capacity_ = 0;
};

// A count on a cache line of its own. Threads wait on one group's or one column slice's count
// while others add to the neighbouring ones; packed, every add would pull the line away from every
// waiter.
struct alignas(64) PaddedCount {
  std::atomic<uint32_t> n{0};
};

// Per item of a job that takes backups: its state (the job's epoch << kItemTagShift | state bits,
// stored when the item is claimed) and claim time (steady clock ns), on a line of its own:
// consecutive items are claimed and finished by different threads at the same moments. A state
// with another job's epoch is that of an item not yet claimed in this one, so the slots need no
// reset between jobs (one line per item that the workers last wrote: 2-5 µs of the caller's
// setup per layer on the 16-core host, docs/perf/experts.md, session 19).
struct alignas(64) ItemSlot {
  std::atomic<uint64_t> state{0};
  std::atomic<int64_t> stamp{0};
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

// Per thread (written by that thread only): node-list items run at home and away
// (ExpertPool::claim_counts), the job set it is working in (+1; 0: none), which the caller reads
// before it reuses a set, and the items it has counted done since Create, which the caller sums to
// join a job. One counter per thread instead of one shared one: the threads of a job finish
// together, and a shared counter would take their increments one cache-line transfer at a time.
struct alignas(64) ThreadState {
  std::atomic<uint64_t> home{0}, away{0};
  std::atomic<int> in_set{0};
  std::atomic<uint64_t> items_done{0};
  // ExpertPool::ThreadTimes: job_ns, kernel_ns, setup_ns (the caller's), then wait_ns[p - 1] for
  // waits below phase p (p = 1..3: items of phases A, Q, B; kPhases: the caller's join).
  std::atomic<uint64_t> job_ns{0}, kernel_ns{0}, setup_ns{0};
  std::atomic<uint64_t> wait_ns[kPhases] = {};
};

// What a job set's items do: a layer of experts (Run), nothing (RunEmpty), a matrix product
// (MatMul) or ranges of the caller's loop (ParallelFor).
enum class JobKind { kExperts, kEmpty, kMatMul, kFor };

// Item state bits (phases A and B): done, a backup run taken, and the lane whose outputs count;
// above them, the epoch of the job that claimed the item.
constexpr uint64_t kItemDone = 1, kItemBackupTaken = 2, kItemLane1 = 4;
constexpr int kItemTagShift = 8;

// Counters of items done (per group, per column slice) that are never reset: each job of a set
// counts on from where the set's last job left each counter. The caller knows that value without
// reading the counter (a job ends with every counter at its base + its target), so setting up a
// job writes no line the workers wrote. Read as value − base, which stays right across the 2^32
// wrap.
class JobCounters {
 public:
  // Room for n counters; growing starts every counter over at 0.
  void Reserve(size_t n) {
    if (n <= end_.size()) return;
    counts_.Reserve(n);
    end_.assign(n, 0);
    base_.assign(n, 0);
  }
  // Caller, before the job is announced: counter i counts to `target` in this job.
  void Start(size_t i, uint32_t target) {
    base_[i] = end_[i];
    end_[i] += target;
  }
  // Items done so far in this job.
  uint32_t Done(size_t i, std::memory_order order) const {
    return counts_[i].n.load(order) - base_[i];
  }
  // Counts one more; returns the job's count after it.
  uint32_t Add(size_t i, std::memory_order order) {
    return counts_[i].n.fetch_add(1, order) + 1 - base_[i];
  }

 private:
  SlotArray<PaddedCount> counts_;
  std::vector<uint32_t> base_, end_;  // written by the caller only
};

// Job sets. Backups leave runs behind that may outlast their job (the loser of an item finishes
// its run after the winner's result was used), so a job's description and scratch live in a set
// that is not reused while any thread is still inside it. Small jobs (the ones that take backups,
// and RunEmpty's) rotate over kSmallSets sets, so a thread descheduled for up to kSmallSets layers
// holds nothing up, and back-to-back layers never wait for the workers to leave the last one;
// large jobs (prefill) take no backups and use set 0.
constexpr int kSmallSets = 16;
// (row, expert) jobs of a layer, at most, for it to be small: to take backups, and to have its
// groups quantised by their last A items (a group of a small job has at most this many rows).
constexpr int kMaxBackedUpJobs = 64;
constexpr int kEpochSlots = 64;  // the set of epoch e is epoch_set[e % kEpochSlots]

}  // namespace

struct ExpertPool::JobSet {
  // The job, stable while any thread is inside this set (ThreadState::in_set).
  JobKind kind = JobKind::kExperts;
  bool backups = false;              // phase A and B items may be run a second time
  bool fold_quantise = false;        // no Q items: A items quantise their group (file comment)
  int64_t setup_start_ns = 0;        // Run: when the caller began to prepare the job
  uint32_t phase_end[kPhases] = {};  // cumulative item counts
  ExpertWeights w;
  const float* x = nullptr;
  float* out = nullptr;
  DotFn gate_up_dot = nullptr, down_dot = nullptr;
  int n_rows = 0, n_jobs = 0, n_groups = 0, ff_slices = 0, out_slices = 0;
  // Rows per phase-A item, output columns per phase-B item (of one group): the column slice.
  int ff_slice = 0, out_slice = 0;
  int64_t xq_stride = 0, hq_stride = 0;
  std::unique_ptr<ClaimList[]> lists;  // X, then one per node (file comment)
  std::vector<ExpertJob> sorted;
  std::vector<Group> groups;
  std::vector<int32_t> slot_group;  // job slot -> its group
  std::vector<int32_t> node_group;  // per node + 1: its first group (the last entry: n_groups)
  // ParallelFor: the body, the loop's length and indices per item.
  const std::function<void(int64_t, int64_t)>* for_body = nullptr;
  int64_t for_n = 0, for_grain = 0;
  // MatMul: the products, their kernels, each one's first phase-A item within a group of x rows
  // (the last entry: the group's items), and weight rows per phase-A item.
  std::vector<MatrixProduct> products;
  std::vector<DotFn> product_dots;
  std::vector<uint32_t> product_items;
  int row_slice = 0;

  // Items done: of phase X (A waits for all); per group, its A items then its quantise steps (its
  // Q items, or one in a small job) when ready for B; per column slice, its B items over all groups
  // (n_groups when its sum can be taken). The whole job's count is the threads'
  // ThreadState::items_done.
  alignas(64) std::atomic<uint32_t> x_done{0};
  JobCounters group_done;
  JobCounters slice_done;
  // Per item of a job that takes backups: state and claim time (ItemSlot). `tag`: this job's epoch.
  SlotArray<ItemSlot> items;
  uint64_t tag = 0;

  // Scratch. A and B items write their outputs in the lane of their run (0: the claimer, 1: the
  // backup); readers take each item's winning lane.
  Scratch<uint8_t> xq, hq;        // converted activations: one per row, one per job slot
  Scratch<float> gate[2], up[2];  // per job slot, n_ff each: gate (then silu(gate)·up) and up
  Scratch<float> gathered;        // per job slot: silu(gate)·up from the winning lanes, for Q
  Scratch<float> down[2];         // per job slot: the expert's output before weighting
};

struct ExpertPool::Impl {
  // Threads.
  hwloc_topology_t topology = nullptr;
  bool this_system = false;
  // PoolOptions::pin: the caller's core (nullptr: no pinning), the thread pinned there (none
  // yet: the default id) and that thread's binding before.
  hwloc_bitmap_t caller_cpuset = nullptr;
  std::thread::id pinned_caller;
  hwloc_bitmap_t caller_was = nullptr;
  std::unique_ptr<NodeWorkers[]> node_workers;  // one per nodes_ entry
  std::unique_ptr<ThreadState[]> threads;       // one per thread
  std::atomic<int> live_tasks{0};               // enqueued worker tasks not yet returned
  std::atomic<bool> stop{false};
  // The epoch of the newest job, on a cache line of its own: idle workers spin on it, and each of
  // the caller's writes to a line they spin on would pull it back from every one of them
  // (docs/perf/experts.md, session 6).
  alignas(64) std::atomic<uint64_t> announced{0};
  alignas(64) uint64_t epoch = 0;  // written by the caller only
  int n_lists = 0;                 // claim lists per job set
  uint64_t items_posted = 0;       // items of every job since Create (caller only; see items_done)
  // Job sets: 0 for large jobs, 1..kSmallSets in turn for small ones; epoch_set says which set an
  // epoch's job is in (written before the epoch is announced).
  std::unique_ptr<JobSet[]> sets;
  int next_small = 0;
  std::atomic<int> epoch_set[kEpochSlots] = {};
  std::atomic<uint64_t> backups{0};  // backup runs started (ExpertPool::backups)
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
    TbbRelease(TbbEdge::kObserverExited);
  }
  void on_scheduler_exit(bool) override {
    TbbAcquire(TbbEdge::kObserverReady);
    hwloc_set_cpubind(topo_, hwloc_get_root_obj(topo_)->cpuset, HWLOC_CPUBIND_THREAD);
    TbbRelease(TbbEdge::kObserverExited);
  }

 private:
  hwloc_topology_t topo_;
  std::vector<int> cores_;
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Adds `ns` to one of a thread's own ThreadState times: a load and a store, no read-modify-write
// (only that thread writes it).
void AddTime(std::atomic<uint64_t>& total, int64_t ns) {
  total.store(total.load(std::memory_order_relaxed) + static_cast<uint64_t>(ns),
              std::memory_order_relaxed);
}

// Adds the time from construction to destruction to one of a thread's times. Around the A and B
// items' kernel calls (each 5-50 µs) and waits, so the two clock reads cost well under 1%.
class ThreadTimer {
 public:
  explicit ThreadTimer(std::atomic<uint64_t>& total) : total_(total), start_(NowNs()) {}
  ~ThreadTimer() { AddTime(total_, NowNs() - start_); }
  ThreadTimer(const ThreadTimer&) = delete;
  ThreadTimer& operator=(const ThreadTimer&) = delete;

 private:
  std::atomic<uint64_t>& total_;
  int64_t start_;
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
  pool->backup_us_ = options.backup_us;
  pool->stall_workers_us_ = options.stall_workers_us;
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
  if (impl.this_system) RestrictTopology(impl.topology, StartCpus());
  pool->n_threads_ = options.threads > 0
                         ? options.threads
                         : std::max(1, hwloc_get_nbobjs_by_type(impl.topology, HWLOC_OBJ_PU));
  TANDEM_ASSIGN_OR_RETURN(pool->nodes_,
                          PlanPoolNodes(impl.topology, pool->n_threads_, options.numa));

  const int n_nodes = static_cast<int>(pool->nodes_.size());
  impl.n_lists = n_nodes + 1;
  impl.threads = std::make_unique<ThreadState[]>(pool->n_threads_);
  impl.sets = std::make_unique<JobSet[]>(1 + kSmallSets);
  for (int i = 0; i <= kSmallSets; ++i) {
    impl.sets[i].lists = std::make_unique<ClaimList[]>(impl.n_lists);
  }
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
  if (options.pin && impl.this_system) {
    hwloc_obj_t core = hwloc_get_obj_by_type(impl.topology, PinUnitType(impl.topology),
                                             static_cast<unsigned>(pool->nodes_[0].caller_core));
    if (core != nullptr) impl.caller_cpuset = hwloc_bitmap_dup(core->cpuset);
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
  if (impl_->caller_was != nullptr) {
    if (impl_->pinned_caller == std::this_thread::get_id()) {
      hwloc_set_cpubind(impl_->topology, impl_->caller_was, HWLOC_CPUBIND_THREAD);
    }
    hwloc_bitmap_free(impl_->caller_was);
  }
  if (impl_->caller_cpuset != nullptr) hwloc_bitmap_free(impl_->caller_cpuset);
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
  const std::atomic<uint64_t>& announced = impl.announced;
  uint64_t seen = announced.load(std::memory_order_acquire);
  Participate(seen, node, thread);  // the job that brought this worker here, if it is still open
  using Clock = std::chrono::steady_clock;
  auto idle_since = Clock::now();
  const auto window = std::chrono::microseconds(spin_us_);
  for (uint32_t spins = 0;; ++spins) {
    if (impl.stop.load(std::memory_order_relaxed)) break;
    const uint64_t epoch = announced.load(std::memory_order_acquire);
    if (epoch != seen) {
      seen = epoch;
      Participate(epoch, node, thread);
      idle_since = Clock::now();
      continue;
    }
    _mm_pause();
    if ((spins & 63) == 0 && Clock::now() - idle_since > window) {
      nw.resident.fetch_sub(1, std::memory_order_seq_cst);
      if (announced.load(std::memory_order_seq_cst) == seen ||
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
  ThreadState& me = impl.threads[thread];
  const int set_index = impl.epoch_set[epoch % kEpochSlots].load(std::memory_order_acquire);
  JobSet& set = impl.sets[set_index];
  // Enter the set, then check that its job is still the announced one (both seq_cst, paired with
  // TakeJobSet: either the caller sees this thread inside, or this thread sees a newer epoch and
  // leaves before it reads the set).
  me.in_set.store(set_index + 1, std::memory_order_seq_cst);
  if (impl.announced.load(std::memory_order_seq_cst) != epoch) {
    me.in_set.store(0, std::memory_order_release);
    return;
  }
  const int64_t entered = NowNs();
  // X, then this node's list, then the other nodes' lists (file comment).
  for (int step = 0; step < impl.n_lists; ++step) {
    const bool node_list = step > 0 && step <= n_nodes;
    const int list = node_list ? 1 + (node + step - 1) % n_nodes : step;
    uint32_t item;
    while (set.lists[list].Claim(&item)) {
      if (set.backups) {  // claimed in this job, at this time (release: see RunLateItem)
        set.items[item].stamp.store(NowNs(), std::memory_order_relaxed);
        set.items[item].state.store(set.tag << kItemTagShift, std::memory_order_release);
      }
      if (stall_workers_us_ > 0 && thread != 0 && set.backups && set.kind == JobKind::kExperts &&
          ((item >= set.phase_end[0] && item < set.phase_end[1]) ||
           (item >= set.phase_end[2] && item < set.phase_end[3]))) {
        // Tests: stay "descheduled" until a backup has finished the item, or for the cap.
        const int64_t until = NowNs() + int64_t{stall_workers_us_} * 1000;
        while ((set.items[item].state.load(std::memory_order_acquire) & kItemDone) == 0 &&
               NowNs() < until) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
      RunItem(set, item, 0, thread);  // waits for the items it reads, then counts itself done
      if (node_list) {
        std::atomic<uint64_t>& c = step == 1 ? me.home : me.away;
        c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      }
    }
  }
  AddTime(me.job_ns, NowNs() - entered);
  // Release: the caller that reuses this set, or WaitIdle, sees every write this thread made in it
  // (and its job_ns).
  me.in_set.store(0, std::memory_order_release);
}

ExpertPool::JobSet& ExpertPool::TakeJobSet(bool small, bool backups) {
  Impl& impl = *impl_;
  const int index = small ? 1 + impl.next_small : 0;
  if (small) impl.next_small = (impl.next_small + 1) % kSmallSets;
  // Normally at once: a thread still inside is finishing a run that lost to a backup kSmallSets
  // layers ago, or is leaving a large job.
  WaitUntilNoThreadIn(index);
  JobSet& set = impl.sets[index];
  set.backups = backups;
  return set;
}

void ExpertPool::Post(JobSet& set) {
  Impl& impl = *impl_;
  set.x_done.store(0, std::memory_order_relaxed);
  ++impl.epoch;
  set.tag = impl.epoch;
  impl.epoch_set[impl.epoch % kEpochSlots].store(static_cast<int>(&set - impl.sets.get()),
                                                 std::memory_order_relaxed);
  if (set.kind == JobKind::kExperts)
    AddTime(impl.threads[0].setup_ns, NowNs() - set.setup_start_ns);
  // The announcement publishes the job and its open lists (seq_cst: see WorkerMain).
  impl.announced.store(impl.epoch, std::memory_order_seq_cst);
  if (n_threads_ > 1) EnsureWorkers();
  if (impl.caller_cpuset != nullptr && impl.pinned_caller != std::this_thread::get_id()) {
    // After EnsureWorkers: TBB starts a worker from the thread that first needs it, and a new
    // thread takes that thread's binding.
    if (impl.caller_was == nullptr) impl.caller_was = hwloc_bitmap_alloc();
    if (hwloc_get_cpubind(impl.topology, impl.caller_was, HWLOC_CPUBIND_THREAD) != 0) {
      hwloc_bitmap_copy(impl.caller_was, hwloc_get_root_obj(impl.topology)->cpuset);
    }
    hwloc_set_cpubind(impl.topology, impl.caller_cpuset, HWLOC_CPUBIND_THREAD);
    impl.pinned_caller = std::this_thread::get_id();
  }
  Participate(impl.epoch, 0, 0);
  // Join: every item of the job counted done, in some thread's counter.
  impl.items_posted += set.phase_end[kPhases - 1];
  Await(
      set,
      [&impl, n = n_threads_] {
        uint64_t done = 0;
        for (int t = 0; t < n; ++t)
          done += impl.threads[t].items_done.load(std::memory_order_acquire);
        return done >= impl.items_posted;
      },
      kPhases, 0);
}

void ExpertPool::WaitUntilNoThreadIn(int set_index) {
  // Seq_cst pairs with Participate's entry (either this sees a thread inside, or that thread sees
  // a newer epoch and leaves before it reads the set), and includes the acquire that pairs with
  // the release ending Participate: every write and read a thread made in the set, of weights
  // included, happened before this returns.
  for (int t = 1; t < n_threads_; ++t) {
    for (;;) {
      const int in = impl_->threads[t].in_set.load(std::memory_order_seq_cst);
      if (in == 0 || (set_index >= 0 && in != set_index + 1)) break;
      std::this_thread::yield();
    }
  }
}

void ExpertPool::WaitIdle() {
  // A thread that enters a set after this has looked at it finds the last job fully claimed and
  // runs nothing.
  WaitUntilNoThreadIn(-1);
}

void ExpertPool::RunEmpty() {
  // One no-op item per thread: the claim, completion count and join a real layer pays.
  JobSet& set = TakeJobSet(true, false);
  set.kind = JobKind::kEmpty;
  PostPhaseX(set, static_cast<uint32_t>(threads()));
}

void ExpertPool::PostPhaseX(JobSet& set, uint32_t items) {
  set.lists[0].Open({{0, items}});  // the node lists are empty, which needs no write (Open)
  std::fill_n(set.phase_end, kPhases, items);  // all in phase X
  Post(set);
}

ExpertPool::ClaimCounts ExpertPool::claim_counts() const {
  ClaimCounts c;
  for (int t = 0; t < n_threads_; ++t) {
    c.home += impl_->threads[t].home.load(std::memory_order_relaxed);
    c.away += impl_->threads[t].away.load(std::memory_order_relaxed);
  }
  return c;
}

uint64_t ExpertPool::backups() const { return impl_->backups.load(std::memory_order_relaxed); }

ExpertPool::ThreadTimes ExpertPool::thread_times() const {
  ThreadTimes sum;
  for (int t = 0; t < n_threads_; ++t) {
    const ThreadState& s = impl_->threads[t];
    sum.job_ns += s.job_ns.load(std::memory_order_relaxed);
    sum.kernel_ns += s.kernel_ns.load(std::memory_order_relaxed);
    sum.setup_ns += s.setup_ns.load(std::memory_order_relaxed);
    sum.gate_up_wait_ns += s.wait_ns[0].load(std::memory_order_relaxed);
    sum.quantise_wait_ns += s.wait_ns[1].load(std::memory_order_relaxed);
    sum.down_wait_ns += s.wait_ns[2].load(std::memory_order_relaxed);
    sum.join_ns += s.wait_ns[kPhases - 1].load(std::memory_order_relaxed);
  }
  return sum;
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
  for (const ExpertJob& job : jobs) {
    if (job.row < 0 || job.row >= n_rows || job.expert < 0 || job.expert >= w.n_expert) {
      return absl::OutOfRangeError(absl::StrCat("expert pool: job (row ", job.row, ", expert ",
                                                job.expert, ") outside ", n_rows, " rows and ",
                                                w.n_expert, " experts"));
    }
  }
  if (jobs.empty()) return absl::OkStatus();
  const int64_t setup_start_ns = NowNs();
  const DotFn gate_up_dot = GetDotKernel(isa_, w.gate.type, w.gate.layout);
  const DotFn down_dot = GetDotKernel(isa_, w.down.type, w.down.layout);
  if (gate_up_dot == nullptr || down_dot == nullptr || w.up.layout != w.gate.layout) {
    return absl::UnimplementedError(absl::StrCat(
        "expert pool: no ", IsaName(isa_), " kernel for these expert weights (gate/up ",
        quant::GetTypeInfo(w.gate.type).name, " in the ", WeightLayoutName(w.gate.layout),
        " layout, up in the ", WeightLayoutName(w.up.layout), " layout, down ",
        quant::GetTypeInfo(w.down.type).name, " in the ", WeightLayoutName(w.down.layout),
        " layout)"));
  }
  const bool small = static_cast<int>(jobs.size()) <= kMaxBackedUpJobs;
  JobSet& set = TakeJobSet(small, small && backup_us_ >= 0);
  set.kind = JobKind::kExperts;
  set.setup_start_ns = setup_start_ns;
  set.fold_quantise = small;
  set.gate_up_dot = gate_up_dot;
  set.down_dot = down_dot;

  // Group: sort by (expert, row) and cut each expert's rows into chunks of kMaxTileRows.
  set.sorted.assign(jobs.begin(), jobs.end());
  std::sort(set.sorted.begin(), set.sorted.end(), [](const ExpertJob& a, const ExpertJob& b) {
    return a.expert != b.expert ? a.expert < b.expert : a.row < b.row;
  });
  set.groups.clear();
  for (int i = 0; i < static_cast<int>(set.sorted.size()); ++i) {
    if (set.groups.empty() || set.groups.back().expert != set.sorted[i].expert ||
        set.groups.back().count == kMaxTileRows) {
      set.groups.push_back({set.sorted[i].expert, i, 0});
    }
    ++set.groups.back().count;
  }
  set.slot_group.resize(set.sorted.size());
  for (int gi = 0; gi < static_cast<int>(set.groups.size()); ++gi) {
    const Group& g = set.groups[gi];
    std::fill_n(set.slot_group.begin() + g.first, g.count, gi);
  }

  set.w = w;
  set.x = x;
  set.out = out;
  set.n_rows = n_rows;
  set.n_jobs = static_cast<int>(set.sorted.size());
  set.n_groups = static_cast<int>(set.groups.size());
  set.ff_slice = SliceFor(w.n_ff * set.n_groups, threads());
  set.out_slice = SliceFor(w.hidden * set.n_groups, threads());
  set.ff_slices = static_cast<int>((w.n_ff + set.ff_slice - 1) / set.ff_slice);
  set.out_slices = static_cast<int>((w.hidden + set.out_slice - 1) / set.out_slice);
  set.xq_stride = (ActivationRowBytes(w.gate.type, w.hidden) + 63) / 64 * 64;
  set.hq_stride = (ActivationRowBytes(w.down.type, w.n_ff) + 63) / 64 * 64;
  set.xq.Reserve(static_cast<size_t>(n_rows) * set.xq_stride);
  set.hq.Reserve(static_cast<size_t>(set.n_jobs) * set.hq_stride);
  for (int lane = 0; lane < (set.backups ? 2 : 1); ++lane) {
    set.gate[lane].Reserve(static_cast<size_t>(set.n_jobs) * w.n_ff);
    set.up[lane].Reserve(static_cast<size_t>(set.n_jobs) * w.n_ff);
    set.down[lane].Reserve(static_cast<size_t>(set.n_jobs) * w.hidden);
  }
  set.gathered.Reserve(static_cast<size_t>(set.n_jobs) * w.n_ff);

  const int q_items = set.fold_quantise ? 0 : set.n_jobs;
  const uint64_t total = static_cast<uint64_t>(n_rows) +
                         static_cast<uint64_t>(set.n_groups) * set.ff_slices + q_items +
                         static_cast<uint64_t>(set.n_groups) * set.out_slices;
  if (total > kMaxItems) {
    return absl::ResourceExhaustedError(
        absl::StrCat("expert pool: a layer of ", total, " work items exceeds ", kMaxItems));
  }
  set.phase_end[0] = n_rows;
  set.phase_end[1] = set.phase_end[0] + set.n_groups * set.ff_slices;
  set.phase_end[2] = set.phase_end[1] + q_items;
  set.phase_end[3] = set.phase_end[2] + set.n_groups * set.out_slices;
  if (set.backups) set.items.Reserve(set.phase_end[3]);  // no reset: ItemSlot
  // Only now that the job will be posted: every counter must reach its new end (JobCounters).
  set.group_done.Reserve(set.groups.size());
  for (int gi = 0; gi < set.n_groups; ++gi) {
    const int ready = set.fold_quantise ? 1 : set.groups[gi].count;  // quantise steps
    set.group_done.Start(gi, static_cast<uint32_t>(set.ff_slices + ready));
  }
  set.slice_done.Reserve(set.out_slices);
  for (int k = 0; k < set.out_slices; ++k) {
    set.slice_done.Start(k, static_cast<uint32_t>(set.n_groups));
  }

  // Claim lists: X; per node, the A, Q and B items of its home experts' groups.
  const int n_nodes = static_cast<int>(nodes_.size());
  set.node_group.assign(n_nodes + 1, set.n_groups);
  for (int k = n_nodes - 1; k >= 0; --k) {
    const int64_t first_expert = HomeBegin(k, n_nodes, w.n_expert);
    int gi = set.node_group[k + 1];
    while (gi > 0 && set.groups[gi - 1].expert >= first_expert) --gi;
    set.node_group[k] = gi;
  }
  auto first_slot = [&set, q_items](int gi) {  // its first Q item's offset in phase Q
    return static_cast<uint32_t>(gi < set.n_groups && q_items > 0 ? set.groups[gi].first : q_items);
  };
  set.lists[0].Open({{0, set.phase_end[0]}});
  for (int k = 0; k < n_nodes; ++k) {
    const uint32_t g0 = set.node_group[k], g1 = set.node_group[k + 1];
    const uint32_t ff = set.ff_slices, oc = set.out_slices;
    set.lists[1 + k].Open({{set.phase_end[0] + g0 * ff, set.phase_end[0] + g1 * ff},
                           {set.phase_end[1] + first_slot(g0), set.phase_end[1] + first_slot(g1)},
                           {set.phase_end[2] + g0 * oc, set.phase_end[2] + g1 * oc}});
  }
  Post(set);
  return absl::OkStatus();
}

absl::Status ExpertPool::MatMul(std::span<const MatrixProduct> products, const float* x,
                                int n_rows) {
  if (n_rows <= 0 || products.empty()) return absl::OkStatus();
  const WeightMatrix& first = products.front().w;
  int64_t all_rows = 0;
  for (const MatrixProduct& p : products) {
    if (p.w.cols != first.cols || ActivationType(p.w.type) != ActivationType(first.type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("expert pool: one MatMul's matrices must share their input: ", first.cols,
                       " columns of ", quant::GetTypeInfo(first.type).name, " against ", p.w.cols,
                       " of ", quant::GetTypeInfo(p.w.type).name));
    }
    if (GetDotKernel(isa_, p.w.type) == nullptr) {
      return absl::UnimplementedError(absl::StrCat("expert pool: no ", IsaName(isa_),
                                                   " kernel for ",
                                                   quant::GetTypeInfo(p.w.type).name, " weights"));
    }
    all_rows += p.w.rows;
  }
  const int64_t groups = (n_rows + kMaxTileRows - 1) / kMaxTileRows;
  // Enough items for every thread to take kItemsPerThread, each at most kMaxSlice rows of one
  // matrix.
  const int64_t per_item =
      std::clamp<int64_t>((all_rows * groups + int64_t{threads()} * kItemsPerThread - 1) /
                              (int64_t{threads()} * kItemsPerThread),
                          1, kMaxSlice);
  int64_t group_items = 0;
  for (const MatrixProduct& p : products) group_items += (p.w.rows + per_item - 1) / per_item;
  const uint64_t total =
      static_cast<uint64_t>(n_rows) + static_cast<uint64_t>(groups * group_items);
  if (total > kMaxItems) {
    return absl::ResourceExhaustedError(
        absl::StrCat("expert pool: a product of ", total, " work items exceeds ", kMaxItems));
  }
  JobSet& set = TakeJobSet(n_rows <= kMaxKernelRows, false);
  set.kind = JobKind::kMatMul;
  set.products.assign(products.begin(), products.end());
  set.product_dots.clear();
  set.product_items.assign(1, 0);
  for (const MatrixProduct& p : products) {
    set.product_dots.push_back(GetDotKernel(isa_, p.w.type));
    set.product_items.push_back(set.product_items.back() +
                                static_cast<uint32_t>((p.w.rows + per_item - 1) / per_item));
  }
  set.x = x;
  set.n_rows = n_rows;
  set.row_slice = static_cast<int>(per_item);
  set.xq_stride = (ActivationRowBytes(first.type, first.cols) + 63) / 64 * 64;
  set.xq.Reserve(static_cast<size_t>(n_rows) * set.xq_stride);
  set.phase_end[0] = static_cast<uint32_t>(n_rows);
  std::fill_n(set.phase_end + 1, kPhases - 1, static_cast<uint32_t>(total));
  // Phase A split evenly over the nodes' lists: no weight row has a home node.
  set.lists[0].Open({{0, set.phase_end[0]}});
  const int n_nodes = static_cast<int>(nodes_.size());
  const uint64_t a_items = total - n_rows;
  for (int k = 0; k < n_nodes; ++k) {
    set.lists[1 + k].Open({{static_cast<uint32_t>(n_rows + a_items * k / n_nodes),
                            static_cast<uint32_t>(n_rows + a_items * (k + 1) / n_nodes)}});
  }
  Post(set);
  return absl::OkStatus();
}

void ExpertPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max({grain, int64_t{1}, (n + kMaxItems - 1) / kMaxItems});
  const uint32_t items = static_cast<uint32_t>((n + grain - 1) / grain);
  JobSet& set = TakeJobSet(true, false);
  set.kind = JobKind::kFor;
  set.for_body = &body;
  set.for_n = n;
  set.for_grain = grain;
  PostPhaseX(set, items);
}

template <class Done>
void ExpertPool::Await(JobSet& set, Done done, int below_phase, int thread) {
  // Until done() holds, run late items of the phases below `below_phase` (the items that this
  // wait can depend on; never the caller's own item or one that waits for it).
  if (done()) return;
  const ThreadTimer waiting(impl_->threads[thread].wait_ns[below_phase - 1]);
  int64_t next_look = 0;
  for (uint32_t spins = 0; !done(); ++spins) {
    _mm_pause();
    if (!set.backups || (spins & 63) != 0) continue;
    const int64_t now = NowNs();
    if (now < next_look) continue;
    if (!RunLateItem(set, below_phase, thread)) next_look = now + 5000;  // look again in 5 µs
  }
}

void ExpertPool::AwaitCount(JobSet& set, const std::atomic<uint32_t>& counter, uint32_t target,
                            int below_phase, int thread) {
  Await(
      set, [&counter, target] { return counter.load(std::memory_order_acquire) >= target; },
      below_phase, thread);
}

bool ExpertPool::RunLateItem(JobSet& set, int below_phase, int thread) {
  const int64_t late = NowNs() - int64_t{backup_us_} * 1000;
  // Phase A items [phase_end[0], phase_end[1]), then phase B items [phase_end[2], phase_end[3]).
  for (int phase : {1, 3}) {
    if (phase >= below_phase) break;
    for (uint32_t item = set.phase_end[phase - 1]; item < set.phase_end[phase]; ++item) {
      std::atomic<uint64_t>& state = set.items[item].state;
      // Acquire: the stamp stored before the claim's state is this claim's.
      uint64_t s = state.load(std::memory_order_acquire);
      if (s >> kItemTagShift != set.tag) continue;  // not claimed yet in this job
      if (set.items[item].stamp.load(std::memory_order_relaxed) > late) continue;
      if ((s & (kItemDone | kItemBackupTaken)) != 0) continue;
      if (!state.compare_exchange_strong(s, s | kItemBackupTaken, std::memory_order_relaxed)) {
        continue;
      }
      impl_->backups.fetch_add(1, std::memory_order_relaxed);
      RunItem(set, item, 1, thread);
      return true;
    }
  }
  return false;
}

void ExpertPool::RunItem(JobSet& set, uint32_t item, int lane, int thread) {
  // Counts this item done for the job's join. Release: the caller, which acquires every thread's
  // count, sees all the item wrote (for a slice's sum, its `out` columns). An atomic add, although
  // the line is this thread's: a lost count would hang the join, so it must not rest on arena slots
  // never being shared.
  std::atomic<uint64_t>& items_done = impl_->threads[thread].items_done;
  auto count_for_join = [&items_done] { items_done.fetch_add(1, std::memory_order_release); };
  switch (set.kind) {
    case JobKind::kExperts:
      break;
    case JobKind::kEmpty:
      count_for_join();
      return;
    case JobKind::kMatMul:
      RunMatrixItem(set, item, thread);
      count_for_join();
      return;
    case JobKind::kFor: {
      const int64_t begin = static_cast<int64_t>(item) * set.for_grain;
      (*set.for_body)(begin, std::min(set.for_n, begin + set.for_grain));
      count_for_join();
      return;
    }
  }
  const ExpertWeights& w = set.w;
  // Counts this item done for its readers and for the job. Release: a reader that acquires the
  // count sees the item's outputs (and, below, its lane).
  auto count_done = [&count_for_join](std::atomic<uint32_t>& count) {
    count.fetch_add(1, std::memory_order_release);
    count_for_join();
  };
  auto count_group_done = [&set, &count_for_join](int gi) {
    set.group_done.Add(gi, std::memory_order_release);
    count_for_join();
  };
  // Waits (running late items of the phases below `below_phase`) until group gi has counted
  // `target` items done in this job.
  auto await_group = [this, &set, thread](int gi, uint32_t target, int below_phase) {
    Await(
        set,
        [&set, gi, target] { return set.group_done.Done(gi, std::memory_order_acquire) >= target; },
        below_phase, thread);
  };
  // A and B items: the first run to finish publishes its lane (and then counts the item); the
  // other run's outputs are not read, and it counts nothing.
  auto won = [&set, item, lane] {
    if (!set.backups) return true;
    // Done and the lane in one step, only if the other run has not finished first.
    // (The claim stored this job's tag before either run began.)
    std::atomic<uint64_t>& state = set.items[item].state;
    const uint64_t mine = kItemDone | (lane == 1 ? kItemLane1 : 0u);
    uint64_t s = state.load(std::memory_order_relaxed);
    do {
      if ((s & kItemDone) != 0) return false;
    } while (!state.compare_exchange_weak(s, s | mine, std::memory_order_release,
                                          std::memory_order_relaxed));
    return true;
  };
  auto lane_of = [&set](uint32_t i) {
    return set.backups && (set.items[i].state.load(std::memory_order_acquire) & kItemLane1) != 0
               ? 1
               : 0;
  };
  // A job slot's intermediate row, from its group's A items' winning lanes, quantised for down.
  auto QuantiseForDown = [&set, &w, &lane_of](int slot) {
    float* row = set.gate[0].data() + static_cast<int64_t>(slot) * w.n_ff;
    if (set.backups) {
      row = set.gathered.data() + static_cast<int64_t>(slot) * w.n_ff;
      const uint32_t a0 =
          set.phase_end[0] + static_cast<uint32_t>(set.slot_group[slot] * set.ff_slices);
      for (int k = 0; k < set.ff_slices; ++k) {
        const int64_t f0 = static_cast<int64_t>(k) * set.ff_slice;
        const int64_t nf = std::min<int64_t>(set.ff_slice, w.n_ff - f0);
        std::memcpy(row + f0,
                    set.gate[lane_of(a0 + k)].data() + static_cast<int64_t>(slot) * w.n_ff + f0,
                    nf * 4);
      }
    }
    QuantizeActivations(w.down.type, row, w.n_ff,
                        set.hq.data() + static_cast<int64_t>(slot) * set.hq_stride);
  };
  if (item < set.phase_end[0]) {  // X
    QuantizeActivations(w.gate.type, set.x + static_cast<int64_t>(item) * w.hidden, w.hidden,
                        set.xq.data() + item * set.xq_stride);
    count_done(set.x_done);
    return;
  }
  if (item < set.phase_end[1]) {  // A: gate/up rows [f0, f0 + nf) of one group
    AwaitCount(set, set.x_done, static_cast<uint32_t>(set.n_rows), 1, thread);
    const uint32_t i = item - set.phase_end[0];
    const int gi = static_cast<int>(i / set.ff_slices);
    const Group& g = set.groups[gi];
    const int64_t f0 = static_cast<int64_t>(i % set.ff_slices) * set.ff_slice;
    const int nf = static_cast<int>(std::min<int64_t>(set.ff_slice, w.n_ff - f0));
    const uint8_t* act[kMaxTileRows];
    for (int a = 0; a < g.count; ++a) {
      act[a] = set.xq.data() + set.sorted[g.first + a].row * set.xq_stride;
    }
    float* h = set.gate[lane].data() + static_cast<int64_t>(g.first) * w.n_ff + f0;
    float* u = set.up[lane].data() + static_cast<int64_t>(g.first) * w.n_ff + f0;
    {
      const ThreadTimer timer(impl_->threads[thread].kernel_ns);
      set.gate_up_dot(w.gate.Expert(g.expert) + f0 * w.gate.row_bytes, w.gate.row_bytes, nf,
                      w.hidden, act, g.count, h, w.n_ff);
      set.gate_up_dot(w.up.Expert(g.expert) + f0 * w.up.row_bytes, w.up.row_bytes, nf, w.hidden,
                      act, g.count, u, w.n_ff);
    }
    for (int a = 0; a < g.count; ++a) {
      SiluMul(isa_, h + a * w.n_ff, u + a * w.n_ff, nf);
    }
    if (!won()) return;
    if (!set.fold_quantise) {
      count_group_done(gi);
      return;
    }
    // The run that completes the group quantises its rows, then marks it ready for B. Acq_rel: it
    // sees the other A items' outputs, whose runs counted with release.
    if (set.group_done.Add(gi, std::memory_order_acq_rel) == static_cast<uint32_t>(set.ff_slices)) {
      for (int slot = g.first; slot < g.first + g.count; ++slot) QuantiseForDown(slot);
      set.group_done.Add(gi, std::memory_order_release);
    }
    count_for_join();
    return;
  }
  if (item < set.phase_end[2]) {  // Q: one job slot's intermediate row, from its A items' lanes
    const int slot = static_cast<int>(item - set.phase_end[1]);
    const int gi = set.slot_group[slot];
    await_group(gi, static_cast<uint32_t>(set.ff_slices), 2);
    QuantiseForDown(slot);
    count_group_done(gi);
    return;
  }
  // B: output columns [c0, c0 + nc) of one group.
  const uint32_t i = item - set.phase_end[2];
  const int gi = static_cast<int>(i / set.out_slices);
  const Group& g = set.groups[gi];
  await_group(gi, static_cast<uint32_t>(set.ff_slices + (set.fold_quantise ? 1 : g.count)), 3);
  const int slice = static_cast<int>(i % set.out_slices);
  const int64_t c0 = static_cast<int64_t>(slice) * set.out_slice;
  const int nc = static_cast<int>(std::min<int64_t>(set.out_slice, w.hidden - c0));
  const uint8_t* act[kMaxTileRows];
  for (int a = 0; a < g.count; ++a) {
    act[a] = set.hq.data() + static_cast<int64_t>(g.first + a) * set.hq_stride;
  }
  float* part = set.down[lane].data() + static_cast<int64_t>(g.first) * w.hidden + c0;
  {
    const ThreadTimer timer(impl_->threads[thread].kernel_ns);
    set.down_dot(w.down.Expert(g.expert) + c0 * w.down.row_bytes, w.down.row_bytes, nc, w.n_ff, act,
                 g.count, part, w.hidden);
  }
  if (!won()) return;
  // The run that completes the column slice, over every group, adds every job's weighted partial
  // into `out`, in job order (deterministic), each from the lane that won its B item. Acq_rel: it
  // sees the other groups' partials, whose runs counted with release.
  if (set.slice_done.Add(slice, std::memory_order_acq_rel) == static_cast<uint32_t>(set.n_groups)) {
    const int64_t c1 = std::min<int64_t>(c0 + set.out_slice, w.hidden);
    for (int j = 0; j < set.n_jobs; ++j) {
      const ExpertJob& job = set.sorted[j];
      const uint32_t b =
          set.phase_end[2] + static_cast<uint32_t>(set.slot_group[j] * set.out_slices + slice);
      const float* part = set.down[lane_of(b)].data() + static_cast<int64_t>(j) * w.hidden;
      float* o = set.out + static_cast<int64_t>(job.row) * w.hidden;
      for (int64_t c = c0; c < c1; ++c) o[c] += job.weight * part[c];
    }
  }
  count_for_join();
}

void ExpertPool::RunMatrixItem(JobSet& set, uint32_t item, int thread) {
  const WeightMatrix& first = set.products.front().w;
  if (item < set.phase_end[0]) {  // X: convert row `item` of x
    QuantizeActivations(first.type, set.x + static_cast<int64_t>(item) * first.cols, first.cols,
                        set.xq.data() + item * set.xq_stride);
    // Release: the A items, which acquire the count, see the converted row.
    set.x_done.fetch_add(1, std::memory_order_release);
    return;
  }
  // A: rows [r0, r0 + nr) of product p's matrix for x rows [a0, a0 + na).
  AwaitCount(set, set.x_done, static_cast<uint32_t>(set.n_rows), 1, thread);
  const uint32_t i = item - set.phase_end[0];
  const uint32_t group_items = set.product_items.back();
  const uint32_t k = i % group_items;
  size_t p = 0;
  while (k >= set.product_items[p + 1]) ++p;
  const WeightMatrix& w = set.products[p].w;
  const int64_t r0 = static_cast<int64_t>(k - set.product_items[p]) * set.row_slice;
  const int nr = static_cast<int>(std::min<int64_t>(set.row_slice, w.rows - r0));
  const int a0 = static_cast<int>(i / group_items) * kMaxTileRows;
  const int na = std::min(kMaxTileRows, set.n_rows - a0);
  const uint8_t* act[kMaxTileRows];
  for (int a = 0; a < na; ++a) act[a] = set.xq.data() + (a0 + a) * set.xq_stride;
  const ThreadTimer timer(impl_->threads[thread].kernel_ns);
  set.product_dots[p](w.data + r0 * w.row_bytes, w.row_bytes, nr, w.cols, act, na,
                      set.products[p].y + static_cast<int64_t>(a0) * w.rows + r0, w.rows);
}

}  // namespace tandem::experts
