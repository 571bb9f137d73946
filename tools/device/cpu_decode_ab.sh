#!/usr/bin/env bash
# The cpu backend's decode on the device host. First `tandem run` of each model with each build,
# alternating (reversed on every second pass) so that the host's noise falls on every build alike;
# builds older than `tandem bench decode --backend cpu` can only be timed this way. Then `tandem
# bench decode --backend cpu` (decode against the host's stream bandwidth) with the last build.
# Each build is a folder holding `tandem` (built on the CPU VM):
#   MODELS="synth:qwen3-30b-a3b" BENCH_MODELS="synth:qwen3-30b-a3b synth:flash-next-125b" \
#     REPEAT=2 OUT=$OUT bash tools/device/cpu_decode_ab.sh /tmp/v/old /tmp/v/new
# Prints each run's decode tok/s and load time, and the bench's lines. Logs and JSON to $OUT.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
models=${MODELS:-synth:qwen3-30b-a3b}
bench_models=${BENCH_MODELS:-$models}
source "$(dirname "$0")/pass_order.sh"
for pass in $(seq "${REPEAT:-1}"); do
  mapfile -t order < <(pass_order "$pass" "$@")
  for m in $models; do
    for dir in "${order[@]}"; do
      v=$(basename "$dir")
      log="$out/run_${v}_${m#synth:}_$pass.log"
      "$dir/tandem" run -m "$m" --backend cpu -n "${TOKENS:-48}" -p "The quick brown fox" \
        --temp 0 --ignore-eos > "$log" 2>&1
      echo "$v ${m#synth:} pass $pass rc=$?: $(grep -oE 'load [0-9.]+ s|decode [0-9.]+ tok/s' "$log" | tr '\n' ' ')"
    done
  done
done
last="${!#}"
args=()
for m in $bench_models; do args+=(-m "$m"); done
"$last/tandem" bench decode --backend cpu "${args[@]}" --json "$out/bench_decode_cpu.json" \
  > "$out/bench_decode_cpu.log" 2>&1
echo "bench decode --backend cpu rc=$?"
grep -E "^stream|ctx|^summary" "$out/bench_decode_cpu.log"
