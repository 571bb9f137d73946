#!/usr/bin/env bash
# The embedded default: installs what is missing, builds, then generates text with the default
# backend (cuda where a GPU can run it, else the cpu backend; the notes say which) from a
# random-weight model of the Flash-Next architecture built in memory (no download).
#   tools/demo.sh                    # synth:tiny-flash-next, 48 tokens
#   TANDEM_CUDA=OFF tools/demo.sh    # skip the CUDA build even where nvcc exists
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
tandem_install_deps
tandem_build build -DTANDEM_CUDA="${TANDEM_CUDA:-AUTO}" >/dev/null
model=${TANDEM_DEMO_MODEL:-synth:tiny-flash-next}
echo "== tandem inspect $model (summary)"
./build/tools/tandem inspect "$model" | head -12
echo
echo "== tandem run -m $model (random weights: the text is noise; the statistics are real)"
./build/tools/tandem run -m "$model" --temp 0 -n 48 \
  -p "<|im_start|>user
Tell me about the sea.<|im_end|>
<|im_start|>assistant
"
