// Thread and expert placement over NUMA nodes, planned on synthetic hwloc topologies (two packages
// of one node each, four cores each) so the multi-node layouts are checked on any machine.
#include "experts/topology.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/experts/test_util.h"

namespace tandem::experts {
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using Topology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

Topology Synthetic(const std::string& description) {
  hwloc_topology_t t = nullptr;
  EXPECT_EQ(hwloc_topology_init(&t), 0);
  EXPECT_EQ(hwloc_topology_set_synthetic(t, description.c_str()), 0) << description;
  EXPECT_EQ(hwloc_topology_load(t), 0);
  return Topology(t);
}

constexpr char kTwoNodes[] = "package:2 numa:1 core:4 pu:2";

TEST(PlanPoolNodes, SpreadsThreadsRoundRobinOverNodesAndKeepsTheCallersCore) {
  Topology topo = Synthetic(kTwoNodes);
  auto plan = PlanPoolNodes(topo.get(), 8, /*numa=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].os_index, 0);
  EXPECT_TRUE((*plan)[0].has_caller);
  EXPECT_EQ((*plan)[0].caller_core, 0);
  EXPECT_EQ((*plan)[0].worker_cores, (std::vector<int>{1, 2, 3}));  // core 0 is the caller's
  EXPECT_EQ((*plan)[1].os_index, 1);
  EXPECT_FALSE((*plan)[1].has_caller);
  EXPECT_EQ((*plan)[1].worker_cores, (std::vector<int>{4, 5, 6, 7}));

  plan = PlanPoolNodes(topo.get(), 3, true);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].threads(), 2);
  EXPECT_EQ((*plan)[0].worker_cores, (std::vector<int>{1}));
  EXPECT_EQ((*plan)[1].worker_cores, (std::vector<int>{4}));
}

TEST(PlanPoolNodes, ReusesCoresPastTheCoreCount) {
  Topology topo = Synthetic(kTwoNodes);
  auto plan = PlanPoolNodes(topo.get(), 12, true);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].worker_cores, (std::vector<int>{1, 2, 3, 0, 1}));
  EXPECT_EQ((*plan)[1].worker_cores, (std::vector<int>{4, 5, 6, 7, 4, 5}));
}

TEST(PlanPoolNodes, DropsNodesWithoutThreadsAndMergesWhenNumaIsOff) {
  Topology topo = Synthetic(kTwoNodes);
  auto plan = PlanPoolNodes(topo.get(), 1, true);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);  // the caller alone: node 1 would only be read from afar
  EXPECT_TRUE((*plan)[0].has_caller);
  EXPECT_TRUE((*plan)[0].worker_cores.empty());

  plan = PlanPoolNodes(topo.get(), 8, /*numa=*/false);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_EQ((*plan)[0].worker_cores, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));

  Topology one = Synthetic("core:4 pu:1");
  plan = PlanPoolNodes(one.get(), 4, true);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_EQ((*plan)[0].worker_cores, (std::vector<int>{1, 2, 3}));

  EXPECT_EQ(PlanPoolNodes(one.get(), 0, true).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlanPoolNodes, PinsToProcessingUnitsWhereTheTopologyHasNoCores) {
  Topology topo = Synthetic("package:2 numa:1 pu:2");
  ASSERT_EQ(PinUnitType(topo.get()), HWLOC_OBJ_PU);
  auto plan = PlanPoolNodes(topo.get(), 4, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 2u);
  EXPECT_EQ((*plan)[0].worker_cores, (std::vector<int>{1}));
  EXPECT_EQ((*plan)[1].worker_cores, (std::vector<int>{2, 3}));
  EXPECT_EQ(PinUnitType(Synthetic(kTwoNodes).get()), HWLOC_OBJ_CORE);
}

TEST(HomeNode, RangesAreContiguousCoverEveryExpertAndAgreeWithHomeBegin) {
  for (int n_nodes : {1, 2, 3, 4, 7}) {
    for (int64_t n_expert : {1, 2, 5, 10, 128, 512}) {
      EXPECT_EQ(HomeBegin(0, n_nodes, n_expert), 0);
      EXPECT_EQ(HomeBegin(n_nodes, n_nodes, n_expert), n_expert);
      for (int k = 0; k < n_nodes; ++k) {
        for (int64_t e = HomeBegin(k, n_nodes, n_expert); e < HomeBegin(k + 1, n_nodes, n_expert);
             ++e) {
          ASSERT_EQ(HomeNode(e, n_nodes, n_expert), k)
              << "expert " << e << " of " << n_expert << ", " << n_nodes << " nodes";
        }
      }
    }
  }
}

// The benches size their working sets from the largest cache: per-core L2s and shared L3s of
// different sizes, the largest wins; no cache at all reads 0 (and this machine's figure is never
// 0: the fallback).
TEST(LargestCacheBytes, TakesTheLargestCacheOfAnyLevel) {
  EXPECT_EQ(
      LargestCacheBytes(Synthetic("package:2 l3:1(size=48MB) l2:4(size=2MB) core:1 pu:1").get()),
      48000000);  // hwloc's synthetic MB are 10^6 bytes
  EXPECT_EQ(LargestCacheBytes(Synthetic("package:1 l3:2(size=16MB) core:2 pu:1").get()), 16000000);
  EXPECT_EQ(LargestCacheBytes(Synthetic("package:1 l2:4(size=4MB) core:1 pu:1").get()), 4000000);
  EXPECT_EQ(LargestCacheBytes(Synthetic(kTwoNodes).get()), 0);
  EXPECT_GT(LargestCacheBytes(), 0);
}

// A process started on CPUs 2-3 of a four-core machine (taskset -c 2,3) plans its caller and
// workers on those cores only.
TEST(RestrictTopology, PlansStayInsideTheStartCpus) {
  Topology topo = Synthetic("package:1 numa:1 core:4 pu:1");
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(2, &cpus);
  CPU_SET(3, &cpus);
  RestrictTopology(topo.get(), cpus);
  EXPECT_EQ(hwloc_get_nbobjs_by_type(topo.get(), HWLOC_OBJ_CORE), 2);
  auto plan = PlanPoolNodes(topo.get(), 2, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->size(), 1u);
  std::vector<int> cores = (*plan)[0].worker_cores;
  cores.push_back((*plan)[0].caller_core);
  for (int c : cores) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo.get(), HWLOC_OBJ_CORE, static_cast<unsigned>(c));
    ASSERT_NE(core, nullptr);
    const int pu = hwloc_bitmap_first(core->cpuset);
    EXPECT_TRUE(pu == 2 || pu == 3) << "core " << c << " is CPU " << pu;
  }
  // CPUs that leave nothing out, or keep nothing, change nothing.
  Topology whole = Synthetic("package:1 numa:1 core:4 pu:1");
  CPU_ZERO(&cpus);
  CPU_SET(7, &cpus);
  RestrictTopology(whole.get(), cpus);
  EXPECT_EQ(hwloc_get_nbobjs_by_type(whole.get(), HWLOC_OBJ_CORE), 4);
}

// A thread bound to one CPU widens its binding for a WideBinding's lifetime; a thread started
// meanwhile keeps the wide binding; the old one comes back after.
TEST(WideBinding, ThreadsStartedInsideItMayRunAnywhere) {
  const cpu_set_t all = ThreadAffinity();
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one CPU: nothing to widen";
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  cpu_set_t started;
  {
    const WideBinding wide;
    const cpu_set_t inside = ThreadAffinity();
    EXPECT_GE(CPU_COUNT(&inside), CPU_COUNT(&all));
    std::thread([&] { started = ThreadAffinity(); }).join();
  }
  EXPECT_GE(CPU_COUNT(&started), CPU_COUNT(&all));
  const cpu_set_t after = ThreadAffinity();
  EXPECT_TRUE(CPU_EQUAL(&after, &one));
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
}

}  // namespace
}  // namespace tandem::experts
