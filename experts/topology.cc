#include "experts/topology.h"

#include <hwloc/glibc-sched.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::experts {

hwloc_obj_type_t PinUnitType(hwloc_topology_t topology) {
  return hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}

absl::StatusOr<std::vector<PoolNode>> PlanPoolNodes(hwloc_topology_t topology, int threads,
                                                    bool numa) {
  if (threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat("expert pool: ", threads, " threads"));
  }
  // The cores of each NUMA node that has any; memory-only nodes (CXL, HBM) have none.
  struct NodeCores {
    int os_index;
    std::vector<int> cores;
  };
  std::vector<NodeCores> nodes;
  const hwloc_obj_type_t unit = PinUnitType(topology);
  const int n_numa = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n_numa; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, i);
    NodeCores nc{static_cast<int>(node->os_index), {}};
    for (hwloc_obj_t core = nullptr;
         (core = hwloc_get_next_obj_inside_cpuset_by_type(topology, node->cpuset, unit, core));) {
      nc.cores.push_back(static_cast<int>(core->logical_index));
    }
    if (!nc.cores.empty()) nodes.push_back(std::move(nc));
  }
  if (nodes.empty()) {
    return absl::FailedPreconditionError(
        "expert pool: the hwloc topology has no NUMA node with cores");
  }
  if (!numa && nodes.size() > 1) {
    // One node over every core, in logical order.
    NodeCores all{nodes[0].os_index, {}};
    for (const NodeCores& nc : nodes)
      all.cores.insert(all.cores.end(), nc.cores.begin(), nc.cores.end());
    std::sort(all.cores.begin(), all.cores.end());
    nodes.assign(1, std::move(all));
  }

  std::vector<PoolNode> plan(nodes.size());
  std::vector<int> next_core(nodes.size(), 0);
  for (size_t k = 0; k < nodes.size(); ++k) plan[k].os_index = nodes[k].os_index;
  plan[0].has_caller = true;
  plan[0].caller_core = nodes[0].cores[0];
  next_core[0] = 1;  // the caller's core
  for (int t = 1; t < threads; ++t) {
    const size_t k = t % nodes.size();
    const std::vector<int>& cores = nodes[k].cores;
    plan[k].worker_cores.push_back(cores[next_core[k]++ % cores.size()]);
  }
  // A node without a thread would only be read from afar: leave it out of the plan.
  std::erase_if(plan, [](const PoolNode& n) { return n.threads() == 0; });
  return plan;
}

namespace {
const cpu_set_t kStartCpus = [] {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) CPU_ZERO(&set);
  return set;
}();
}  // namespace

const cpu_set_t& StartCpus() { return kStartCpus; }

void RestrictTopology(hwloc_topology_t topology, const cpu_set_t& cpus) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_cpuset_from_glibc_sched_affinity(topology, set, &cpus, sizeof(cpus));
  const hwloc_const_bitmap_t all = hwloc_get_root_obj(topology)->cpuset;
  if (hwloc_bitmap_intersects(set, all) && !hwloc_bitmap_isincluded(all, set)) {
    hwloc_topology_restrict(topology, set, 0);
  }
  hwloc_bitmap_free(set);
}

namespace {
// This machine's topology restricted to StartCpus, loaded once; binding and the cache query read it
// only, so threads may share it.
hwloc_topology_t ThisMachine() {
  static const hwloc_topology_t topology = [] {
    hwloc_topology_t t = nullptr;
    if (hwloc_topology_init(&t) != 0) return static_cast<hwloc_topology_t>(nullptr);
    if (hwloc_topology_load(t) != 0) {
      hwloc_topology_destroy(t);
      return static_cast<hwloc_topology_t>(nullptr);
    }
    RestrictTopology(t, StartCpus());
    return t;
  }();
  return topology;
}
}  // namespace

WideBinding::WideBinding() {
  hwloc_topology_t topology = ThisMachine();
  if (topology == nullptr) return;
  before_ = hwloc_bitmap_alloc();
  if (hwloc_get_cpubind(topology, before_, HWLOC_CPUBIND_THREAD) != 0) {
    hwloc_bitmap_free(before_);
    before_ = nullptr;
    return;
  }
  hwloc_set_cpubind(topology, hwloc_get_root_obj(topology)->cpuset, HWLOC_CPUBIND_THREAD);
}

WideBinding::~WideBinding() {
  if (before_ == nullptr) return;
  hwloc_set_cpubind(ThisMachine(), before_, HWLOC_CPUBIND_THREAD);
  hwloc_bitmap_free(before_);
}

int64_t LargestCacheBytes(hwloc_topology_t topology) {
  int64_t largest = 0;
  for (hwloc_obj_type_t type : {HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L4CACHE}) {
    for (hwloc_obj_t o = hwloc_get_next_obj_by_type(topology, type, nullptr); o != nullptr;
         o = hwloc_get_next_obj_by_type(topology, type, o)) {
      largest = std::max<int64_t>(largest, static_cast<int64_t>(o->attr->cache.size));
    }
  }
  return largest;
}

int64_t LargestCacheBytes() {
  static const int64_t bytes = ThisMachine() != nullptr ? LargestCacheBytes(ThisMachine()) : 0;
  return bytes > 0 ? bytes : int64_t{32} << 20;
}

}  // namespace tandem::experts
