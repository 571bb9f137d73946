#!/usr/bin/env bash
# One device-machine call for the CUDA backend: build for this GPU, run the GPU suites, optionally
# under compute-sanitizer, optionally the decode benchmark. Through the device tool, with `.deps`
# carried:
#   eval "$(bash .deps/unpack-debs.sh)" && STAGES="test bench" bash tools/device/megakernel.sh
# STAGES: any of build (always), test, sanitize, alltests, bench. Logs and JSON go to $OUT.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
stages=" ${STAGES:-test} "
{
  date -u; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
} > "$out/machine.txt" 2>&1
t0=$(date +%s)
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
  -DTANDEM_CUDA=ON -DTANDEM_BUILD_BENCH=OFF > "$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
targets="tandem megakernel_test quant_device_test"
[[ $stages == " profile " ]] && targets=tandem
[[ $stages == *" alltests "* ]] && targets=all
cmake --build build-dev -j"$(nproc)" --target $targets > "$out/build.log" 2>&1 || { grep -m10 -B2 -A10 "error" "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
if [[ $stages == *" test "* ]]; then
  ./build-dev/tests/megakernel/megakernel_test > "$out/megakernel_test.log" 2>&1
  echo "megakernel_test rc=$?"; grep -E "^\[(fixture|tiny|  FAILED|  PASSED)|^\[[a-z-]+ (q8_0|f32)\]|greedy:|verify B=4|FAILED|Failure|error" "$out/megakernel_test.log" | head -60
  ./build-dev/tests/quant/quant_device_test > "$out/quant_device_test.log" 2>&1; echo "quant_device_test rc=$?"
fi
if [[ $stages == *" alltests "* ]]; then
  ctest --test-dir build-dev -j8 --output-on-failure > "$out/ctest_all.log" 2>&1; tail -4 "$out/ctest_all.log"
fi
if [[ $stages == *" sanitize "* ]]; then
  filter=${SANITIZE_FILTER:-"Synth/TinyShapeTest.F32LogitsMatchReference/tiny_qwen3next:CudaRunnerTest.DeltaNetRollbackRestoresTheExactState:AllFormats/DeviceCodecTest.*/q4_k"}
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 ./build-dev/tests/megakernel/megakernel_test \
      --gtest_filter="$filter" > "$out/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool rc=$? $(grep -m1 'ERROR SUMMARY' "$out/sanitizer_$tool.log")"
  done
fi
if [[ $stages == *" profile "* ]]; then
  # Per-phase mode, one decode step: each kernel is one phase, in launch order.
  ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
    --launch-skip ${PROFILE_SKIP:-1400} --launch-count ${PROFILE_COUNT:-436} --csv \
    ./build-dev/tools/tandem run -m ${PROFILE_MODEL:-synth:qwen3-30b-a3b} --backend cuda --kernels per-phase \
    --no-cuda-graphs -p "hi" -n 6 --temp 0 > "$out/profile.csv" 2> "$out/profile.err"
  echo "profile rc=$? lines $(wc -l < "$out/profile.csv")"; tail -3 "$out/profile.err"
fi
if [[ $stages == *" bench "* ]]; then
  nvidia-smi -q -d PERFORMANCE > "$out/perf_state.txt" 2>&1
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -lms 500 > "$out/clocks.csv" 2>&1 &
  smi=$!
  ./build-dev/tools/tandem bench decode --backend cuda ${BENCH_ARGS:-} --json "$out/decode.json" > "$out/bench_decode.log" 2>&1
  echo "bench rc=$?"; kill $smi 2>/dev/null; grep -v "^loading" "$out/bench_decode.log" | tail -12
  echo "SM clock (MHz) during the bench: $(awk -F', ' 'NR>1{print $2}' "$out/clocks.csv" | sort | uniq -c | sort -rn | head -5 | tr '\n' ' ')"
fi
echo "total: $(( $(date +%s) - t0 )) s"
