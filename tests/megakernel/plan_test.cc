// The CUDA backend's host-side decisions, without a GPU: which models its kernels accept (errors
// name the tensor and type), the VRAM budget check (errors say how much is needed), and how rows
// split among lanes.
#include "megakernel/plan.h"

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include "megakernel/codecs.h"
#include "megakernel/smem.h"
#include "runtime/model/model.h"

namespace tandem::megakernel {
namespace {

std::unique_ptr<model::Model> Describe(const std::string& spec) {
  model::OpenOptions o;
  o.materialize = false;  // shapes and types only
  auto m = model::OpenModel(spec, o);
  EXPECT_TRUE(m.ok()) << spec << ": " << m.status();
  return m.ok() ? std::move(m).value() : nullptr;
}

TEST(PlanTest, AcceptsEveryTinyShapeAndTheBenchmarkShapes) {
  for (const char* spec : {"synth:tiny-qwen3moe", "synth:tiny-qwen3next", "synth:tiny-qwen35moe",
                           "synth:tiny-flash-next", "synth:qwen3-30b-a3b",
                           "synth:flash-next-125b", "synth:qwen35-35b-a3b"}) {
    auto m = Describe(spec);
    ASSERT_NE(m, nullptr);
    auto dims = DimsForModel(*m, 4096);
    ASSERT_TRUE(dims.ok()) << spec << ": " << dims.status();
    EXPECT_TRUE(CheckTensors(*m).ok()) << spec << ": " << CheckTensors(*m);
  }
}

TEST(PlanTest, RefusesATypeWithoutADeviceCodecNamingTheTensor) {
  auto m = Describe("synth:tiny-qwen3moe?experts=q4_0");
  ASSERT_NE(m, nullptr);
  const absl::Status s = CheckTensors(*m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("_exps.weight"), std::string::npos) << s;
  EXPECT_NE(s.message().find("q4_0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("q4_k"), std::string::npos) << "lists what it reads: " << s;
  EXPECT_NE(s.message().find("--backend cpu"), std::string::npos) << s;
}

TEST(PlanTest, BudgetErrorSaysWhatTheModelNeeds) {
  auto m = Describe("synth:flash-next-125b");
  ASSERT_NE(m, nullptr);
  auto dims = DimsForModel(*m, 4096);
  ASSERT_TRUE(dims.ok());
  const VramPlan plan = PlanVram(*m, *dims, 4096, false);
  // Every routed expert of the 125B shape is ~50 GB: far over a 24 GiB card.
  EXPECT_GT(plan.weights, uint64_t{40} << 30);
  EXPECT_GT(plan.caches, 0u);
  const absl::Status s = CheckBudget(plan, uint64_t{24} << 30, m->source(), 4096);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("needs"), std::string::npos) << s;
  EXPECT_NE(s.message().find("24.00 GiB"), std::string::npos) << s;
  EXPECT_TRUE(CheckBudget(plan, 0, m->source(), 4096).ok()) << "0 means no limit";
  EXPECT_TRUE(CheckBudget(plan, plan.total(), m->source(), 4096).ok());
}

TEST(PlanTest, CachesGrowWithContextOnlyForAttentionLayers) {
  auto m = Describe("synth:tiny-qwen3next");
  ASSERT_NE(m, nullptr);
  auto d1 = DimsForModel(*m, 256);
  auto d2 = DimsForModel(*m, 512);
  ASSERT_TRUE(d1.ok() && d2.ok());
  const VramPlan a = PlanVram(*m, *d1, 256, false), b = PlanVram(*m, *d2, 512, false);
  EXPECT_EQ(a.weights, b.weights);
  const model::HParams& hp = m->hparams();
  int attention_layers = 0;
  for (int il = 0; il < hp.n_layer; ++il) attention_layers += hp.IsRecurrentLayer(il) ? 0 : 1;
  EXPECT_EQ(b.caches - a.caches,
            uint64_t{256} * attention_layers * 2 * hp.n_head_kv * hp.head_dim * 4);
}

// --cache-type f16 halves the attention layers' KV caches and nothing else.
TEST(PlanTest, AnF16CacheHalvesTheKvCachesOnly) {
  auto m = Describe("synth:tiny-qwen3next");
  ASSERT_NE(m, nullptr);
  auto d = DimsForModel(*m, 512);
  ASSERT_TRUE(d.ok());
  const VramPlan f32 = PlanVram(*m, *d, 512, false), f16 = PlanVram(*m, *d, 512, true);
  EXPECT_EQ(f32.weights, f16.weights);
  const model::HParams& hp = m->hparams();
  int attention_layers = 0;
  for (int il = 0; il < hp.n_layer; ++il) attention_layers += hp.IsRecurrentLayer(il) ? 0 : 1;
  ASSERT_GT(attention_layers, 0);
  EXPECT_EQ(f32.caches - f16.caches,
            uint64_t{512} * attention_layers * 2 * hp.n_head_kv * hp.head_dim * 2);
}

// The DeltaNet conv and delta rule walk a head's channels and value columns 32 at a time, the rule
// splits a state column over dk / 32 lanes (a power of two) and stages a head's query and key (at
// most 512 floats each) in a warp's shared memory: other head widths are refused, and the error
// names them.
TEST(PlanTest, RefusesDeltaNetHeadsTheKernelsDoNotTake) {
  auto odd = Describe("synth:tiny-qwen3next?deltanet=2/4/48");
  ASSERT_NE(odd, nullptr);
  const auto dims = DimsForModel(*odd, 256);
  ASSERT_FALSE(dims.ok());
  EXPECT_EQ(dims.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(dims.status().message().find("DeltaNet key head dim 48"), std::string::npos)
      << dims.status();
  EXPECT_NE(dims.status().message().find("DeltaNet value head dim 48"), std::string::npos)
      << dims.status();
  auto wide = Describe("synth:tiny-qwen3next?deltanet=2/4/544");
  ASSERT_NE(wide, nullptr);
  EXPECT_FALSE(DimsForModel(*wide, 256).ok());
  auto not_pow2 = Describe("synth:tiny-qwen3next?deltanet=2/4/96");
  ASSERT_NE(not_pow2, nullptr);
  const auto dims96 = DimsForModel(*not_pow2, 256);
  ASSERT_FALSE(dims96.ok());
  EXPECT_NE(
      dims96.status().message().find("DeltaNet key head dim 96 (need 32, 64, 128, 256 or 512)"),
      std::string::npos)
      << dims96.status();
  EXPECT_EQ(dims96.status().message().find("value head dim"), std::string::npos) << dims96.status();
  auto fits = Describe("synth:tiny-qwen3next?deltanet=2/4/128");
  ASSERT_NE(fits, nullptr);
  EXPECT_TRUE(DimsForModel(*fits, 256).ok());
}

// The kernels divide item indices by these (small_div.h); a divisor that disagreed with its
// dimension would misplace items silently.
TEST(PlanTest, DimsCarryTheDivisorsOfTheirDimensions) {
  for (const char* spec : {"synth:tiny-qwen3moe", "synth:tiny-qwen3next", "synth:tiny-qwen35moe",
                           "synth:qwen3-30b-a3b", "synth:flash-next-125b"}) {
    auto m = Describe(spec);
    ASSERT_NE(m, nullptr);
    auto d = DimsForModel(*m, 512);
    ASSERT_TRUE(d.ok()) << d.status();
    const DimDivisors& v = d->divisors;
    EXPECT_EQ(v.n_head.d, d->n_head) << spec;
    EXPECT_EQ(v.n_embd.d, d->n_embd) << spec;
    EXPECT_EQ(v.n_expert_used.d, d->n_expert_used) << spec;
    if (d->ssm_n_v > 0) {
      EXPECT_EQ(v.ssm_n_k.d, d->ssm_n_k) << spec;
      EXPECT_EQ(v.ssm_n_v.d, d->ssm_n_v) << spec;
      EXPECT_EQ(v.ssm_v_per_k.d, d->ssm_n_v / d->ssm_n_k) << spec;
      EXPECT_EQ(v.conv_taps.d, d->ssm_conv_kernel - 1) << spec;
    }
    for (const SmallDivisor& s :
         {v.n_head, v.ssm_n_k, v.ssm_n_v, v.ssm_v_per_k, v.conv_taps, v.n_embd, v.n_expert_used}) {
      EXPECT_EQ(s.inv_2d, MakeSmallDivisor(s.d).inv_2d) << spec;
    }
  }
}

TEST(PlanTest, RefusesAZeroContextAndOnePastTheLongest) {
  auto m = Describe("synth:tiny-qwen3moe");
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(DimsForModel(*m, 0).ok());
  EXPECT_TRUE(DimsForModel(*m, kMaxContext).ok());
  const auto past = DimsForModel(*m, kMaxContext + 1);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("need 1 to 1048576 tokens"), std::string::npos)
      << past.status();
}

// A lane group is the smallest power of two whose lanes cover a row's slices, at most a warp;
// with lane_slices, each lane covers that many. Only Q4_K and Q5_K lanes take several slices.
// What each half of the kernels may use a block, the same for every half and variant: a GPU's
// opt-in limit less some static shared memory.
std::function<HalfSmem(int)> LimitKiB(int64_t kib) {
  return [kib](int) {
    HalfSmem h;
    h.mixer = h.moe = h.head = kib * 1024 - 2048;
    return h;
  };
}

TEST(PlanTest, StepsTakeTheRowsWhoseKernelsFitTheGpusSharedMemory) {
  auto flash = Describe("synth:flash-next-125b");
  ASSERT_NE(flash, nullptr);
  auto dims = DimsForModel(*flash, 4096);
  ASSERT_TRUE(dims.ok()) << dims.status();
  // The 8-row DeltaNet output phase keeps 8 rows of 4,096 values in fp32 and int8.
  EXPECT_EQ(SmemForRows(*dims, true, 8).mixer, ActSetBytes(8, 4096, true));
  // Compute capability 8.6 / 8.9 (99 KiB) and 8.0 (163 KiB): 4-row steps at most, and why.
  for (int64_t kib : {99, 163}) {
    const RowsFit fit = FitRows(*dims, true, LimitKiB(kib));
    EXPECT_EQ(fit.max_rows, 4) << kib << " KiB";
    EXPECT_NE(fit.why.find("the mixer kernel for 8-row steps needs 169 KiB"), std::string::npos)
        << fit.why;
  }
  const RowsFit hopper = FitRows(*dims, true, LimitKiB(227));
  EXPECT_EQ(hopper.max_rows, kMaxRows);
  EXPECT_EQ(hopper.why, "");
  // Too little for one-row steps: nothing runs, and the message says what the model needs.
  const RowsFit tiny = FitRows(*dims, true, LimitKiB(48));
  EXPECT_EQ(tiny.max_rows, 0);
  EXPECT_NE(tiny.why.find("for 1-row steps needs 64 KiB"), std::string::npos) << tiny.why;
}

TEST(LaneSplitTest, GroupsCoverARowWithTheGivenSlicesPerLane) {
  const int q4k = static_cast<int>(quant::GgmlType::kQ4_K);
  const int q3k = static_cast<int>(quant::GgmlType::kQ3_K);
  const int q8 = static_cast<int>(quant::GgmlType::kQ8_0);
  // Lanes of a row of `cols` elements with up to 2^lane_slices_log2 slices a lane.
  auto lanes = [](int type, int cols, int lane_slices_log2 = 0) {
    return 1 << RowLanesLog2(cols >> SliceShift(type), lane_slices_log2);
  };
  EXPECT_EQ(lanes(q4k, 2048), 32);     // 32 slices of 64
  EXPECT_EQ(lanes(q4k, 2048, 1), 16);  // two a lane
  EXPECT_EQ(lanes(q4k, 2048, 2), 8);   // four a lane
  EXPECT_EQ(lanes(q4k, 768), 16);      // 12 slices: 4 lanes idle
  EXPECT_EQ(lanes(q4k, 768, 2), 4);    // three a lane, every lane busy
  EXPECT_EQ(lanes(q3k, 2048), 8);      // 8 slices of 256 (whole blocks)
  EXPECT_EQ(lanes(q8, 4096), 32);      // 128 slices: at most a warp
  EXPECT_EQ(lanes(q8, 32), 1);
  EXPECT_EQ(MaxLaneSlices(q4k), 4);
  EXPECT_EQ(MaxLaneSlices(static_cast<int>(quant::GgmlType::kQ5_K)), 4);
  EXPECT_EQ(MaxLaneSlices(q3k), 1);
  EXPECT_EQ(MaxLaneSlices(q8), 1);
}

// The 8 lanes of a quarter-warp read chunk k of 8 consecutive slices (S chunks a slice) at once;
// their slots (chunk place in a 128-byte line, i.e. which 4 of the 32 banks) must all differ,
// for every slice size a codec uses and wherever in the row the group starts.
TEST(ActivationLayoutTest, EachQuarterWarpsChunksLandInDifferentBanks) {
  for (int S : {2, 4, 8, 16}) {
    for (int s0 = 0; s0 < 64; s0 += 8) {
      for (int k = 0; k < S; ++k) {
        unsigned seen = 0;
        for (int s = s0; s < s0 + 8; ++s) {
          const int c = S * s + k;
          seen |= 1u << ((static_cast<unsigned>(c) & 7u) ^ ActLineFlip(c >> 3));
        }
        EXPECT_EQ(seen, 0xffu) << "S " << S << " s0 " << s0 << " k " << k;
      }
    }
  }
  // Rows are whole lines, and a set has room to start them on a line boundary.
  EXPECT_EQ(ActRowBytes(64), 128);
  EXPECT_EQ(ActRowBytes(2048), 2048);
  EXPECT_EQ(ActRowBytes(2112), 2176);
  EXPECT_GE(ActSetBytes(3, 96, false), 112 + 3 * 128 + 2 * 16);
}

// Q3_K blocks (110 bytes) are padded to 112 on the device, each block's bytes unchanged and the
// padding zero; Q8_0 and Q6_K are tested below; the other types keep the file's layout. The VRAM
// plan counts the device bytes.
TEST(DeviceLayoutTest, PadsQ3KBlocksAndCopiesTheOtherTypes) {
  const int q3k = static_cast<int>(quant::GgmlType::kQ3_K);
  const int q4k = static_cast<int>(quant::GgmlType::kQ4_K);
  EXPECT_EQ(DeviceRowBytes(q3k, 2048), 8 * 112);
  EXPECT_EQ(DeviceRowBytes(q4k, 2048), quant::RowBytes(quant::GgmlType::kQ4_K, 2048));
  const int rows = 3, cols = 512;  // 6 blocks
  std::vector<uint8_t> file(rows * quant::RowBytes(quant::GgmlType::kQ3_K, cols));
  for (size_t i = 0; i < file.size(); ++i) file[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> dev(rows * DeviceRowBytes(q3k, cols), 0xAB);
  ToDeviceLayout(q3k, file.data(), rows, cols, dev.data());
  for (int b = 0; b < 6; ++b) {
    for (int i = 0; i < 110; ++i) ASSERT_EQ(dev[b * 112 + i], file[b * 110 + i]) << b << " " << i;
    EXPECT_EQ(dev[b * 112 + 110], 0);
    EXPECT_EQ(dev[b * 112 + 111], 0);
  }
  std::vector<uint8_t> q4(rows * quant::RowBytes(quant::GgmlType::kQ4_K, cols), 5),
      q4_dev(q4.size());
  ToDeviceLayout(q4k, q4.data(), rows, cols, q4_dev.data());
  EXPECT_EQ(q4, q4_dev);

  auto m = Describe("synth:tiny-qwen3moe?expert_ff=256&quant=experts=q3_k");
  ASSERT_NE(m, nullptr);
  auto dims = DimsForModel(*m, 256);
  ASSERT_TRUE(dims.ok());
  uint64_t file_bytes = 0, device_bytes = 0, used = 0;
  for (const format::TensorInfo& t : m->tensors()) {
    if (!UsedByForward(t, m->hparams())) continue;
    file_bytes += t.nbytes;
    device_bytes += DeviceBytes(t);
    ++used;
  }
  EXPECT_GT(device_bytes, file_bytes);  // the Q3_K expert banks grow by 2/110
  EXPECT_EQ(PlanVram(*m, *dims, 256, false).weights, device_bytes + used * kAllocationSlack);
}

// `rows` rows of `cols` elements of `type` in the device layout hold, plane after plane, the
// given {offset, bytes} field of every file block in block order, then zeros up to dev_row.
void ExpectPlanes(quant::GgmlType type, int cols, int rows,
                  std::initializer_list<std::pair<int, int>> planes) {
  const int block_bytes = quant::GetTypeInfo(type).block_bytes;
  const int nb = cols / quant::GetTypeInfo(type).block_elems;
  const int64_t file_row = quant::RowBytes(type, cols);
  const int64_t dev_row = DeviceRowBytes(static_cast<int>(type), cols);
  EXPECT_EQ(dev_row % 16, 0);
  std::vector<uint8_t> file(rows * file_row);
  for (size_t i = 0; i < file.size(); ++i) file[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> dev(rows * dev_row, 0xAB);
  ToDeviceLayout(static_cast<int>(type), file.data(), rows, cols, dev.data());
  for (int r = 0; r < rows; ++r) {
    const uint8_t* in = file.data() + r * file_row;
    const uint8_t* out = dev.data() + r * dev_row;
    for (const auto& [offset, bytes] : planes) {
      for (int b = 0; b < nb; ++b) {
        for (int i = 0; i < bytes; ++i) {
          ASSERT_EQ(out[bytes * b + i], in[block_bytes * b + offset + i])
              << "row " << r << " block " << b << " plane at " << offset;
        }
      }
      out += bytes * nb;
    }
    for (int64_t i = file_row; i < dev_row; ++i) {
      ASSERT_EQ(dev[r * dev_row + i], 0) << "row " << r << " byte " << i;
    }
  }
}

// A Q8_0 row on the device is its blocks' quants, then their scales in block order, then zeros up
// to a multiple of 16 bytes: none for rows of a multiple of 8 blocks, which keep the file's size.
TEST(DeviceLayoutTest, SplitsQ8RowsIntoQuantsThenScales) {
  const int q8 = static_cast<int>(quant::GgmlType::kQ8_0);
  EXPECT_EQ(DeviceRowBytes(q8, 2048), quant::RowBytes(quant::GgmlType::kQ8_0, 2048));
  EXPECT_EQ(DeviceRowBytes(q8, 96), 112);  // 3 blocks: 102 bytes, padded
  EXPECT_FALSE(DeviceLayoutIsFiles(q8));
  for (const int cols : {96, 512}) ExpectPlanes(quant::GgmlType::kQ8_0, cols, 3, {{2, 32}, {0, 2}});
}

// A Q6_K row on the device is every block's ql and qh (192 bytes), then every block's 16 scales,
// then every block's d, then zeros up to a multiple of 16 bytes.
TEST(DeviceLayoutTest, SplitsQ6KRowsIntoQuantsScalesAndFactors) {
  const int q6k = static_cast<int>(quant::GgmlType::kQ6_K);
  EXPECT_EQ(DeviceRowBytes(q6k, 2048), quant::RowBytes(quant::GgmlType::kQ6_K, 2048));
  EXPECT_EQ(DeviceRowBytes(q6k, 768), 640);  // 3 blocks: 630 bytes, padded
  EXPECT_FALSE(DeviceLayoutIsFiles(q6k));
  for (const int cols : {768, 2048}) {
    ExpectPlanes(quant::GgmlType::kQ6_K, cols, 2, {{0, 192}, {192, 16}, {208, 2}});
  }
}

}  // namespace
}  // namespace tandem::megakernel
