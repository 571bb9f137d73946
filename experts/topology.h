// Where the expert pool's threads run and where expert weights live on a NUMA machine. Each NUMA
// node that has cores gets its own group of pool threads (its own task_arena in pool.cc), pinned to
// its cores, and is the home of one contiguous range of every layer's experts: those experts'
// weights are bound to the node's memory and its threads compute them first. Reading weights is
// the pool's whole cost, so a thread should read from the memory controller next to it.
// Pure planning over an hwloc topology, so a synthetic topology can stand in for a machine in
// tests.
#pragma once

#include <hwloc.h>
#include <sched.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::experts {

// What a worker is pinned to: a core, or a PU on a topology that reports no cores.
hwloc_obj_type_t PinUnitType(hwloc_topology_t topology);

struct PoolNode {
  int os_index = 0;               // the NUMA node's OS number (hwloc os_index)
  bool has_caller = false;        // the calling thread counts here (node 0 only)
  int caller_core = -1;           // node 0: hwloc logical index of the caller's PinUnitType object
  std::vector<int> worker_cores;  // hwloc logical index of each worker's PinUnitType object, in
                                  // arena-slot order
  int threads() const { return static_cast<int>(worker_cores.size()) + (has_caller ? 1 : 0); }
};

// Spreads `threads` compute threads (the caller included) over the topology's NUMA nodes that
// have cores, one at a time round-robin so every node's memory controller gets readers. The caller
// takes the first node's first core, which no worker uses while there are other cores. Within a
// node, cores go in hwloc's logical order; past the core count they are reused in the same order.
// With `numa` false, or on a machine with one node, everything is one node (os_index of the first).
absl::StatusOr<std::vector<PoolNode>> PlanPoolNodes(hwloc_topology_t topology, int threads,
                                                    bool numa);

// The CPUs the process started on: its first thread's affinity (taskset, numactl
// --physcpubind), read before main, when no pool can have bound a thread yet. hwloc's own view
// (the machine, less what a cgroup forbids) does not follow it.
const cpu_set_t& StartCpus();

// Restricts a loaded `topology` to `cpus` (when they leave something out and keep something), so
// that plans and bindings made from it stay inside them. The pool restricts its topology of this
// machine to StartCpus().
void RestrictTopology(hwloc_topology_t topology, const cpu_set_t& cpus);

// For its lifetime, binds the calling thread to every CPU it may use (StartCpus, less what a cgroup
// forbids); then restores the thread's binding. Threads started meanwhile take the wide binding,
// and the scheduler places each on an idle CPU as it starts. For threads the pool's caller starts,
// which would otherwise share its core (PoolOptions::pin) — the bench's stream readers: widening
// each reader's own binding after it started left them crowded on that core (37 GB/s against
// 138 on the 16-core host), and binding them one per core read 30% less once the pool had run
// (docs/perf/experts.md, session 17).
class WideBinding {
 public:
  WideBinding();
  ~WideBinding();
  WideBinding(const WideBinding&) = delete;
  WideBinding& operator=(const WideBinding&) = delete;

 private:
  hwloc_bitmap_t before_ = nullptr;  // nullptr: nothing to restore
};

// The largest CPU cache (L2, L3 or L4) in `topology`, in bytes; 0 when it has none.
int64_t LargestCacheBytes(hwloc_topology_t topology);
// The same for this machine (the caches of StartCpus), read once; 32 MiB when hwloc finds none.
// Benchmarks size their working sets from it: the 16-core H200 host's VM has a 300 MiB L3, the
// 2-core VM 32 MiB (glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) says 320 MiB there).
int64_t LargestCacheBytes();
// Bytes a benchmark's working set needs so that reading it cycles through memory, not a cache:
// four times LargestCacheBytes().
inline int64_t BeyondCachesBytes() { return 4 * LargestCacheBytes(); }

// Node k is the home of experts [HomeBegin(k), HomeBegin(k + 1)): contiguous ranges, so a node's
// share of a stacked expert tensor is one area to bind.
inline int64_t HomeBegin(int node, int n_nodes, int64_t n_expert) {
  return n_expert * node / n_nodes;
}
// The node whose range holds `expert`: the largest k with HomeBegin(k) <= expert.
inline int HomeNode(int64_t expert, int n_nodes, int64_t n_expert) {
  return static_cast<int>(((expert + 1) * n_nodes - 1) / n_expert);
}

}  // namespace tandem::experts
