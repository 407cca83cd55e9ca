#!/bin/bash
# The knob ledger on a lent GPU machine (issue 48): `omni-host bench --knob` of the documented
# config (-p 512 -n 128 -ngl 99 -fa 1), as an operator runs it: THP never against the host's,
# 4 threads against llama-bench's default, then 10 A/Bs whose arms are the same value (THP at
# its own value): how many recommend (goal: 0). Each JSON report in OUTDIR. PHASE (default all):
# ab (build, then THP and threads) or same (the 10 same-value A/Bs), for calls of 10 minutes;
# memlock (build, then a container's ulimit -l: 8M and unlimited against the session's own) or
# memlock-same (10 A/Bs of memlock at the session's own limit).
# Usage: bash benchmarks/knobs_gpu.sh OUTDIR [PAIRS] [PHASE]
set -u
final=$1 pairs=${2:-6} phase=${3:-all} out=/tmp/knobs-gpu
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
gpu_dense_bench "$out"
bench_inventory /tmp/inv.yml "$bin" "$model" '["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
thp=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled)
echo "THP now: $thp"
knob() {  # knob NAME KNOB [PAIRS]
  python3 -m omni_host bench -i /tmp/inv.yml gpu --knob "$2" --pairs "${3:-$pairs}" \
    --report-dir /tmp/store-knobs --format json > "$out/$1.json" 2> "$out/$1.err"
  python3 - "$out/$1.json" "$1" <<'PY'
import json, sys
try:
    r = next(r for r in json.load(open(sys.argv[1]))["hosts"][0]["results"] if r["id"] == "perf.knob")
    print(sys.argv[2], r["status"], r["summary"][:400], "| recommend:", r["details"].get("recommend"))
except Exception as exc:
    print(sys.argv[2], "no report:", exc)
PY
}
case $phase in
  memlock)
    echo "ulimit -l now: $(ulimit -l)"
    knob memlock-8M memlock=8M
    knob memlock-unlimited memlock=unlimited
    cp "$out"/*.json "$final"/
    exit 0 ;;
  memlock-same)
    own=$(ulimit -l); [ "$own" = unlimited ] || own="${own}K"
    for i in $(seq -w 1 10); do knob "memlock-same-$i" "memlock=$own"; done
    cp "$out"/memlock-same-*.json "$final"/
    exit 0 ;;
esac
if [ "$phase" != same ]; then
  knob thp-never thp=never
  echo "THP after: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
  knob threads-4 threads=4
fi
if [ "$phase" != ab ]; then
  for i in $(seq -w 1 10); do knob "same-$i" "thp=$thp"; done
fi
cp "$out"/*.json "$final"/
echo "done after $(( $(date +%s) - t0 )) s"
