#!/usr/bin/env bash
# The command line's chain run (routing log) -> census -> plan --cache-type f16: the plan's summary
# line and plan.json name the cache type its budget counted. Usage: plan_cache_type_test.sh TANDEM
set -euo pipefail
tandem=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tandem" run -m synth:tiny-qwen3next --backend reference -p hi -n 8 \
  --routing-log "$dir/routes.log" > /dev/null
"$tandem" census "$dir/routes.log" -o "$dir/census.json" > /dev/null
"$tandem" plan --census "$dir/census.json" -m synth:tiny-qwen3next --vram-budget 1GiB \
  --cache-type f16 -o "$dir/plan.json" | tee "$dir/plan.txt"
grep -q 'tokens, f16)' "$dir/plan.txt"
grep -q '"cache_type": "f16"' "$dir/plan.json"
echo "plan.json records cache_type f16"
