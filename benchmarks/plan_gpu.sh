#!/bin/bash
# omni-host plan and plan --prove on a lent GPU machine (issue 46), as an operator runs them: a
# random 23 GB mixture of experts (28 layers, 32 experts, 4 used) and a ballast process holding
# GPU memory so that BUDGET GiB stay free. Phases (one call each; the machine keeps /tmp while
# warm, and a fresh machine builds again):
#   setup                      build llama-bench, llama-fit-params and llama-server, write
#                              the model
#   bench                      the host's bench at a 40 GiB budget (every expert on the GPU, and
#                              every expert on the CPU): what this host reaches of its ceiling
#                              and the rate its CPU reads weights at (the plan's efficiencies)
#   plan BUDGET DEPTH ARGS...  omni-host plan (ARGS: --prove --top N --rounds N ...); BUDGET is
#                              one GiB figure per GPU, joined by '_' (12_4: GPU0 keeps 12 GiB
#                              free, GPU1 4, the 96+32 GB box's 3:1)
#   pack                       the built binaries, stripped and xz'd in 15 MiB pieces, to OUTDIR
# CURRENT (the operator's args, default '"-ngl", "10"'), CTX (the served context, default 8192)
# and VISIBLE (CUDA_VISIBLE_DEVICES of the bench, for one GPU of several) come from the
# environment. --prove loads each candidate as the build's llama-server first (issue 66).
# Reports (JSON) and stderr in OUTDIR.
# Usage: bash benchmarks/plan_gpu.sh OUTDIR PHASE [...]
set -u
final=$1 phase=$2 out=/tmp/plan-gpu
shift 2
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
bin=$LLAMA_BIN/llama-bench model=/tmp/moe.gguf store=/tmp/store-plan
t0=$(date +%s)
if [ ! -x "$bin" ] || [ ! -x "$LLAMA_BIN/llama-fit-params" ] || [ ! -x "$LLAMA_BIN/llama-server" ] \
    || [ ! -s "$model" ]; then
  gpu_build_start "$out" llama-bench llama-fit-params llama-server
  random_moe "$model" "$out/model.log" &
  writer=$!
  wait $build; echo "build exit $? after $(( $(date +%s) - t0 )) s"
  wait $writer; echo "model: $(tail -1 "$out/model.log") after $(( $(date +%s) - t0 )) s"
fi
[ -x "$bin" ] || { tail -20 "$out/build.log"; exit 1; }
ballast() {  # ballast GIB[_GIB...]: a ballast process on each GPU holds its memory but GIB
  pkill -f benchmarks/ballast.py; sleep 1
  local i=0
  for gib in ${1//_/ }; do
    CUDA_DEVICE_ORDER=PCI_BUS_ID python3 benchmarks/ballast.py "$gib" "$i" > "$out/ballast$i.log" 2>&1 &
    for _ in $(seq 60); do grep -q ballast: "$out/ballast$i.log" && break; sleep 0.5; done
    echo "GPU$i $(cat "$out/ballast$i.log")"
    i=$((i + 1))
  done
}
env_json() {  # the bench's environment: CUDA_VISIBLE_DEVICES where VISIBLE is set
  [ -n "${VISIBLE:-}" ] && echo "{\"CUDA_VISIBLE_DEVICES\": \"$VISIBLE\", \"CUDA_DEVICE_ORDER\": \"PCI_BUS_ID\"}" || echo "{}"
}
summary() {  # summary FILE: each placement result's status and summary
  python3 - "$1" <<'PY'
import json, sys
try:
    for r in json.load(open(sys.argv[1]))["hosts"][0]["results"]:
        if r["id"].startswith("perf."):
            print(r["id"], r["status"], r["summary"][:900])
except Exception as exc:
    print(sys.argv[1], "no report:", exc)
PY
}
case $phase in
  setup) ;;
  bench)
    ballast 40
    bench_inventory /tmp/bench.yml "$bin" "$model" \
      '["-p", "0", "-n", "64", "-fa", "1", "-ngl", "99", "-ncmoe", "0,28"]' "$(env_json)"
    python3 -m omni_host bench -i /tmp/bench.yml gpu --baseline --force --report-dir "$store" \
      --format json > "$out/bench.json" 2> "$out/bench.err"
    tail -3 "$out/bench.err"; summary "$out/bench.json"
    cp "$out/bench.json" "$final/" ;;
  plan)
    budget=$1 depth=$2
    shift 2
    ballast "$budget"
    bench_inventory /tmp/plan.yml "$bin" "$model" \
      "[\"-p\", \"0\", \"-n\", \"64\", \"-fa\", \"1\", ${CURRENT:-\"-ngl\", \"10\"}]" "$(env_json)"
    sed -i 's/repetitions: 5/repetitions: 3/' /tmp/plan.yml
    name=plan-$budget-$depth${1:+-${1#--}}
    python3 -m omni_host plan -i /tmp/plan.yml gpu --ctx "${CTX:-8192}" --depth "$depth" --force \
      --report-dir "$store" "$@" > "$out/$name.txt" 2> "$out/$name.err"
    python3 -m omni_host report show latest --report-dir "$store" --format json \
      > "$out/$name.json" 2>> "$out/$name.err"
    tail -3 "$out/$name.err"; sed -n '/Placement plan/,$p' "$out/$name.txt" | head -80
    summary "$out/$name.json"
    cp "$out/$name.txt" "$out/$name.json" "$out/$name.err" "$final/" ;;
  pack)
    strip "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/llama-fit-params"
    ls -l "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/llama-fit-params"
    tar cf - -C "$LLAMA_BIN" llama-bench llama-fit-params | xz -T0 -6 | split -b 15M - "$final/cuda-bin.tar.xz."
    ls -l "$final"/cuda-bin.tar.xz.* ;;
esac
pkill -f benchmarks/ballast.py
echo "phase $phase done after $(( $(date +%s) - t0 )) s"
