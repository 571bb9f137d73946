// Device codecs: every format the CUDA kernels read, 1..8 rows, against an fp64 product of the
// host-decoded weights (runtime/quant) on fresh random inputs, outputs poisoned first. Quantised
// weights see int8 activations (blocks of 32), so their bound is looser than the float formats'.
// The tall shapes give the kernel lab's grid (264 blocks) enough rows that Q4_K and Q5_K lanes take
// two (5,000 x 2,048) and four (8,448 x 2,048; 16,900 x 768, three slices a lane) slices of a row
// (SplitRows in megakernel/device/matvec.cuh).
// GPU suite: skips with a message where no CUDA device is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "megakernel/codecs.h"
#include "megakernel/launch.h"
#include "megakernel/runner.h"
#include "runtime/quant/codec.h"
#include "runtime/quant/float16.h"

namespace tandem::megakernel {
namespace {

using quant::GgmlType;

struct Case {
  GgmlType type;
  double bound;  // normalised error ‖got − want‖ / ‖want‖
};

// Float formats multiply in fp32; quantised ones quantise activations to int8 per 32 values
// (relative error about 1/254 per value, averaging down over a row).
const Case kCases[] = {
    {GgmlType::kF32, 1e-5},  {GgmlType::kF16, 1e-5},  {GgmlType::kBF16, 1e-5},
    {GgmlType::kQ8_0, 0.01}, {GgmlType::kQ4_K, 0.01}, {GgmlType::kQ5_K, 0.01},
    {GgmlType::kQ6_K, 0.01}, {GgmlType::kQ3_K, 0.01}, {GgmlType::kIQ4_XS, 0.01},
};

class DeviceCodecTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (const std::string why = CudaUnavailableReason(); !why.empty()) {
      GTEST_SKIP() << "GPU test skipped: " << why;
    }
  }
};

TEST_P(DeviceCodecTest, MatVecMatchesFp64OfDecodedWeights) {
  const Case c = GetParam();
  std::mt19937 rng(7 + static_cast<int>(c.type));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{
           {96, 512}, {33, 768}, {5, 2048}, {5000, 2048}, {8448, 2048}, {16900, 768}}) {
    const int64_t row_bytes = quant::RowBytes(c.type, cols);
    std::vector<uint8_t> w(static_cast<size_t>(rows) * row_bytes);
    if (c.type == GgmlType::kF32 || c.type == GgmlType::kF16 || c.type == GgmlType::kBF16) {
      std::vector<float> f(cols);
      for (int r = 0; r < rows; ++r) {
        for (float& v : f) v = normal(rng);
        quant::QuantizeRow(c.type, f.data(), w.data() + r * row_bytes, cols);
      }
    } else {
      const int64_t blocks = static_cast<int64_t>(rows) * cols / quant::GetTypeInfo(c.type).block_elems;
      quant::RandomizeBlocks(c.type, rng(), 1.0f, w.data(), blocks);
    }
    std::vector<float> decoded(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r) {
      quant::DequantizeRow(c.type, w.data() + r * row_bytes, decoded.data() + static_cast<size_t>(r) * cols, cols);
    }
    for (int n : {1, 2, 3, 5, 8}) {
      std::vector<float> x(static_cast<size_t>(n) * cols);
      for (float& v : x) v = normal(rng);
      uint8_t* dw = nullptr;
      float *dx = nullptr, *dout = nullptr;
      // The device layout (DeviceRowBytes: Q3_K blocks padded to 112 bytes), as the runner uploads.
      const int64_t dev_row_bytes = DeviceRowBytes(static_cast<int>(c.type), cols);
      std::vector<uint8_t> dev_w(static_cast<size_t>(rows) * dev_row_bytes);
      ToDeviceLayout(static_cast<int>(c.type), w.data(), rows, cols, dev_w.data());
      ASSERT_EQ(cudaMalloc(&dw, dev_w.size() + 64), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dout, static_cast<size_t>(n) * rows * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dw, dev_w.data(), dev_w.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(dout, 0xff, static_cast<size_t>(n) * rows * 4), cudaSuccess);  // NaN
      Matrix m;
      m.data = dw;
      m.type = static_cast<int32_t>(c.type);
      m.rows = rows;
      m.cols = cols;
      m.row_bytes = dev_row_bytes;
      ASSERT_EQ(LaunchMatVec(m, dx, n, dout, nullptr), cudaSuccess);
      std::vector<float> got(static_cast<size_t>(n) * rows);
      ASSERT_EQ(cudaMemcpy(got.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      cudaFree(dw);
      cudaFree(dx);
      cudaFree(dout);
      double err = 0, ref = 0;
      for (int r = 0; r < n; ++r) {
        for (int i = 0; i < rows; ++i) {
          double want = 0;
          for (int j = 0; j < cols; ++j) {
            want += static_cast<double>(decoded[static_cast<size_t>(i) * cols + j]) * x[static_cast<size_t>(r) * cols + j];
          }
          const float g = got[static_cast<size_t>(r) * rows + i];
          ASSERT_TRUE(std::isfinite(g)) << "row " << r << " output " << i << " not written";
          err += (g - want) * (g - want);
          ref += want * want;
        }
      }
      const double normalised = std::sqrt(err / ref);
      EXPECT_LT(normalised, c.bound) << quant::GetTypeInfo(c.type).name << " rows " << rows
                                     << " cols " << cols << " n " << n;
      RecordProperty(std::string(quant::GetTypeInfo(c.type).name) + "_" + std::to_string(cols) +
                         "_n" + std::to_string(n),
                     std::to_string(normalised));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, DeviceCodecTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           return std::string(quant::GetTypeInfo(info.param.type).name);
                         });

}  // namespace
}  // namespace tandem::megakernel
