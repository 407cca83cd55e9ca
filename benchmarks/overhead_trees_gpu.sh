#!/bin/bash
# The bench's fixed cost with the real llama-bench of the documented config, this tree against
# an earlier one (extracted into .devold, carried), each omni-host run by a virtual
# environment's interpreter as a user's install runs it, beside the same llama-bench by hand,
# the three rotating round by round (benchmarks/bench_overhead.py --tree). Then the instant
# stand-in's split of the same two trees (benchmarks/profile_fixed_cost.py).
# Usage: bash benchmarks/overhead_trees_gpu.sh OUTDIR [ROUNDS]
set -u
out=$1 rounds=${2:-9}
mkdir -p "$out"
. benchmarks/gpu_lib.sh
gpu_trees
gpu_dense_bench /tmp
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
bench_inventory /tmp/inv.yml "$bin" "$model" '["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
/tmp/venv/bin/python benchmarks/bench_overhead.py "$bin" "$model" /tmp/inv.yml "$out" \
  --pairs "$rounds" --tree . --tree .devold
python3 benchmarks/stored_verdicts.py /tmp/store-overhead-0 /tmp/store-overhead-1 > "$out/verdicts.txt"
grep -c '"first": {}' "$out/verdicts.txt"; grep -v '"first": {}' "$out/verdicts.txt" | cut -c1-600
/tmp/venv/bin/python benchmarks/profile_fixed_cost.py --out "$out/split" --runs 9 --tree . --tree .devold \
  | tr -d '\n ' ; echo
rm -f "$out/split/bench.prof" "$out/split/importtime.txt"
echo "done after $(( $(date +%s) - t0 )) s"
