#!/usr/bin/env bash
# Times every operation of one per-op decode step (`--kernels per-op`: one ordinary launch per
# operation, megakernel/ops.h) with Nsight Compute, one launch at a time, and prints the mean
# time of each operation over the layers that run it. Usage: ncu_ops.sh DIR where DIR holds a
# carried `tandem`. MODEL (default synth:qwen3-30b-a3b) picks the model; CACHE=all flushes the
# caches before each launch (default none: each launch finds what the one before it left, closer
# to graph replay). Writes $OUT/ops.csv (the raw ncu rows) and $OUT/ops.txt (the table).
set -uo pipefail
dir=$1
out=${OUT:-out}
model=${MODEL:-synth:qwen3-30b-a3b}
mkdir -p "$out"
# The launches of one decode step, from the runner's own count (the bench prints it).
launches=$("$dir/tandem" bench decode --backend cuda -m "$model" --contexts 64 --steps 2 2>/dev/null |
  sed -n 's/.*per-op .*(x[0-9.]*, \([0-9]*\) launches).*/\1/p' | head -1)
if [[ -z $launches ]]; then
  echo "could not read the per-op launch count from tandem bench decode" >&2
  exit 1
fi
# `tandem run` with a one-token prompt: one prefill step, then decode steps; skip the first two
# steps (module loading, first touches) and time the third.
ncu --clock-control none --cache-control "${CACHE:-none}" --metrics gpu__time_duration.sum \
  --launch-skip $((2 * launches)) --launch-count "$launches" --csv \
  "$dir/tandem" run -m "$model" --backend cuda --kernels per-op --no-cuda-graphs -p "hi" -n 4 \
  --temp 0 > "$out/ops.csv" 2> "$out/ops.err"
echo "ncu rc=$? rows $(grep -c gpu__time_duration "$out/ops.csv") of $launches launches"
python3 - "$out/ops.csv" "$launches" <<'PY' | tee "$out/ops.txt"
import csv, collections, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
col = {name: i for i, name in enumerate(head)}
body = [r for r in rows[1:] if r[col["Metric Name"]] == "gpu__time_duration.sum"]
# Launch order within a layer half is fixed (megakernel/ops.h); a kernel name change starts a
# new half, and position within the half names the operation.
halves = collections.defaultdict(list)  # (kernel, ops in the half) -> [[us per position], ...]
run, name = [], None
def close():
    if run:
        halves[(name, len(run))].append(run)
for r in body:
    k = r[col["Kernel Name"]].split("(")[0].split("::")[-1]
    unit = r[col["Metric Unit"]]
    v = float(r[col["Metric Value"]].replace(",", ""))
    us = v * {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[unit]
    if k != name:
        close()
        run, name = [], k
    run.append(us)
close()
total = sum(sum(x) for runs in halves.values() for x in runs)
print(f"{len(body)} launches, {total:.0f} us of kernel time in the step")
for (k, n), runs in sorted(halves.items(), key=lambda kv: -len(kv[1])):
    means = [sum(x[i] for x in runs) / len(runs) for i in range(n)]
    print(f"{k} ({n} ops, {len(runs)} launches of the half): " +
          "  ".join(f"op{i} {m:.1f}" for i, m in enumerate(means)) + f"  = {sum(means):.1f} us")
PY
