#!/bin/bash
# The bench's own cost before and after a change, side by side on one lent GPU machine (issue
# 44): the tree of an earlier commit (extracted into .devcarry/old, carried) and this tree, each
# `omni-host bench` against the same llama-bench by hand (benchmarks/bench_overhead.py: the
# documented config, interleaved pairs, medians), alternating old, new, old, new; then the
# collector's CPU on the host for each tree's audit payload (benchmarks/collector_cost.py).
# Usage: bash benchmarks/overhead_ab_gpu.sh OUTDIR [PAIRS]
set -u
final=$1 pairs=${2:-5} out=/tmp/overhead-ab
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
gpu_dense_bench "$out"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
bench_inventory /tmp/inv.yml "$bin" "$model" '["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
new=$PWD old=$PWD/.devcarry/old
python3 -m compileall -q "$old/omni_host" > /dev/null 2>&1
for round in 1 2; do
  for tree in old new; do
    dir=$old; [ $tree = new ] && dir=$new
    mkdir -p "$out/$tree-$round"
    (cd "$dir" && PYTHONPATH=/tmp/site:$dir python3 "$new/benchmarks/bench_overhead.py" "$bin" \
       "$model" /tmp/inv.yml "$out/$tree-$round" --pairs "$pairs" --store "/tmp/store-$tree") | sed "s/^/$tree $round: /"
  done
done
(cd "$old" && PYTHONPATH=/tmp/site:$old python3 -m omni_host payload > /tmp/old-payload.py)
(cd "$new" && PYTHONPATH=/tmp/site:$new python3 -m omni_host payload > /tmp/new-payload.py)
python3 benchmarks/collector_cost.py "$out/cost" /tmp/old-payload.py /tmp/new-payload.py 9 \
  > "$out/cost.txt" 2>&1
cat "$out/cost.txt" | head -30
cp -r "$out"/old-* "$out"/new-* "$out/cost.txt" "$final"/ 2>/dev/null
echo "done after $(( $(date +%s) - t0 )) s"
