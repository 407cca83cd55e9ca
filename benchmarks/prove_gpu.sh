#!/bin/bash
# plan --prove cells on a lent GPU machine in one background run (issue 66): a lent machine goes
# back after 30 s idle, so setup, the host's bench and every cell run in one script that two or
# more device calls wait for (gpu_background). Each cell is BUDGET:DEPTH (the ballast leaves
# BUDGET GiB free; the served context is twice the depth, at least 8192); a cell is started only
# while LIMIT seconds (default 1150) have not passed since the start.
# Usage: CELLS="16:0 16:4096" bash benchmarks/prove_gpu.sh OUTDIR [wait]
set -u
. benchmarks/gpu_lib.sh
gpu_background prove-gpu "$1" "${2:-}"
t0=$(date +%s)
step() { echo "== $* at $(( $(date +%s) - t0 )) s"; }
step setup
bash benchmarks/plan_gpu.sh "$out/cells" setup 2>&1 | tail -4
step bench
bash benchmarks/plan_gpu.sh "$out/cells" bench 2>&1 | tail -4
for cell in ${CELLS:-16:0 16:4096 24:0}; do
  budget=${cell%%:*} depth=${cell##*:}
  if [ $(( $(date +%s) - t0 )) -gt "${LIMIT:-1150}" ]; then step "skipped $cell (time)"; continue; fi
  ctx=$(( depth * 2 > 8192 ? depth * 2 : 8192 ))
  step "cell $budget GiB, depth $depth, ctx $ctx"
  CTX=$ctx bash benchmarks/plan_gpu.sh "$out/cells" plan "$budget" "$depth" --prove --top 2 \
    --rounds 4 2>&1 | grep -v '^$' | tail -30
done
cp /tmp/plan-gpu/*.err "$out/cells/" 2>/dev/null
step done
touch "$out/done"
