// The start and end of a step: the token-embedding gather, and the final RMSNorm + LM head with a
// greedy argmax on the device (phases: logits, per-block argmax, final argmax), so that greedy
// decoding copies one token id per row instead of the logits. C++17, device only.
#pragma once

#include "megakernel/device/matvec.cuh"
#include "runtime/quant/blocks.h"

namespace tandem::megakernel {

inline constexpr int kHeadPhases = 3;

// Element i of a row of Blocks, each kStride bytes apart on the device (types whose device layout
// keeps whole blocks: codecs.h).
template <typename Block, int kStride = sizeof(Block)>
__device__ __forceinline__ float BlockElement(const uint8_t* row, int i) {
  const Block* b = reinterpret_cast<const Block*>(row + (i / Block::kElems) * kStride);
  return quant::DequantizeElement(*b, i % Block::kElems);
}

// Element i of a row of `cols` elements of any type with a device codec (device layout).
__device__ __forceinline__ float RowElement(int type, const uint8_t* row, int i, int cols) {
  using quant::GgmlType;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: return reinterpret_cast<const float*>(row)[i];
    case GgmlType::kF16: return quant::Fp16ToF32(reinterpret_cast<const uint16_t*>(row)[i]);
    case GgmlType::kBF16: return quant::Bf16ToF32(reinterpret_cast<const uint16_t*>(row)[i]);
    case GgmlType::kQ8_0:
      return HalfBitsToFloat(Q8Scales(row, cols / 32)[i / 32]) *
             static_cast<float>(static_cast<int8_t>(Q8Quants(row, i / 32)[i % 32]));
    case GgmlType::kQ4_K: return BlockElement<quant::BlockQ4K>(row, i);
    case GgmlType::kQ5_K: return BlockElement<quant::BlockQ5K>(row, i);
    case GgmlType::kQ6_K: {
      const int b = i / 256, nb = cols / 256, e = i % 256;
      const uint8_t* q = Q6KQuants(row, b);
      const float dl = HalfBitsToFloat(Q6KFactors(row, nb)[b]) *
                       static_cast<float>(Q6KScales(row, nb, b)[e / 16]);
      return dl * static_cast<float>(quant::Q6KQuant(q, q + 128, e));
    }
    case GgmlType::kQ3_K:
      return BlockElement<quant::BlockQ3K, kQ3KDeviceBlockBytes>(row, i);
    case GgmlType::kIQ4_XS: return BlockElement<quant::BlockIQ4XS>(row, i);
    default: return 0.0f;  // refused on the host
  }
}

// x[r] = token_embd[tokens[r]] for every row.
__device__ inline void EmbedRows(const HeadArgs& A) {
  const int B = A.in->n_rows, H = A.dims.n_embd;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = tid; i < static_cast<int64_t>(B) * H; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(i / H), c = static_cast<int>(i % H);
    const uint8_t* row = A.embed.data + static_cast<int64_t>(A.in->tokens[r]) * A.embed.row_bytes;
    A.s.x[i] = RowElement(A.embed.type, row, c, H);
  }
}

template <int R>
__device__ void HeadLogits(const HeadArgs& A, uint8_t* smem) {
  const ModelDims& D = A.dims;
  const int n = A.in->n_logit_rows, H = D.n_embd;
  uint8_t* cursor = smem;
  const ActSet a = NormedActs<PrologueBatch(R)>(
      cursor, A.s.x + static_cast<int64_t>(A.in->logits_row0) * H, n, H, A.norm, D.rms_eps);
  SetJob(0, A.output, PublishActs(0, a), RowMask(n), A.s.logits, D.n_vocab);
  __syncthreads();
  RunJobs<R>(Plan().job, 1);
}

// Per block: the best (value, smallest index) of its share of each row's logits.
__device__ inline void HeadBlockArgmax(const HeadArgs& A) {
  __shared__ float best_v[kWarpsPerBlock];
  __shared__ int best_i[kWarpsPerBlock];
  const int V = A.dims.n_vocab;
  const int per_block = (V + gridDim.x - 1) / gridDim.x;
  const int v0 = blockIdx.x * per_block, v1 = min(V, v0 + per_block);
  for (int r = 0; r < A.in->n_logit_rows; ++r) {
    const float* l = A.s.logits + static_cast<int64_t>(r) * V;
    float bv = -INFINITY;
    int bi = V;
    for (int i = v0 + threadIdx.x; i < v1; i += kBlockThreads) {
      if (l[i] > bv) {
        bv = l[i];
        bi = i;
      }
    }
    WarpArgmax(&bv, &bi);
    if (Lane() == 0) {
      best_v[Warp()] = bv;
      best_i[Warp()] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarpsPerBlock; ++w) {
        if (best_v[w] > bv || (best_v[w] == bv && best_i[w] < bi)) {
          bv = best_v[w];
          bi = best_i[w];
        }
      }
      A.s.best[(static_cast<int64_t>(blockIdx.x) * kMaxRows + r) * 2] = bv;
      A.s.best[(static_cast<int64_t>(blockIdx.x) * kMaxRows + r) * 2 + 1] = __int_as_float(bi);
    }
    __syncthreads();
  }
}

__device__ inline void HeadFinalArgmax(const HeadArgs& A) {
  if (blockIdx.x != 0) return;
  for (int r = Warp(); r < A.in->n_logit_rows; r += kWarpsPerBlock) {
    float bv = -INFINITY;
    int bi = A.dims.n_vocab;
    for (int b = Lane(); b < static_cast<int>(gridDim.x); b += 32) {
      const float v = A.s.best[(static_cast<int64_t>(b) * kMaxRows + r) * 2];
      const int i = __float_as_int(A.s.best[(static_cast<int64_t>(b) * kMaxRows + r) * 2 + 1]);
      if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
      }
    }
    WarpArgmax(&bv, &bi);
    if (Lane() == 0) A.s.argmax[r] = bi;
  }
}

template <int R>
__device__ void HeadPhase(const HeadArgs& A, int phase, uint8_t* smem) {
  switch (phase) {
    case 0: HeadLogits<R>(A, smem); break;
    case 1: HeadBlockArgmax(A); break;
    case 2: HeadFinalArgmax(A); break;
  }
}

}  // namespace tandem::megakernel
