#!/usr/bin/env bash
# Profiles single launches of the matvec lab (the codec loop alone) with Nsight Compute: stall
# reasons, instruction mix by memory space, DRAM throughput. Usage: ncu_matvec.sh DIR [SKIP...]
# where DIR holds a carried `tandem` and each SKIP counts MatVecKernel launches to pass over (the
# lab runs 21 launches per case in the order of cmd_bench_decode.cc: q8_0, q4_k, q3_k, q6_k, f32
# x 256 MiB, 11 MiB x 1, 4 rows; so 5 = q8_0 256 MiB 1 row, 89 = q4_k 256 MiB 1 row, 173 = q3_k
# 256 MiB 1 row, 257 = q6_k 256 MiB 1 row). The shared-memory wavefronts and bank conflicts are
# those of the activation loads.
set -uo pipefail
dir=$1; shift
out=${OUT:-out}
metrics='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_generic_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum'
for skip in "$@"; do
  ncu --clock-control none --kernel-name regex:MatVecKernel --launch-skip "$skip" --launch-count 1 \
    --metrics "$metrics" "$dir/tandem" bench decode --backend cuda -m synth:tiny-qwen3moe \
    --contexts 64 --steps 2 > "$out/ncu_$skip.txt" 2>&1
  echo "ncu skip=$skip rc=$?"
  grep -E "^\s+(smsp|gpu|dram|l1tex|sm__)" "$out/ncu_$skip.txt" | awk '$NF+0 > 0.05 || $0 !~ /stalled/' | sed 's/_per_issue_active.ratio//'
done
