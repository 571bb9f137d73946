// Decodes blocks of every format on the device with the same headers the host uses, and compares
// the result with the host decode bit for bit. Skips where no CUDA device is present. C++17.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/quant/blocks.h"
#include "runtime/quant/random_blocks.h"
#include "tests/quant/block_types.h"

namespace tandem::quant {
namespace {

::testing::AssertionResult CudaOk(cudaError_t status) {
  if (status == cudaSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << cudaGetErrorName(status) << ": " << cudaGetErrorString(status);
}

// Empty when a device is usable, else why not.
std::string NoDeviceReason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return cudaGetErrorString(status);
  if (count == 0) return "cudaGetDeviceCount reported 0 devices";
  return "";
}

// Device memory for n values of T, freed on scope exit.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) { status_ = cudaMalloc(&data_, n * sizeof(T)); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data() const { return data_; }
  cudaError_t status() const { return status_; }

 private:
  T* data_ = nullptr;
  cudaError_t status_;
};

template <typename Block>
__global__ void DecodeBlocksKernel(const Block* blocks, int64_t n_blocks, float* out) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b < n_blocks) DequantizeBlock(blocks[b], out + b * Block::kElems);
}

__global__ void DecodeHalfKernel(const uint16_t* values, int64_t n, bool bf16, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = bf16 ? Bf16ToF32(values[i]) : Fp16ToF32(values[i]);
}

template <typename Block>
class DeviceDecodeTest : public ::testing::Test {};
TYPED_TEST_SUITE(DeviceDecodeTest, BlockTypes, BlockTypeNames);

TYPED_TEST(DeviceDecodeTest, MatchesHostBitForBit) {
  const std::string no_device = NoDeviceReason();
  if (!no_device.empty()) GTEST_SKIP() << "no CUDA device: " << no_device;
  constexpr int64_t kBlocks = 1024;
  constexpr int kElems = TypeParam::kElems;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  // Half random bit patterns, half quantised Gaussian data (zeros, clipped extremes, small scales).
  std::vector<TypeParam> blocks(kBlocks);
  RandomizeBlocks(TypeParam::kType, seed, 1.0f, blocks.data(), kBlocks / 2);
  const std::vector<float> x = GaussianData(seed, kBlocks / 2 * kElems);
  QuantizeBlocks(x.data(), blocks.data() + kBlocks / 2, kBlocks / 2);

  std::vector<float> host(kBlocks * kElems);
  for (int64_t b = 0; b < kBlocks; ++b) DequantizeBlock(blocks[b], host.data() + b * kElems);

  DeviceArray<TypeParam> device_blocks(kBlocks);
  DeviceArray<float> device_out(kBlocks * kElems);
  ASSERT_TRUE(CudaOk(device_blocks.status()));
  ASSERT_TRUE(CudaOk(device_out.status()));
  ASSERT_TRUE(CudaOk(cudaMemcpy(device_blocks.data(), blocks.data(), kBlocks * sizeof(TypeParam),
                                cudaMemcpyHostToDevice)));
  ASSERT_TRUE(CudaOk(cudaMemset(device_out.data(), 0xFF, kBlocks * kElems * sizeof(float))));
  DecodeBlocksKernel<<<(kBlocks + 127) / 128, 128>>>(device_blocks.data(), kBlocks,
                                                     device_out.data());
  ASSERT_TRUE(CudaOk(cudaGetLastError()));
  std::vector<float> device(kBlocks * kElems);
  ASSERT_TRUE(CudaOk(cudaMemcpy(device.data(), device_out.data(), device.size() * sizeof(float),
                                cudaMemcpyDeviceToHost)));
  for (size_t i = 0; i < host.size(); ++i) {
    ASSERT_EQ(F32ToBits(device[i]), F32ToBits(host[i])) << "element " << i;
  }
}

// Every f16 and bf16 bit pattern, NaNs included.
TEST(DeviceDecode, AllHalfAndBf16Patterns) {
  const std::string no_device = NoDeviceReason();
  if (!no_device.empty()) GTEST_SKIP() << "no CUDA device: " << no_device;
  constexpr int64_t kPatterns = 65536;
  std::vector<uint16_t> patterns(kPatterns);
  for (int64_t i = 0; i < kPatterns; ++i) patterns[i] = static_cast<uint16_t>(i);
  DeviceArray<uint16_t> device_in(kPatterns);
  DeviceArray<float> device_out(kPatterns);
  ASSERT_TRUE(CudaOk(device_in.status()));
  ASSERT_TRUE(CudaOk(device_out.status()));
  ASSERT_TRUE(CudaOk(cudaMemcpy(device_in.data(), patterns.data(), kPatterns * sizeof(uint16_t),
                                cudaMemcpyHostToDevice)));
  for (const bool bf16 : {false, true}) {
    DecodeHalfKernel<<<kPatterns / 256, 256>>>(device_in.data(), kPatterns, bf16,
                                               device_out.data());
    ASSERT_TRUE(CudaOk(cudaGetLastError()));
    std::vector<float> device(kPatterns);
    ASSERT_TRUE(CudaOk(cudaMemcpy(device.data(), device_out.data(), kPatterns * sizeof(float),
                                  cudaMemcpyDeviceToHost)));
    for (int64_t i = 0; i < kPatterns; ++i) {
      const float host = bf16 ? Bf16ToF32(patterns[i]) : Fp16ToF32(patterns[i]);
      ASSERT_EQ(F32ToBits(device[i]), F32ToBits(host)) << (bf16 ? "bf16 " : "f16 ") << i;
    }
  }
}

}  // namespace
}  // namespace tandem::quant
