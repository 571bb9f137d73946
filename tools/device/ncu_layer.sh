#!/usr/bin/env bash
# Profiles one decode launch of each layer half (MoeKernel<1>, MixerKernel<1, kind>) of $MODEL
# (default synth:qwen3-30b-a3b) with Nsight Compute's full set, and dumps the binary's SASS and
# resource usage. Usage: ncu_layer.sh DIR [SKIP] where DIR holds a carried `tandem`; SKIP (default
# 150) counts launches of that kernel to pass over, past the bench's warm-up. The mixer filter
# takes both layer kinds' kernels, so on a hybrid shape the profiled launch is whichever kind the
# SKIP-th mixer launch is (flash-next-125b at 150: a DeltaNet layer; the report names it). Prints, per half,
# the launch's time and stalls and the code it executed (SASS instructions with a nonzero count
# x 16 bytes: what the instruction cache must hold, docs/perf/megakernel.md). Writes to $OUT:
# <half>_details.txt (sections, then stall reasons per issued instruction),
# <half>_source.csv (per-SASS-instruction samples, when this ncu prints a source page) and
# sass.txt.xz. CACHE=none keeps Nsight Compute from flushing the caches before each replay pass
# (its default, CACHE=all): a decode launch depends on what the launches before it left in L2
# (docs/perf/megakernel.md, session 11), which a flush hides; with `none`, later passes see what
# earlier passes of the same launch left, so compare such profiles only with each other.
# HALVES (default "Moe Mixer") picks the halves to profile; TAG prefixes the output names.
set -uo pipefail
dir=$1
skip=${2:-150}
out=${OUT:-out}
mkdir -p "$out"
cuobjdump --dump-resource-usage "$dir/tandem" > "$out/resources.txt" 2>&1
cuobjdump -sass "$dir/tandem" | xz -6 > "$out/sass.txt.xz"
for half in ${HALVES:-Moe Mixer}; do
  name="$out/${TAG:-}${half}"  # every file of this half
  rep="$name.ncu-rep"
  ncu --set full --import-source no --clock-control none --cache-control "${CACHE:-all}" \
    --kernel-name-base demangled \
    --kernel-name "regex:${half}Kernel<\\(int\\)1[,>]" --launch-skip "$skip" --launch-count 1 -f -o "$name" \
    "$dir/tandem" bench decode --backend cuda -m "${MODEL:-synth:qwen3-30b-a3b}" --contexts 512 --steps 8 \
    > "${name}_run.log" 2>&1 || tail -5 "${name}_run.log"
  echo "ncu $half rc=$?"
  ncu --import "$rep" --page details > "${name}_details.txt" 2>&1
  ncu --import "$rep" --page raw | grep -E "stalled_.*_per_issue_active|inst_executed.sum |gpu__time_duration.sum|launch__grid_size|sm__warps_active" \
    >> "${name}_details.txt" 2>&1
  ncu --import "$rep" --page source --csv --print-source sass > "${name}_source.csv" 2>&1 ||
    echo "no source page"
  grep -E "Duration|Executed Ipc|Issue Slots|No Eligible|Warp Cycles Per Issued|Registers|Achieved Occupancy" \
    "${name}_details.txt" | head -20
  python3 - "${name}_source.csv" <<'PY' || true
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = rows[1]
col = {name: i for i, name in enumerate(head)}
body = [r for r in rows[2:] if len(r) == len(head)]
executed = [r for r in body if int(r[col["Instructions Executed"]] or 0) > 0]
samples = sum(int(r[col["Warp Stall Sampling (All Samples)"]] or 0) for r in body)
warp_insts = sum(int(r[col["Instructions Executed"]] or 0) for r in body)
# Every stall reason's share of the samples (session 23 read these by hand).
share = {n[len("stall_"):]: sum(int(r[col[n]] or 0) for r in body) / max(samples, 1)
         for n in head if n.startswith("stall_") and "Not Issued" not in n}
print(f"  code {len(body)} SASS instructions, {len(executed)} executed ({len(executed) * 16 / 1024:.1f} KB); "
      f"{warp_insts / 1e6:.2f} M warp instructions; no-instruction share of samples "
      f"{share['no_inst']:.3f}")
print("  stall shares: " + "  ".join(f"{n} {v:.3f}" for n, v in sorted(share.items(), key=lambda x: -x[1])[:6]))
PY
  rm -f "$rep" "${name}_run.log"
done
ls -la "$out"
