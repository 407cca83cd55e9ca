#!/bin/bash
# Where the bench's fixed cost goes on a lent GPU machine, this tree against an earlier one
# (extracted into .devold, carried), interleaved (benchmarks/profile_fixed_cost.py --tree),
# run by a virtual environment's interpreter as a user's install runs it (the machine's system
# python3 may run .pth hooks of its CUDA packages on every start).
# Usage: bash benchmarks/fixed_cost_split_gpu.sh OUTDIR [RUNS]
set -u
out=$1 runs=${2:-9}
mkdir -p "$out"
. benchmarks/gpu_lib.sh
gpu_trees
for i in 1 2 3 4 5; do /usr/bin/time -f "venv %e" /tmp/venv/bin/python -c pass; /usr/bin/time -f "system %e" python3 -c pass; done 2> "$out/starts.txt"
/tmp/venv/bin/python benchmarks/profile_fixed_cost.py --out "$out" --runs "$runs" --tree . --tree .devold
