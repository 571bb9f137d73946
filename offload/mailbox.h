// The GPU<->CPU meeting point of one MoE layer: a struct in pinned, mapped host memory through
// which the MoE megakernel publishes the (row, expert, weight) jobs of experts that are not on the
// card, with the normed rows they need, and waits for the CPU's partial sum. Only the layout and
// the device side exist so far: nothing on the host allocates a mailbox or serves it yet (that is
// the experts-offload work), so MoeArgs::mailbox stays null and every expert must be resident.
// C++17 (included from .cu files).
//
// Protocol, one layer of one step (sequence numbers only grow; each flag has one writer):
//   GPU (block 0):  writes jobs, n_jobs, rows; __threadfence_system(); st.release.sys posted = seq
//   CPU:            ld.acquire posted == seq; computes; writes partial; release-store done = seq
//   GPU (combine):  spins on ld.acquire.sys done == seq, then reads partial
// With every expert resident the kernel never touches the mailbox.
#pragma once

#include <cstdint>

#include "megakernel/params.h"

namespace tandem::megakernel {

inline constexpr int kMaxMailboxJobs = 256;

struct MailboxJob {
  int32_t row = 0;
  int32_t expert = 0;
  float weight = 0;
};

struct MoeMailbox {
  alignas(64) uint32_t posted = 0;  // written by the GPU
  alignas(64) uint32_t done = 0;    // written by the CPU
  int32_t layer = 0;
  int32_t n_jobs = 0;
  int32_t n_rows = 0;
  int32_t hidden = 0;
  MailboxJob jobs[kMaxMailboxJobs];
  float* rows = nullptr;     // [kMaxRows][hidden] normed activations (device view of mapped memory)
  float* partial = nullptr;  // [kMaxRows][hidden] Σ weight · expert(row), written by the CPU
};

}  // namespace tandem::megakernel
