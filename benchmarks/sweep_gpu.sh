#!/bin/bash
# The split sweep on a lent GPU machine (issue 38; in rounds since issue 46), as an operator runs
# it: llama-bench built with CUDA from the llama-cpp-python 0.3.36 sdist's sources, the 1.7 GB
# random F16 llama, the documented config (-p 512 -n 128 -ngl 99 -fa 1), omni_gpus from the
# machine's own GPUs. Phases (one call each; the machine keeps /tmp while warm):
#   setup        build llama-bench, write the model
#   sweep N      a baseline, then N sweeps (omni-host bench --sweep-split), each report kept
# Carried in .devcarry/: whl/, llama-src.tar.gz, vocab.gguf.
# Usage: bash benchmarks/sweep_gpu.sh OUTDIR PHASE [N]
set -u
final=$1 phase=$2 out=/tmp/sweep-gpu
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
bin=$LLAMA_BIN/llama-bench dense=/tmp/dense.gguf store=/tmp/store-sweep
t0=$(date +%s)
if [ ! -x "$bin" ] || [ ! -s "$dense" ]; then
  gpu_build_start "$out" llama-bench
  random_dense "$dense" "$out/model.log"
  wait $build; echo "build exit $? after $(( $(date +%s) - t0 )) s"
fi
[ -x "$bin" ] || { tail -20 "$out/build.log"; exit 1; }
case $phase in
  setup) nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader ;;
  sweep)
    bench_inventory /tmp/sweep.yml "$bin" "$dense" '["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
    nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits | python3 -c '
import sys
print("      omni_gpus:")
for line in sys.stdin:
    name, mib = (x.strip() for x in line.split(","))
    print("        - {model: \"%s\", vram_gib: %d}" % (name.replace("NVIDIA ", ""), round(int(mib) / 1024)))
' >> /tmp/sweep.yml
    python3 -m omni_host bench -i /tmp/sweep.yml gpu --baseline --report-dir "$store" \
      --format json > "$final/baseline.json" 2> "$out/baseline.err"
    tail -2 "$out/baseline.err"
    for i in $(seq "${3:-2}"); do
      s=$(date +%s)
      python3 -m omni_host bench -i /tmp/sweep.yml gpu --sweep-split --force --report-dir "$store" \
        --format json > "$final/sweep-$i.json" 2> "$out/sweep-$i.err"
      echo "sweep $i: $(( $(date +%s) - s )) s"; tail -2 "$out/sweep-$i.err"
      python3 - "$final/sweep-$i.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["hosts"][0]["results"]:
    if r["id"] == "perf.split-sweep":
        print(r["status"], r["summary"][:1500])
PY
    done
    tar czf "$final/store.tgz" -C "$store" . ;;
esac
echo "phase $phase done after $(( $(date +%s) - t0 )) s"
