#!/usr/bin/env bash
# The test command: installs what is missing, configures, builds and runs every test.
# GPU tests (ctest label `gpu`) skip with a clear message where there is no GPU.
#   tools/test.sh                # Release build in build/
#   TANDEM_CUDA=OFF tools/test.sh   # skip the CUDA build even where nvcc exists
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
tandem_install_deps
tandem_build build -DTANDEM_CUDA="${TANDEM_CUDA:-AUTO}"
ctest --test-dir build --output-on-failure -j"$(nproc 2>/dev/null || echo 2)"
