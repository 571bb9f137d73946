#!/usr/bin/env bash
# Builds the CUDA backend's `tandem` and `megakernel_test` at a git ref for the device machine and
# packs them as build-cuda/vz/NAME.tar.xz (xz: the carry limit is 64 MiB in all):
#   bash tools/device/pack_variant.sh NAME [REF]
# REF defaults to HEAD; another ref needs a clean checkout, which is put back on its branch after.
# CUBIN=1 also packs megakernel/kernels.cu's sm_90 cubin (about a minute more), for compare.sh's
# SASS= summary on the device machine, which has nvdisasm.
# The build is incremental in build-cuda/ (Release, sm_90 only, no micro-benchmarks; configured
# here if missing), so variants that differ in a few files build in a minute or two. On the device
# machine, with carry [".deps", "build-cuda/vz"]:
#   eval "$(bash .deps/unpack-debs.sh)"; mkdir -p /tmp/v
#   for x in A B; do tar -C /tmp/v -xJf build-cuda/vz/$x.tar.xz; done
#   bash tools/device/compare.sh /tmp/v/A /tmp/v/B
set -euo pipefail
name=${1:?usage: pack_variant.sh NAME [REF]}
cd "$(git rev-parse --show-toplevel)"
ref=${2:-HEAD}
commit=$(git rev-parse --short "$ref^{commit}")  # before any checkout moves HEAD
dirty=$([[ -n $(git status --porcelain --untracked-files=no) ]] && echo yes || true)
if [[ $ref != HEAD ]]; then
  [[ -z $dirty ]] || { echo "pack_variant: commit or stash first" >&2; exit 1; }
  back=$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)
  trap 'git checkout -q "$back"' EXIT
  git checkout -q "$commit"
fi
if [[ ! -f build-cuda/CMakeCache.txt ]]; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTANDEM_BUILD_BENCH=OFF > /dev/null
fi
log=build-cuda/pack_$name.log
if ! cmake --build build-cuda -j"$(nproc)" --target tandem megakernel_test > "$log" 2>&1; then
  tail -30 "$log" >&2
  exit 1
fi
stage=$(mktemp -d)
mkdir "$stage/$name"
cp build-cuda/tools/tandem build-cuda/tests/megakernel/megakernel_test "$stage/$name/"
if [[ ${CUBIN:-0} == 1 ]]; then
  # The build's own compiler (CMake records it outside the cache) and flags (Release, sm_90).
  nvcc=$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' build-cuda/CMakeFiles/*/CMakeCUDACompiler.cmake | head -1)
  (cd build-cuda/megakernel && "$nvcc" --options-file CMakeFiles/tandem_megakernel.dir/includes_CUDA.rsp \
    -O3 -DNDEBUG -arch=sm_90 -std=c++17 -cubin ../../megakernel/kernels.cu \
    -o "$stage/$name/kernels.cubin")
fi
mkdir -p build-cuda/vz
tar -C "$stage" -cJf "build-cuda/vz/$name.tar.xz" "$name"
rm -rf "$stage"
# HEAD with uncommitted changes is labelled so, since those changes are in the binaries too.
echo "build-cuda/vz/$name.tar.xz ($commit${dirty:+ + uncommitted changes}, $(du -h "build-cuda/vz/$name.tar.xz" | cut -f1))"
# The device tool refuses a call whose tree and carry exceed 64 MiB (a refusal, not a cost, but a
# lost turn): say so here, with the packs to move out of build-cuda/vz.
carry_mib=$(( ($(git ls-files -z | xargs -0 cat 2>/dev/null | wc -c) + $(du -sb build-cuda/vz | cut -f1) + \
  $( [[ -d .deps ]] && du -sb .deps | cut -f1 || echo 0) ) / 1048576 ))
if (( carry_mib > 60 )); then
  echo "pack_variant: tracked files + .deps + build-cuda/vz come to ${carry_mib} MiB, within 4 MiB" \
    "of the device tool's 64 MiB carry limit or over it; move packs out of build-cuda/vz first:" >&2
  ls -s --block-size=M build-cuda/vz >&2
fi
