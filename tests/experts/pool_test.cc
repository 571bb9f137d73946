// The pool against the fp32 reference of the same experts: every format, rows 1..8 and 33, experts
// shared by several rows (and one row choosing an expert twice), thread counts 1, 2 and all (which
// must give bit-identical results), the scalar, each forced SIMD and the best ISA, outputs
// accumulated onto random data.
// Prefill-sized layers (200 and 512 rows, one expert chosen by every row: the tiled kernels and
// groups cut at kMaxTileRows) against the single-threaded scalar pool.
// Reruns of late items (workers made to stall, or every claimed item): the same bytes as without.
// NUMA: pools planned on synthetic 2- and 3-node topologies (one claim list per node) against one
// node, and binding expert memory on this machine.
#include "experts/pool.h"

#include <gtest/gtest.h>
#include <hwloc.h>
#include <sched.h>
#include <sys/mman.h>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "experts/isa.h"
#include "experts/packed_experts.h"
#include "tests/experts/test_util.h"

namespace tandem::experts {
namespace {

using quant::GgmlType;

struct ExpertData {
  GgmlType type;
  int64_t hidden, n_ff, n_expert;
  std::vector<uint8_t> gate, up, down;
  ExpertWeights w;
};

ExpertData MakeExperts(GgmlType type, int64_t hidden, int64_t n_ff, int64_t n_expert,
                       uint64_t seed) {
  ExpertData d{type, hidden, n_ff, n_expert, {}, {}, {}, {}};
  d.gate = RandomWeights(type, n_ff * n_expert, hidden, seed);
  d.up = RandomWeights(type, n_ff * n_expert, hidden, seed + 1);
  d.down = RandomWeights(type, hidden * n_expert, n_ff, seed + 2);
  d.w = *ExpertWeights::FromBuffers(type, type, hidden, n_ff, n_expert, d.gate.data(),
                                    d.up.data(), d.down.data());
  return d;
}

// out += Σ weight · down(silu(gate x) ⊙ up x), all in fp64 over scalar-decoded weights.
void ReferenceExperts(const ExpertData& d, const std::vector<ExpertJob>& jobs,
                      const std::vector<float>& x, std::vector<float>* out) {
  const int64_t H = d.hidden, F = d.n_ff;
  for (const ExpertJob& job : jobs) {
    const std::vector<float> g = DecodeRows(d.type, d.gate.data(), H, job.expert * F, F);
    const std::vector<float> u = DecodeRows(d.type, d.up.data(), H, job.expert * F, F);
    const std::vector<float> dn = DecodeRows(d.type, d.down.data(), F, job.expert * H, H);
    std::vector<double> h(F);
    for (int64_t f = 0; f < F; ++f) {
      double gs = 0, us = 0;
      for (int64_t i = 0; i < H; ++i) {
        gs += static_cast<double>(g[f * H + i]) * x[job.row * H + i];
        us += static_cast<double>(u[f * H + i]) * x[job.row * H + i];
      }
      h[f] = gs / (1 + std::exp(-gs)) * us;
    }
    for (int64_t c = 0; c < H; ++c) {
      double s = 0;
      for (int64_t f = 0; f < F; ++f) s += dn[c * F + f] * h[f];
      (*out)[job.row * H + c] += static_cast<float>(job.weight * s);
    }
  }
}

std::vector<ExpertJob> RandomJobs(int n_rows, int n_expert, int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ExpertJob> jobs;
  for (int r = 0; r < n_rows; ++r) {
    for (int i = 0; i < k; ++i) {
      // Few experts for many rows: most experts are shared by several rows.
      jobs.push_back({r, static_cast<int32_t>(rng() % n_expert),
                      0.2f + static_cast<float>(rng() % 100) / 100.0f});
    }
  }
  jobs.push_back(jobs.front());  // the same (row, expert) twice: both count
  return jobs;
}

// Normalised error of a whole expert layer (two activation quantisations: x, then the SwiGLU
// intermediate) against fp64 over the decoded weights. Measured worst case over these cases:
// 0.024 (Q3_K), 0.020 (Q4_K), 0.014 (Q4_0), 0.013 (Q8_0); the bound leaves ~1.7x room.
constexpr double kLayerBound = 0.04;

class PoolTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(PoolTest, MatchesFp32ReferenceAcrossRowsThreadsAndIsas) {
  const GgmlType type = GetParam();
  const int block = quant::GetTypeInfo(type).block_elems;
  // Odd multiples of the block: partial kernel groups and slices everywhere.
  const int64_t hidden = block == 256 ? 768 : 288, n_ff = block == 256 ? 512 : 160;
  const ExpertData d = MakeExperts(type, hidden, n_ff, 5, static_cast<uint64_t>(type) * 77);
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int n_rows : {1, 2, 3, 4, 5, 6, 7, 8, 33}) {
    SCOPED_TRACE(testing::Message() << quant::GetTypeInfo(type).name << " rows " << n_rows);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(n_rows * hidden), n_rows);
    const std::vector<ExpertJob> jobs = RandomJobs(n_rows, 5, 3, n_rows * 31 + 7);
    const std::vector<float> base = RandomFloats(x.size(), n_rows + 1000, 0.01f);
    std::vector<float> want = base;
    ReferenceExperts(d, jobs, x, &want);
    std::vector<float> want_delta(want.size());
    for (size_t i = 0; i < want.size(); ++i) want_delta[i] = want[i] - base[i];

    // Each forced ISA too (`--cpu-isa`): avx2 and avx512 have their own 2..8-row kernels.
    for (const char* isa : {"scalar", "avx2", "avx512", "auto"}) {
      if (!ResolveIsa(isa).ok()) continue;  // this CPU lacks it; kernels_test says which
      // And with the experts repacked where this ISA has a kernel for that (rows8.h).
      for (bool repack : {false, true}) {
        if (repack && !PackedExperts::WouldPack(d.w, *ResolveIsa(isa))) continue;
        std::vector<float> first;
        for (int threads : {1, 2, all}) {
          PoolOptions options;
          options.threads = threads;
          options.isa = isa;
          auto pool = ExpertPool::Create(options);
          ASSERT_TRUE(pool.ok()) << pool.status();
          std::optional<PackedExperts> packed;
          if (repack) {
            auto p = PackedExperts::Pack(d.w, **pool);
            ASSERT_TRUE(p.ok()) << p.status();
            EXPECT_EQ(p->packed_bytes(), 3 * d.w.gate.expert_bytes * d.w.n_expert);
            packed.emplace(std::move(p).value());
          }
          const ExpertWeights& w = repack ? packed->weights() : d.w;
          std::vector<float> out = base;
          ASSERT_TRUE((*pool)->Run(w, jobs, x.data(), n_rows, out.data()).ok());
          std::vector<float> delta(out.size());
          for (size_t i = 0; i < out.size(); ++i) delta[i] = out[i] - base[i];
          EXPECT_LT(NormalisedError(delta.data(), want_delta.data(), delta.size()), kLayerBound)
              << isa << " threads " << threads << " repacked " << repack;
          if (first.empty()) {
            first = out;
          } else {
            EXPECT_EQ(out, first) << "thread count changed the result: " << isa << " " << threads
                                  << " repacked " << repack;
          }
          // A backup's losing run may still read the repacked weights (ExpertPool::Run).
          (*pool)->WaitIdle();
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, PoolTest, testing::ValuesIn(kAllFormats), FormatName);

// Tiled pool against the scalar pool, normalised error of the layer's delta. Each kernel call
// agrees to float rounding (kernels_test.cc, 2e-6), but a 1-ulp difference in silu(g)·u can flip
// one Q8_K/Q8_0 rounding of the intermediate, moving that element by a whole quantum. Measured on
// 2026-11-29: 2.5e-4 (Q4_K, 512 rows), 6e-5 (Q3_K), below 1e-5 for IQ4_XS, Q8_0, BF16; a wrong
// row, slot or group gives O(1).
constexpr double kTiledBound = 1e-3;

class PoolManyRowsTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(PoolManyRowsTest, PrefillRowsMatchScalarPool) {
  const GgmlType type = GetParam();
  const int block = quant::GetTypeInfo(type).block_elems;
  const int64_t hidden = block == 256 ? 512 : 160, n_ff = block == 256 ? 256 : 96;
  const ExpertData d = MakeExperts(type, hidden, n_ff, 5, static_cast<uint64_t>(type) * 91);
  for (int n_rows : {200, 512}) {
    SCOPED_TRACE(testing::Message() << quant::GetTypeInfo(type).name << " rows " << n_rows);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(n_rows * hidden), n_rows + 5);
    // Every row chooses expert 0 (plus two random ones): at 512 rows expert 0 has more rows than
    // one group holds, so its rows are cut into a full 512-row group and a remainder.
    std::vector<ExpertJob> jobs = RandomJobs(n_rows, 5, 2, n_rows * 13 + 1);
    for (int r = 0; r < n_rows; ++r) jobs.push_back({r, 0, 0.5f});
    const std::vector<float> base = RandomFloats(x.size(), n_rows + 2000, 0.01f);
    std::vector<float> want = base, got = base;
    auto scalar = ExpertPool::Create({.threads = 1, .isa = "scalar"});
    auto best = ExpertPool::Create({.threads = 0, .isa = "auto"});
    ASSERT_TRUE(scalar.ok() && best.ok());
    ASSERT_TRUE((*scalar)->Run(d.w, jobs, x.data(), n_rows, want.data()).ok());
    ASSERT_TRUE((*best)->Run(d.w, jobs, x.data(), n_rows, got.data()).ok());
    std::vector<float> got_delta(got.size()), want_delta(want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      got_delta[i] = got[i] - base[i];
      want_delta[i] = want[i] - base[i];
    }
    EXPECT_LT(NormalisedError(got_delta.data(), want_delta.data(), got.size()), kTiledBound);
    // The rows8 kernel takes more than 8 rows in chunks of 8 (kernel_rows8_avx512.h).
    if (PackedExperts::WouldPack(d.w, (*best)->isa())) {
      auto packed = PackedExperts::Pack(d.w, **best);
      ASSERT_TRUE(packed.ok()) << packed.status();
      std::vector<float> repacked = base;
      ASSERT_TRUE((*best)->Run(packed->weights(), jobs, x.data(), n_rows, repacked.data()).ok());
      for (size_t i = 0; i < got.size(); ++i) got_delta[i] = repacked[i] - base[i];
      EXPECT_LT(NormalisedError(got_delta.data(), want_delta.data(), got.size()), kTiledBound)
          << "repacked";
      (*best)->WaitIdle();  // before the repacked weights go
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PoolManyRowsTest,
                         testing::Values(GgmlType::kQ4_K, GgmlType::kQ3_K, GgmlType::kIQ4_XS,
                                         GgmlType::kQ8_0, GgmlType::kBF16),
                         [](const auto& info) {
                           return std::string(quant::GetTypeInfo(info.param).name);
                         });

// Backups (PoolOptions::backup_us). `stalled`: every worker that claims a gate/up or down item
// sleeps until a backup has finished it (PoolOptions::stall_workers_us), so the caller reruns it
// after 100 µs and the rerun's lane is the one read; `eager`: a
// threshold of 0, so any waiting thread reruns any claimed item that is not done and either run
// may win. The results must be bit-identical to a pool that never reruns, over more layers than
// there are job sets (so sets are reused), with small jobs (which take backups) and a large one
// (which does not) in between.
TEST(PoolBackups, RerunsGiveTheSameBytes) {
  const ExpertData d = MakeExperts(GgmlType::kQ4_K, 256, 512, 6, 91);
  const int threads = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  auto plain = ExpertPool::Create({.threads = threads, .backup_us = -1});
  auto stalled =
      ExpertPool::Create({.threads = threads, .backup_us = 100, .stall_workers_us = 1000000});
  auto eager = ExpertPool::Create({.threads = threads, .backup_us = 0});
  ASSERT_TRUE(plain.ok() && stalled.ok() && eager.ok());
  // 60 layers, then more until a worker has joined a stalled layer (on a loaded machine the TBB
  // worker can miss many short layers), for at most 30 s.
  const auto start = std::chrono::steady_clock::now();
  for (int layer = 0;
       layer < 60 || ((*stalled)->backups() == 0 &&
                      std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
       ++layer) {
    const int n_rows = layer % 20 == 7 ? 12 : 1 + layer % 4;  // 12 rows x 6 experts: no backups
    const std::vector<ExpertJob> jobs = RandomJobs(n_rows, 6, 6, layer + 500);
    const std::vector<float> x = RandomFloats(n_rows * d.hidden, layer + 900, 1.0f);
    const std::vector<float> base = RandomFloats(x.size(), layer + 1300, 0.01f);
    std::vector<float> want = base;
    ASSERT_TRUE((*plain)->Run(d.w, jobs, x.data(), n_rows, want.data()).ok());
    for (ExpertPool* pool : {stalled->get(), eager->get()}) {
      std::vector<float> got = base;
      ASSERT_TRUE(pool->Run(d.w, jobs, x.data(), n_rows, got.data()).ok());
      ASSERT_EQ(got, want) << "layer " << layer << ", " << n_rows << " rows, backup_us "
                           << pool->backup_us();
    }
  }
  EXPECT_EQ((*plain)->backups(), 0u);
  // A worker that claimed an item and slept: the caller reran it (unless no worker ever joined).
  EXPECT_GT((*stalled)->backups(), 0u) << "no item was ever rerun: the test did not test it";
}

// A run that lost to its backup can outlast its Run call and still read the weights; WaitIdle
// waits for it. The weights live in their own mapping, which is made unreadable after every
// WaitIdle for a millisecond (stalled workers wake within 50 µs of their item's backup finishing
// and then run it themselves): a read that WaitIdle did not wait for faults and kills the test.
TEST(PoolBackups, WaitIdleLetsTheCallerUnmapTheWeights) {
  const ExpertData d = MakeExperts(GgmlType::kQ4_K, 256, 512, 6, 77);
  const size_t sizes[3] = {d.gate.size(), d.up.size(), d.down.size()};
  const size_t bytes = sizes[0] + sizes[1] + sizes[2];
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  uint8_t* base = static_cast<uint8_t*>(map);
  std::copy(d.gate.begin(), d.gate.end(), base);
  std::copy(d.up.begin(), d.up.end(), base + sizes[0]);
  std::copy(d.down.begin(), d.down.end(), base + sizes[0] + sizes[1]);
  const ExpertWeights w =
      *ExpertWeights::FromBuffers(GgmlType::kQ4_K, GgmlType::kQ4_K, 256, 512, 6, base,
                                  base + sizes[0], base + sizes[0] + sizes[1]);
  const int threads = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  auto stalled =
      ExpertPool::Create({.threads = threads, .backup_us = 100, .stall_workers_us = 1000000});
  ASSERT_TRUE(stalled.ok());
  const auto start = std::chrono::steady_clock::now();
  for (int layer = 0;
       layer < 20 || ((*stalled)->backups() == 0 &&
                      std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
       ++layer) {
    const int n_rows = 1 + layer % 4;
    const std::vector<ExpertJob> jobs = RandomJobs(n_rows, 6, 6, layer + 40);
    const std::vector<float> x = RandomFloats(n_rows * d.hidden, layer + 80, 1.0f);
    std::vector<float> want(x.size(), 0.0f), got(x.size(), 0.0f);
    ReferenceExperts(d, jobs, x, &want);
    ASSERT_TRUE((*stalled)->Run(w, jobs, x.data(), n_rows, got.data()).ok());
    (*stalled)->WaitIdle();
    ASSERT_EQ(mprotect(map, bytes, PROT_NONE), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(mprotect(map, bytes, PROT_READ), 0);
    EXPECT_LT(NormalisedError(got.data(), want.data(), got.size()), kLayerBound)
        << "layer " << layer;
  }
  EXPECT_GT((*stalled)->backups(), 0u) << "no item was ever rerun: the test did not test it";
  stalled->reset();
  ASSERT_EQ(munmap(map, bytes), 0);
}

TEST(PoolErrors, RefusesUnsupportedFormatsAndBadJobs) {
  std::vector<uint8_t> bytes(1 << 16);
  auto q4_1 = ExpertWeights::FromBuffers(GgmlType::kQ4_1, GgmlType::kQ4_1, 256, 256, 1,
                                         bytes.data(), bytes.data(), bytes.data());
  EXPECT_EQ(q4_1.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(q4_1.status().message().find("q4_1"), std::string::npos);
  auto odd = ExpertWeights::FromBuffers(GgmlType::kQ4_K, GgmlType::kQ4_K, 300, 256, 1,
                                        bytes.data(), bytes.data(), bytes.data());
  EXPECT_FALSE(odd.ok());

  const ExpertData d = MakeExperts(GgmlType::kQ8_0, 64, 64, 2, 5);
  auto pool = ExpertPool::Create({});
  ASSERT_TRUE(pool.ok());
  std::vector<float> x(64, 1.0f), out(64, 0.0f);
  const std::vector<ExpertJob> bad_row = {{1, 0, 1.0f}};
  EXPECT_EQ((*pool)->Run(d.w, bad_row, x.data(), 1, out.data()).code(),
            absl::StatusCode::kOutOfRange);
  const std::vector<ExpertJob> bad_expert = {{0, 2, 1.0f}};
  EXPECT_EQ((*pool)->Run(d.w, bad_expert, x.data(), 1, out.data()).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ExpertPool::Create({.threads = 1, .isa = "sse9"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PackedExpertsTest, ReadsAvailableMemory) {
  const int64_t available = AvailableMemoryBytes();
  EXPECT_GT(available, int64_t{1} << 20) << "MemAvailable missing from /proc/meminfo";
}

// Repacked weights handed to a pool whose ISA has no kernel for their layout are refused by name,
// and a pool without one packs nothing.
TEST(PoolErrors, RefusesALayoutItsIsaHasNoKernelFor) {
  if (!CpuSupports(Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks avx2: nothing is repacked";
  const ExpertData d = MakeExperts(GgmlType::kQ4_K, 256, 256, 2, 9);
  auto simd = ExpertPool::Create({.threads = 1, .isa = "auto"});
  auto scalar = ExpertPool::Create({.threads = 1, .isa = "scalar"});
  ASSERT_TRUE(simd.ok() && scalar.ok());
  auto packed = PackedExperts::Pack(d.w, **simd);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ(packed->weights().gate.layout, WeightLayout::kRows8);
  std::vector<float> x(256, 1.0f), out(256, 0.0f);
  const std::vector<ExpertJob> jobs = {{0, 1, 1.0f}};
  const absl::Status refused = (*scalar)->Run(packed->weights(), jobs, x.data(), 1, out.data());
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.message().find("rows8"), std::string::npos) << refused;
  auto not_packed = PackedExperts::Pack(d.w, **scalar);
  ASSERT_TRUE(not_packed.ok());
  EXPECT_EQ(not_packed->packed_bytes(), 0);
  EXPECT_EQ(not_packed->weights().gate.data, d.w.gate.data);
}

// PoolOptions::pin: the calling thread runs on the core kept for it from its first call, and gets
// its binding back when the pool is destroyed; with pin off it is left alone.
TEST(PoolTest, PinsTheCallerToItsCoreAndRestoresItsBinding) {
  const cpu_set_t before = ThreadAffinity();
  if (CPU_COUNT(&before) < 2) GTEST_SKIP() << "one CPU: pinning cannot narrow the binding";
  {
    auto pool = ExpertPool::Create({.threads = 2});
    ASSERT_TRUE(pool.ok()) << pool.status();
    const cpu_set_t created = ThreadAffinity();
    EXPECT_TRUE(CPU_EQUAL(&created, &before));  // not before the first call
    (*pool)->RunEmpty();
    const cpu_set_t during = ThreadAffinity();
    EXPECT_GE(CPU_COUNT(&during), 1);
    EXPECT_LT(CPU_COUNT(&during), CPU_COUNT(&before));
  }
  cpu_set_t after = ThreadAffinity();
  EXPECT_TRUE(CPU_EQUAL(&after, &before));
  {
    auto pool = ExpertPool::Create({.threads = 2, .pin = false});
    ASSERT_TRUE(pool.ok()) << pool.status();
    (*pool)->RunEmpty();
    after = ThreadAffinity();
    EXPECT_TRUE(CPU_EQUAL(&after, &before));
  }
}

// By default one thread per CPU the process started on, whatever the creating thread's binding.
TEST(PoolTest, DefaultsToOneThreadPerStartCpu) {
  const cpu_set_t all = ThreadAffinity();
  int last = CPU_SETSIZE - 1;
  while (!CPU_ISSET(last, &all)) --last;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(last, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  {
    auto pool = ExpertPool::Create({});
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_EQ((*pool)->threads(), CPU_COUNT(&StartCpus()));
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
}

TEST(PoolTest, EmptyJobsAndEmptyDispatchReturn) {
  auto pool = ExpertPool::Create({});
  ASSERT_TRUE(pool.ok());
  for (int i = 0; i < 1000; ++i) (*pool)->RunEmpty();
  const ExpertData d = MakeExperts(GgmlType::kQ8_0, 64, 64, 2, 5);
  std::vector<float> x(64, 1.0f), out(64, 3.0f);
  EXPECT_TRUE((*pool)->Run(d.w, {}, x.data(), 1, out.data()).ok());
  EXPECT_EQ(out, std::vector<float>(64, 3.0f));
}

// ExpertPool::thread_times: the parts of a job (kernels, waits) fit inside the threads' stays in
// it, and the stays plus the caller's join fit inside threads × the layers' wall time. Small jobs
// have no quantise-for-down items, so nothing waits in one; large jobs do.
TEST(PoolTest, ThreadTimesAddUpWithinTheLayers) {
  const ExpertData d = MakeExperts(GgmlType::kQ4_K, 512, 256, 12, 31);
  auto pool = ExpertPool::Create({.threads = 3, .backup_us = -1});
  ASSERT_TRUE(pool.ok());
  ExpertPool& p = **pool;
  auto time_layers = [&](int n_rows, int k, int layers) {
    double wall_s = 0;
    for (int layer = 0; layer < layers; ++layer) {
      const std::vector<ExpertJob> jobs = RandomJobs(n_rows, 12, k, layer + 70);
      const std::vector<float> x = RandomFloats(n_rows * d.hidden, layer + 80, 1.0f);
      std::vector<float> out(x.size(), 0.0f);
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_TRUE(p.Run(d.w, jobs, x.data(), n_rows, out.data()).ok());
      wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    p.WaitIdle();
    return wall_s;
  };
  const ExpertPool::ThreadTimes zero = p.thread_times();
  EXPECT_EQ(zero.job_ns, 0u);
  const double small_s = time_layers(2, 4, 40);  // 9 jobs: small
  const ExpertPool::ThreadTimes small = p.thread_times();
  EXPECT_GT(small.kernel_ns, 0u);
  EXPECT_EQ(small.quantise_wait_ns, 0u);
  EXPECT_LE(small.kernel_ns + small.gate_up_wait_ns + small.down_wait_ns, small.job_ns);
  // (+1 ms: a worker that sees a job only after its join enters it and leaves with nothing.)
  EXPECT_LE(static_cast<double>(small.job_ns + small.join_ns) * 1e-9, 3 * small_s + 1e-3);
  time_layers(40, 4, 10);  // 161 jobs: large, with quantise-for-down items
  const ExpertPool::ThreadTimes all = p.thread_times();
  EXPECT_GT(all.kernel_ns, small.kernel_ns);
  EXPECT_LE(all.kernel_ns + all.gate_up_wait_ns + all.quantise_wait_ns + all.down_wait_ns,
            all.job_ns);
}
// Which node's threads run an item never changes a result (pool.cc), so pools planned over 2 and 3
// synthetic NUMA nodes must match one node bit for bit, with experts homed on every node and
// shared by rows; and every node-list item is counted once, at home or away.
TEST(PoolNuma, NodeListsGiveTheSameResultsAsOneNode) {
  const ExpertData d = MakeExperts(GgmlType::kQ4_K, 512, 256, 12, 4242);
  const std::string topology = "package:3 numa:1 core:2 pu:1";
  for (int n_rows : {1, 4, 33}) {
    SCOPED_TRACE(testing::Message() << "rows " << n_rows);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(n_rows * d.hidden), n_rows + 9);
    const std::vector<ExpertJob> jobs = RandomJobs(n_rows, 12, 4, n_rows * 17 + 3);
    const std::vector<float> base = RandomFloats(x.size(), n_rows + 3000, 0.01f);
    for (int threads : {2, 4, 6}) {
      PoolOptions one_node{.threads = threads, .numa = false, .synthetic_topology = topology};
      auto single = ExpertPool::Create(one_node);
      ASSERT_TRUE(single.ok()) << single.status();
      ASSERT_EQ((*single)->nodes().size(), 1u);
      std::vector<float> want = base;
      ASSERT_TRUE((*single)->Run(d.w, jobs, x.data(), n_rows, want.data()).ok());
      (*single)->WaitIdle();  // a thread counts its last claim after the join
      const ExpertPool::ClaimCounts single_counts = (*single)->claim_counts();
      EXPECT_GT(single_counts.home, 0u);
      EXPECT_EQ(single_counts.away, 0u);  // one node: nothing is away

      PoolOptions numa{.threads = threads, .numa = true, .synthetic_topology = topology};
      auto pool = ExpertPool::Create(numa);
      ASSERT_TRUE(pool.ok()) << pool.status();
      ASSERT_EQ((*pool)->nodes().size(), std::min<size_t>(threads, 3));
      std::vector<float> got = base;
      ASSERT_TRUE((*pool)->Run(d.w, jobs, x.data(), n_rows, got.data()).ok());
      EXPECT_EQ(got, want) << threads << " threads over " << (*pool)->nodes().size() << " nodes";
      (*pool)->WaitIdle();
      const ExpertPool::ClaimCounts counts = (*pool)->claim_counts();
      EXPECT_EQ(counts.home + counts.away, single_counts.home);
    }
  }
}

TEST(PoolNuma, RefusesBadSyntheticTopologiesAndBindingOnThem) {
  EXPECT_EQ(ExpertPool::Create({.synthetic_topology = "numa:banana"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto pool =
      ExpertPool::Create({.threads = 2, .synthetic_topology = "package:2 numa:1 core:1 pu:1"});
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->nodes().size(), 2u);
  const ExpertData d = MakeExperts(GgmlType::kQ8_0, 64, 64, 2, 5);
  EXPECT_EQ((*pool)->BindWeights(d.w).status().code(), absl::StatusCode::kFailedPrecondition);
}

// On this machine: every page of the three tensors is bound, and hwloc finds them on the pool's
// nodes afterwards (a single-node host binds everything to its one node).
TEST(PoolNuma, BindWeightsPlacesEveryPageOnThePoolsNodes) {
  const ExpertData d = MakeExperts(GgmlType::kQ4_K, 1024, 512, 8, 77);
  auto pool = ExpertPool::Create({});
  ASSERT_TRUE(pool.ok());
  auto bound = (*pool)->BindWeights(d.w);
  ASSERT_TRUE(bound.ok()) << bound.status();
  const int64_t bytes = d.w.ExpertBytes() * d.n_expert;
  EXPECT_GE(*bound, bytes);
  EXPECT_LE(*bound, bytes + 6 * 4096 * static_cast<int64_t>((*pool)->nodes().size()));

  hwloc_topology_t topo = nullptr;
  ASSERT_EQ(hwloc_topology_init(&topo), 0);
  ASSERT_EQ(hwloc_topology_load(topo), 0);
  hwloc_bitmap_t pool_nodes = hwloc_bitmap_alloc(), where = hwloc_bitmap_alloc();
  for (const PoolNode& node : (*pool)->nodes()) {
    hwloc_bitmap_set(pool_nodes, static_cast<unsigned>(node.os_index));
  }
  for (const std::vector<uint8_t>* t : {&d.gate, &d.up, &d.down}) {
    ASSERT_EQ(
        hwloc_get_area_memlocation(topo, t->data(), t->size(), where, HWLOC_MEMBIND_BYNODESET), 0);
    EXPECT_FALSE(hwloc_bitmap_iszero(where));
    EXPECT_TRUE(hwloc_bitmap_isincluded(where, pool_nodes));
  }
  hwloc_bitmap_free(where);
  hwloc_bitmap_free(pool_nodes);
  hwloc_topology_destroy(topo);
}

}  // namespace
}  // namespace tandem::experts
