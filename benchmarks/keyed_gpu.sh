#!/bin/bash
# The registered run checks and the keyed bench context (issue 45) on a lent GPU machine, as an
# operator runs them: llama-bench and llama-fit-params built with CUDA (benchmarks/gpu_lib.sh),
# the 1.7 GB random llama, the documented config. Phases (one device call each; a warm machine
# keeps /tmp):
#   bench  a baseline, 3 unchanged runs, one with GGML_CUDA_DISABLE_GRAPHS=1 in omni_bench.env
#   more   a knob's A/B (memlock=8M, 2 pairs) and omni-host plan --prove (--top 2, 2 rounds)
# Every run's JSON report and stderr, and the store, come back in OUTDIR/keyed-PHASE.tar.gz.
# Usage: bash benchmarks/keyed_gpu.sh bench|more OUTDIR
set -u
phase=$1 final=$2 out=/tmp/keyed-$1
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
gpu_dense_bench "$out" llama-fit-params
S=/tmp/store-keyed
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
DOC='["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
bench_inventory /tmp/inv.yml "$bin" "$model" "$DOC"
run() {  # run NAME CHECK omni-host-args...: the JSON report; one line: the check's status, wall, summary
  local name=$1 check=$2 s; shift 2
  s=$(date +%s.%N)
  python3 -m omni_host "$@" -i /tmp/inv.yml gpu --report-dir $S --format json \
    > "$out/$name.json" 2> "$out/$name.err"
  python3 - "$out/$name.json" "$name" "$s" "$check" <<'PY'
import json, sys, time
try:
    doc = json.load(open(sys.argv[1]))
    r = next(r for r in doc["hosts"][0]["results"] if r["id"] == sys.argv[4])
    print(f"{sys.argv[2]} {r['status']} {time.time() - float(sys.argv[3]):.1f}s {r['summary'][:400]}")
except Exception as exc:
    print(sys.argv[2], "no report:", exc)
PY
}
if [ "$phase" = bench ]; then
  run 00-baseline perf.tokens-per-s bench
  for i in 1 2 3; do run "u$i" perf.tokens-per-s bench; done
  run c1-graphs-off perf.tokens-per-s bench -e "{\"omni_bench\": {\"llama_bench\": \"$bin\", \"model\": \"$model\", \"args\": $DOC, \"env\": {\"GGML_CUDA_DISABLE_GRAPHS\": \"1\"}}}"
else
  run k1-memlock perf.knob bench --knob memlock=8M --pairs 2
  run p1-prove perf.placement-proof plan --prove --top 2 --rounds 2
fi
python3 -m omni_host checks list | grep -E "perf\.|serve\.stability" | cut -c1-28,100- > "$out/checks-list.txt"
tar czf "$final/keyed-$phase.tar.gz" -C /tmp "keyed-$phase" store-keyed
echo "done after $(( $(date +%s) - t0 )) s"
