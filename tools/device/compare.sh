#!/usr/bin/env bash
# A/B of CUDA-backend builds in one device call. Each variant is a folder holding `tandem` and,
# optionally, `megakernel_test`, built on the CPU VM (sm_90) and carried with the tree;
# tools/device/pack_variant.sh builds and packs one per git ref and says how to unpack them there:
#   run(carry=[".deps", "build-cuda/vz"],
#       command='eval "$(bash .deps/unpack-debs.sh)"; mkdir -p /tmp/v; for x in main next; do tar -C /tmp/v -xJf build-cuda/vz/$x.tar.xz; done; bash tools/device/compare.sh /tmp/v/main /tmp/v/next')
# For every variant in order: the GPU suite (when present), then `tandem bench decode` at
# context 512 on both benchmark shapes. Logs and JSON go to $OUT as <variant>_*. Set MODELS,
# CONTEXTS or STEPS to change the bench, BENCH_ARGS to add flags to it (e.g. --cache-type f16); REPEAT=2 runs the whole list twice (noise check). Only
# 8 files come back from a call, so the printed lines are the record; the JSON of the first
# variants comes back too. PHASES=1 also prints each run's phase timeline. SASS=KERNEL_REGEX (with
# variants packed by CUBIN=1 pack_variant.sh) first prints, for each variant after the first, how
# that kernel's functions differ from the first variant's (tools/device/sass_functions.py).
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
models=${MODELS:-"synth:qwen3-30b-a3b synth:flash-next-125b"}
t0=$(date +%s)
if [[ -n ${SASS:-} ]]; then
  PATH=$PATH:/usr/local/cuda/bin  # nvdisasm
  first=$1
  for dir in "${@:2}"; do
    echo "SASS of $SASS: $(basename "$first") | $(basename "$dir")"
    nvdisasm -c "$first/kernels.cubin" > "$out/a.sass" && nvdisasm -c "$dir/kernels.cubin" > "$out/b.sass" &&
      python3 "$(dirname "$0")/sass_functions.py" "$SASS" "$out/a.sass" "$out/b.sass"
    rm -f "$out/a.sass" "$out/b.sass"
  done
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$out/machine.txt" 2>&1
for pass in $(seq "${REPEAT:-1}"); do
  for dir in "$@"; do
    v=$(basename "$dir")
    if [[ $pass == 1 && -x $dir/megakernel_test ]]; then
      "$dir/megakernel_test" > "$out/${v}_test.log" 2>&1
      echo "$v test rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/${v}_test.log" | tr '\n' ' ')"
    fi
    margs=()
    for m in $models; do margs+=(-m "$m"); done
    "$dir/tandem" bench decode --backend cuda "${margs[@]}" --contexts "${CONTEXTS:-512}" \
      --steps "${STEPS:-32}" ${BENCH_ARGS:-} --json "$out/${v}_decode_$pass.json" > "$out/${v}_bench_$pass.log" 2>&1
    echo "$v bench rc=$? t=$(( $(date +%s) - t0 )) s"
    # PHASES=1 adds the per-layer phase timeline and the gap between launches (µs) under each tok/s line.
    pattern="tok/s|^matvec (q8_0|q4_k|q3_k|q6_k|f32) "
    [[ ${PHASES:-0} == 1 ]] && pattern+="|^    (attention|deltanet|moe|between) "
    grep -E "$pattern" "$out/${v}_bench_$pass.log" | sed "s/^/  /"
  done
done
