// The CPU expert pool: runs one layer's routed experts (a list of (row, expert, weight) jobs) on
// pinned threads with quantised kernels, adding Σ weight · expert(x[row]) into out[row]; and, on
// the same threads, the layer's dense matrix products (MatMul).
// Threads come from one oneTBB task_arena per NUMA node (workers pinned to that node's cores with
// hwloc; the calling thread, which also works, keeps its own core), and each node's threads take
// the work of the experts homed on that node first (topology.h). Workers spin for a window after
// each layer, then leave their arena so that other TBB work can use the cores; scratch is mimalloc
// memory that only grows when a larger layer shape arrives, so steady-state layers allocate
// nothing. A late work item of a small layer is run again by an idle thread (backup_us). Must not
// depend on runtime/reference or engine: callers (engine, bench) wire it in.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "experts/isa.h"
#include "experts/kernels.h"
#include "experts/topology.h"
#include "runtime/format/tensor_info.h"
#include "runtime/quant/ggml_type.h"

namespace tandem::experts {

// One stacked expert tensor as GGUF stores it: n_expert slabs of `rows` rows of `cols` elements.
struct ExpertTensor {
  const uint8_t* data = nullptr;
  quant::GgmlType type = quant::GgmlType::kF32;
  int64_t cols = 0;  // ne[0]: elements per row
  int64_t rows = 0;  // ne[1]: rows per expert
  int64_t row_bytes = 0;
  int64_t expert_bytes = 0;  // rows * row_bytes
  // kRows8: each expert's slab repacked (rows8.h, PackedExperts), the same bytes in another order.
  WeightLayout layout = WeightLayout::kGguf;
  const uint8_t* Expert(int64_t e) const { return data + e * expert_bytes; }
};

// gate/up: [hidden, n_ff, n_expert]; down: [n_ff, hidden, n_expert] (ggml order).
struct ExpertWeights {
  ExpertTensor gate, up, down;
  int64_t hidden = 0, n_ff = 0, n_expert = 0;

  // Bytes of one expert (gate + up + down).
  int64_t ExpertBytes() const { return gate.expert_bytes + up.expert_bytes + down.expert_bytes; }

  // Validates shapes and types (every type SupportsFormat, gate and up alike, block sizes
  // dividing hidden and n_ff) and that the bytes are in memory.
  static absl::StatusOr<ExpertWeights> FromTensors(const format::TensorInfo& gate,
                                                   const format::TensorInfo& up,
                                                   const format::TensorInfo& down);
  // The same over raw buffers laid out like the tensors above.
  static absl::StatusOr<ExpertWeights> FromBuffers(quant::GgmlType gate_up_type,
                                                   quant::GgmlType down_type, int64_t hidden,
                                                   int64_t n_ff, int64_t n_expert,
                                                   const uint8_t* gate, const uint8_t* up,
                                                   const uint8_t* down);
};

// One weight matrix as GGUF stores it (a 2-D tensor's first `rows` rows of `cols` elements): the
// dense products of a layer (projections, router, output) that ExpertPool::MatMul runs.
struct WeightMatrix {
  const uint8_t* data = nullptr;
  quant::GgmlType type = quant::GgmlType::kF32;
  int64_t cols = 0;
  int64_t rows = 0;
  int64_t row_bytes = 0;

  // Validates the type (SupportsFormat, rows of whole blocks), that `rows` fits the tensor and that
  // its bytes are in memory.
  static absl::StatusOr<WeightMatrix> FromTensor(const format::TensorInfo& t, int64_t rows);
};

// One product of ExpertPool::MatMul: y (n_rows × w.rows, row-major, overwritten) = x · Wᵀ.
struct MatrixProduct {
  WeightMatrix w;
  float* y = nullptr;
};

struct ExpertJob {
  int32_t row = 0;
  int32_t expert = 0;
  float weight = 0;
};

// How long (µs) idle workers spin waiting for the next layer before leaving the arena.
// 200 µs is meant to cover the gap between two layers of a decode step (the mixer half of a
// Flash-Next layer on the GPU, or a reference attention layer on the CPU) so back-to-back layers
// never pay the TBB wake-up. Not yet swept: `tandem bench experts` reports the spinning (0.15 µs)
// and the cold (5.6 µs) dispatch cost at this one setting (docs/perf/experts.md).
inline constexpr int kDefaultSpinMicros = 200;

// How long (µs) a claimed gate/up or down item of a small layer may run before a thread with
// nothing else to do runs it again (a backup; whichever run finishes first is used, and both give
// the same bytes). A thread descheduled in the middle of an item otherwise holds the whole layer
// for a scheduler slice: on the 16-core H200 host 1-10% of 300-400 µs layers took 4-20 ms
// (docs/perf/experts.md, session 11). Items there take 10-60 µs, so 200 µs leaves normal items
// alone. Negative: never.
inline constexpr int kDefaultBackupMicros = 200;

struct PoolOptions {
  // Compute threads including the caller; 0: one per CPU the process started on (StartCpus in
  // topology.h: its affinity, e.g. taskset; the pool plans and pins inside that set either way).
  int threads = 0;
  std::string isa = "auto";  // auto | avx512 | avx2 | scalar
  int spin_us = kDefaultSpinMicros;
  int backup_us = kDefaultBackupMicros;
  // Tests only: in layers that take backups, every worker (not the caller) that claims a gate/up
  // or down item sleeps, as if descheduled, until another thread's backup has finished it or for
  // this long, so that backups happen on any machine. 0 in real use.
  int stall_workers_us = 0;
  // Pin workers to their cores with hwloc, and the thread that calls Run (or RunEmpty) to the core
  // the plan keeps for it (PoolNode::caller_core), from its first call; the pool restores that
  // thread's earlier binding when it is destroyed on the same thread. Unpinned, the scheduler
  // moved the caller onto a busy worker's core at times, and the two then took turns in
  // millisecond slices while holding the layer (docs/perf/experts.md, session 17). Threads the
  // pinned caller starts inherit its core (pthread affinity), so start them before, or bind them
  // (WideBinding in topology.h).
  bool pin = true;
  bool numa = true;  // one arena per NUMA node (false: one arena over every core)
  // An hwloc synthetic topology to plan threads for instead of this machine's, e.g.
  // "package:2 numa:1 core:4 pu:1" (for tests): nothing is pinned and BindWeights refuses.
  std::string synthetic_topology = {};
};

class ExpertPool {
 public:
  static absl::StatusOr<std::unique_ptr<ExpertPool>> Create(const PoolOptions& options);
  ~ExpertPool();
  ExpertPool(const ExpertPool&) = delete;
  ExpertPool& operator=(const ExpertPool&) = delete;

  // out[r][c] += Σ_{jobs with row r} weight · down(silu(gate·x[r]) ⊙ up·x[r])[c] for x, out of
  // n_rows × hidden floats. An expert chosen by several rows is read once per kMaxTileRows (512)
  // of them (the kernels' tiled path past 8 rows); every expert is split across all threads
  // (gate/up rows, then down rows). x and out are not touched after Run returns, but the weight
  // bytes may be: a thread whose item was backed up (PoolOptions::backup_us) can still be finishing
  // its own run of it. So the weights must stay in memory until WaitIdle() returns or the pool is
  // destroyed.
  absl::Status Run(const ExpertWeights& w, std::span<const ExpertJob> jobs, const float* x,
                   int n_rows, float* out);

  // For each product, y[t][r] = Σ_i W[r][i] · x[t][i] for t < n_rows, r < w.rows, with x
  // n_rows × cols (row-major) shared by all: their matrices must have the same cols and activation
  // type (e.g. a layer's q, k and v projections), so each x row is converted once for all of them.
  // The same kernels as the experts; the weight rows of all products are split over every thread
  // in one job, and each weight row is read once per kMaxTileRows rows of x. For the dense half of
  // a layer, on the threads the experts use: another thread pool there would find these cores
  // busy spinning (spin_us) between layers. Takes no backups, so nothing of it runs after it
  // returns.
  absl::Status MatMul(std::span<const MatrixProduct> products, const float* x, int n_rows);

  // Calls body(begin, end) over [0, n) cut into ranges of `grain` indices, on the pool's threads
  // (the caller's included), and returns when every range has run. For the loops of the cpu
  // backend's dense half (attention over the cache, DeltaNet's per-head state update):
  // TBB's default arena would find the pool's workers spinning on its cores between layers.
  // Ranges run concurrently, so body must only write what its own range owns.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

  // Waits until no thread is still running an item of an earlier Run (a run that lost to its
  // backup). After it returns, the weights of earlier Runs may be freed.
  void WaitIdle();

  // Dispatch and join of a job of one no-op item per thread: the pool's fixed cost per layer.
  void RunEmpty();

  // Places the memory of each node's home experts (HomeBegin in topology.h), in all three tensors,
  // on that node: the node's threads read every page once (so a file mapping's pages not yet in
  // memory are read in there), then the area is bound to the node and pages elsewhere are moved.
  // Returns the bytes bound (whole pages, so a range may take a page of its neighbour). Speed
  // only: results do not depend on where weights live. Reads the whole expert set: at load time.
  absl::StatusOr<int64_t> BindWeights(const ExpertWeights& w);

  // Items of the node-homed phases (gate/up, quantise, down) run by a thread of the expert's home
  // node, and by a thread of another node that had run out of its own, since Create. Complete once
  // WaitIdle() has returned: a thread counts its last item just after the join may have returned.
  struct ClaimCounts {
    uint64_t home = 0, away = 0;
  };
  ClaimCounts claim_counts() const;
  // Items run a second time because their first run was late (PoolOptions::backup_us), since
  // Create.
  uint64_t backups() const;
  // Where the threads' time went, in nanoseconds summed over all threads since Create: against
  // threads × wall time, how much of a layer they spent streaming weights and what the rest was.
  // Complete once WaitIdle() has returned (a worker adds its stay in a job as it leaves). A run
  // that lost to its backup counts in full, also the part after its job's join.
  struct ThreadTimes {
    // Inside jobs: from a thread's entry into a job to its leaving when nothing is left to claim
    // (the caller's join excluded). threads × wall − job_ns − join_ns is the time threads were
    // not in a job at all: arriving late, or done with their items before others were.
    uint64_t job_ns = 0;
    // In the gate/up and down kernel calls, and MatMul's (part of job_ns).
    uint64_t kernel_ns = 0;
    // Items waiting for the items they read (part of job_ns), by the waiting item's phase: gate/up
    // for the converted rows, quantise-for-down for its gate/up items, down for its quantised
    // rows. Backup runs a waiting thread makes (PoolOptions::backup_us) count as waiting (and
    // their kernel calls in kernel_ns too).
    uint64_t gate_up_wait_ns = 0, quantise_wait_ns = 0, down_wait_ns = 0;
    // The caller waiting for the job's last items once its own claims ran out.
    uint64_t join_ns = 0;
    // The caller preparing each Run's job before it announces it (the workers wait meanwhile: part
    // of their time out of the job).
    uint64_t setup_ns = 0;
  };
  ThreadTimes thread_times() const;

  const std::vector<PoolNode>& nodes() const { return nodes_; }
  int threads() const { return n_threads_; }
  Isa isa() const { return isa_; }
  int spin_us() const { return spin_us_; }
  int backup_us() const { return backup_us_; }

 private:
  struct Impl;
  ExpertPool() = default;
  struct JobSet;
  JobSet& TakeJobSet(bool small, bool backups);
  void WaitUntilNoThreadIn(int set_index);  // -1: no thread in any set
  void Post(JobSet& set);
  void PostPhaseX(JobSet& set, uint32_t items);  // Post a job of `items` phase-X items only
  void Participate(uint64_t epoch, int node, int thread);
  void WorkerMain(int node);
  void EnsureWorkers();
  // `thread`: the pool-wide number of the thread that runs it (0: the caller).
  void RunItem(JobSet& set, uint32_t item, int lane, int thread);
  void RunMatrixItem(JobSet& set, uint32_t item, int thread);  // MatMul's items, by RunItem
  template <class Done>
  void Await(JobSet& set, Done done, int below_phase, int thread);
  void AwaitCount(JobSet& set, const std::atomic<uint32_t>& counter, uint32_t target,
                  int below_phase, int thread);
  bool RunLateItem(JobSet& set, int below_phase, int thread);

  Isa isa_ = Isa::kScalar;
  std::vector<PoolNode> nodes_;
  int n_threads_ = 0;
  int spin_us_ = 0;
  int backup_us_ = 0;
  int stall_workers_us_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::experts
