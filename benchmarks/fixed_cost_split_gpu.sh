#!/bin/bash
# Where the bench's fixed cost goes on a lent GPU machine, this tree against an earlier one
# (extracted into .devold, carried), each run by a virtual environment's interpreter as a
# user's install runs it (the machine's system python3 runs .pth hooks of its CUDA packages
# on every start) and by the system python3: benchmarks/profile_fixed_cost.py for each.
# Usage: bash benchmarks/fixed_cost_split_gpu.sh OUTDIR [RUNS]
set -u
out=$1 runs=${2:-9}
mkdir -p "$out"
. benchmarks/gpu_lib.sh
gpu_python "$out"
python3 -m venv --without-pip /tmp/venv > "$out/venv.log" 2>&1 || echo "no venv: $(tail -1 "$out/venv.log")"
venv=/tmp/venv/bin/python
for py in "$venv" python3; do
  for i in 1 2 3 4 5; do /usr/bin/time -f "%e" "$py" -c pass; done 2>> "$out/start-$(basename "$(dirname "$py")")-$(basename "$py").txt"
done
python3 -m compileall -q .devold/omni_host > /dev/null 2>&1
for py in "$venv" python3; do
  tag=$( [ "$py" = python3 ] && echo sys || echo venv )
  for tree in new old; do
    dir=$PWD; [ $tree = old ] && dir=$PWD/.devold
    (cd "$dir" && PYTHONPATH=/tmp/site:$dir "$py" "$OLDPWD/benchmarks/profile_fixed_cost.py" \
       --out "$out/$tag-$tree" --runs "$runs") | sed "s/^/$tag $tree: /"
  done
done
# what comes back: each run's walls and probe durations; the profile of the venv's new tree
find "$out" -name bench.prof -not -path "*/venv-new/*" -delete
find "$out" -name importtime.txt -not -path "*/venv-new/*" -delete
rm -f "$out/pip.log" "$out/venv.log"
