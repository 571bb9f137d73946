#!/usr/bin/env bash
# A/B of `tandem bench experts` builds on the device host, alternating so that the host's noise
# falls on every variant alike, in reverse order on every second pass: on 2026-11-30 the build that
# ran second in a pass was slower by ~10% whichever it was (docs/perf/experts.md, session 15).
# Each variant is a folder holding `tandem` (built on the CPU VM):
#   REPEAT=3 OUT=$OUT bash tools/device/experts_ab.sh /tmp/v/main /tmp/v/next
# Prints, per run, the 10-expert and top-8 lines, the summary and the CPU steal ticks during the
# run (/proc/stat: time the hypervisor ran something else on our CPUs). JSON to $OUT. ARGS adds
# bench flags to every run (e.g. ARGS="--cpu-backup-us -1").
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
steal() { awk '/^cpu / {print $9}' /proc/stat; }
source "$(dirname "$0")/pass_order.sh"
for pass in $(seq "${REPEAT:-1}"); do
  mapfile -t order < <(pass_order "$pass" "$@")
  for dir in "${order[@]}"; do
    v=$(basename "$dir")
    s0=$(steal)
    # shellcheck disable=SC2086
    "$dir/tandem" bench experts ${ARGS:-} --json "$out/${v}_experts_$pass.json" \
      > "$out/${v}_experts_$pass.log" 2>&1
    rc=$?
    echo "$v pass $pass rc=$rc steal_ticks=$(( $(steal) - s0 ))"
    grep -E "experts 10 rows 1|top-8|^empty|^summary" "$out/${v}_experts_$pass.log" | sed "s/^/  /"
  done
done
