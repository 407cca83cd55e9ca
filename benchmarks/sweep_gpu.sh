#!/bin/bash
# A split-mode recording on the lent one-GPU machine (issue 38's judgement on real GPU JSON;
# the two-GPU sweep itself needs the two-GPU machine): llama-bench built with CUDA from the
# llama-cpp-python 0.3.36 sdist's sources, the 1.7 GB random F16 llama, -ngl 99 under
# -sm none,layer,row, five repetitions, JSON kept as OUTDIR/llama-bench_h100_sm-none-layer-row.json.
# Carried in .devcarry/: whl/, llama-src.tar.gz, vocab.gguf.   Usage: bash benchmarks/sweep_gpu.sh OUTDIR
set -u
out=$1
mkdir -p "$out"
. benchmarks/gpu_lib.sh
gpu_python "$out"
bin=$LLAMA_BIN dense=/tmp/dense.gguf
if [ ! -x "$bin/llama-bench" ]; then
  gpu_build_start "$out" llama-bench
  random_dense "$dense" "$out/model.log"
  wait $build
fi
[ -x "$bin/llama-bench" ] || { tail -20 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$bin/llama-bench" -m "$dense" -p 512 -n 128 -ngl 99 -fa 1 -sm none,layer,row -r 5 -o json \
  > "$out/llama-bench_h100_sm-none-layer-row.json" 2> "$out/llama-bench.err"
echo "llama-bench exit $?"
python3 - "$out/llama-bench_h100_sm-none-layer-row.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(r["split_mode"], r["n_prompt"], r["n_gen"], round(r["avg_ts"], 1), round(r["stddev_ts"], 2))
PY
