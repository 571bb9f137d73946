#!/usr/bin/env bash
# One device-machine call: build with CUDA for this GPU, run every test (GPU suites included),
# then the reference decode baseline. Run through the device tool with `.deps` carried:
#   eval "$(bash .deps/unpack-debs.sh)" && bash tools/device/check.sh
# Logs go to $OUT (or out/ when OUT is unset); a short table is printed last.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
arch=${CUDA_ARCH:-90}
{
  date -u; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} > "$out/machine.txt" 2>&1
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DTANDEM_CUDA=ON -DTANDEM_BUILD_BENCH=OFF > "$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
cmake --build build-dev -j"$(nproc)" > "$out/build.log" 2>&1 || { grep -m5 -A5 error "$out/build.log"; exit 1; }
ctest --test-dir build-dev -j8 --output-on-failure > "$out/ctest_all.log" 2>&1
ctest --test-dir build-dev -L gpu --output-on-failure > "$out/ctest_gpu.log" 2>&1
prompt='<|im_start|>user
Write a short story about the sea.<|im_end|>
<|im_start|>assistant
'
for threads in ${BENCH_THREADS:-16}; do
  ./build-dev/tools/tandem run -m synth:qwen3-30b-a3b --threads "$threads" --temp 0 -n 16 \
    -p "$prompt" > "$out/decode_qwen3-30b-a3b_t$threads.log" 2>&1
done
echo "== machine"; cat "$out/machine.txt"
echo "== tests"; tail -3 "$out/ctest_all.log"; grep -E "tests passed|tests failed" "$out/ctest_gpu.log"
echo "== reference decode, synth:qwen3-30b-a3b"; tail -n1 "$out"/decode_*.log
