#!/bin/bash
# The hybrid ceiling against measurement on a lent GPU machine (issue 37), as an operator's
# bench runs it: llama-bench built with CUDA from the llama-cpp-python 0.3.36 sdist's sources,
# a dense random-weight F16 llama (1.7 GB, 14 layers) at -ngl 99, 11, 7 and 0, and a random
# mixture of experts (16 experts, 2 used a token, 8 layers) all on the GPU, all on the CPU, and
# with its experts on the CPU (-ot exps=CPU, the registry box's placement). Each run is a
# bundle (OUTDIR/*.bundle.tar.gz, replayed by the tests); the table of predicted and achieved
# goes to OUTDIR/ceiling.md. The machine's dmidecode and L3 domains are kept beside them.
# Carried in .devcarry/ (the machine reaches no registry): whl/, llama-src.tar.gz, vocab.gguf.
# Usage: bash benchmarks/ceiling_gpu.sh OUTDIR [build]   (build: stop after the build and the
# models, for calls limited in time; a second call skips both)
set -u
out=$1
mkdir -p "$out"
. benchmarks/gpu_lib.sh
gpu_python "$out"
bin=$LLAMA_BIN dense=/tmp/dense.gguf moe=/tmp/moe.gguf
t0=$(date +%s)
if [ ! -x "$bin/llama-bench" ]; then
  gpu_build_start "$out" llama-bench
  random_dense "$dense" "$out/model.log"
  python3 tests/random_llama.py .devcarry/vocab.gguf "$moe" --embd 2048 --layers 8 --ff 1408 \
    --heads 16 --experts 16 --experts-used 2 >> "$out/model.log" 2>&1
  wait $build; echo "build exit $? after $(( $(date +%s) - t0 )) s"
fi
[ -x "$bin/llama-bench" ] || { tail -20 "$out/build.log"; exit 1; }
[ "${2:-}" = build ] && exit 0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
dmidecode -t 4 -t 17 > "$out/dmidecode-t4-t17.txt" 2>&1; echo "dmidecode exit $?"
cat /sys/devices/system/cpu/cpu*/cache/index3/shared_cpu_list | sort -u > "$out/l3-domains.txt"
lscpu > "$out/lscpu.txt" 2>&1
cat > /tmp/ceiling.json <<JSON
[{"name": "dense-ngl", "omni_bench": {"llama_bench": "$bin/llama-bench", "model": "$dense",
  "args": ["-p", "0", "-n", "128", "-ngl", "99,11,7,0", "-fa", "1"], "repetitions": 5,
  "budget_s": 420}},
 {"name": "moe", "omni_bench": {"llama_bench": "$bin/llama-bench", "model": "$moe",
  "args": ["-p", "0", "-n", "128", "-ngl", "99,0", "-fa", "1"], "repetitions": 5, "budget_s": 240}},
 {"name": "moe-experts-on-cpu", "omni_bench": {"llama_bench": "$bin/llama-bench", "model": "$moe",
  "args": ["-p", "0", "-n", "128", "-ngl", "99", "-ot", "exps=CPU", "-fa", "1"],
  "repetitions": 5, "budget_s": 240}}]
JSON
python3 benchmarks/ceiling_gpu.py collect "$out" /tmp/ceiling.json 2> "$out/ceiling.err"
python3 benchmarks/ceiling_gpu.py table "$out" dense-ngl moe moe-experts-on-cpu > "$out/ceiling.md"
echo "ceiling exit $?"; cat "$out/ceiling.md"; tail -5 "$out/ceiling.err"
