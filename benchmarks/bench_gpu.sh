#!/bin/bash
# The tokens/s Sentinel on a lent GPU machine, as an operator would run it. Carried in
# .devcarry/ (the machine reaches no registry): wheels (whl/), the llama.cpp sources the
# llama-cpp-python 0.3.36 sdist vendors (llama-src.tar.gz, without models/ and docs/) and its
# llama-spm vocab (vocab.gguf).
#   phase vmm:   build llama-bench with CUDA (sm_90), write a ~1.7 GB random-weight F16 llama,
#                record the baseline, four unchanged benches, then a competing GPU load: the
#                bench must refuse, and with --force measure it and name it;
#   phase novmm: the same sources built with GGML_CUDA_NO_VMM=ON (F-003), judged against the
#                VMM baseline, with the llamacpp.build verdict on both binaries.
# Usage: bash benchmarks/bench_gpu.sh vmm|novmm OUTDIR (everything lands in OUTDIR/PHASE.tar.gz)
set -u
phase=$1 final=$2 out=/tmp/capture-$1
mkdir -p "$out" "$final"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devcarry/whl/*.whl \
  2>/dev/null || true
export PYTHONPATH=/tmp/site:$PWD
ll=/tmp/llama.cpp
store=/tmp/omni-store
build() {  # build DIR [cmake flags...]: llama-bench with CUDA for the H100/H200 (sm_90)
  local dir=$1; shift
  [ -d "$ll/ggml" ] || { mkdir -p "$ll" && tar xzf .devcarry/llama-src.tar.gz -C "$ll"; }
  local t0=$(date +%s)
  cmake -S "$ll" -B "$ll/$dir" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DCMAKE_BUILD_TYPE=Release "$@" > "$out/$dir.log" 2>&1 &&
  cmake --build "$ll/$dir" --target llama-bench -j "$(nproc)" >> "$out/$dir.log" 2>&1
  echo "$dir: exit $? in $(( $(date +%s) - t0 )) s"
}
inventory() {  # inventory BINARY: the lent machine, its GPUs as they are, the bench as served
  local gpus
  gpus=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits |
    python3 -c 'import json,sys; print(json.dumps([{"model": l.split(",")[0].replace("NVIDIA ", "").strip(), "vram_gib": round(int(l.split(",")[1]) / 1024)} for l in sys.stdin if l.strip()]))')
  cat > /tmp/inv.yml <<YML
all:
  hosts:
    gpu:
      ansible_connection: local
      omni_gpus: $gpus
      omni_build_packages: []
      omni_swap_size_mib: 0
      omni_llamacpp_binaries: ["$1"]
      omni_bench:
        llama_bench: "$1"
        model: /tmp/model.gguf
        args: ["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]
        repetitions: 5
YML
}
bench() {  # bench NAME [omni-host bench flags]: the report as JSON, the exit code, the lines
  local name=$1; shift
  python3 -m omni_host.cli bench -i /tmp/inv.yml gpu --report-dir "$store" --format json "$@" \
    > "$out/$name.json" 2> "$out/$name.err"
  echo "$name: exit $?; $(tr '\n' ' ' < "$out/$name.err" | cut -c1-300)"
  python3 benchmarks/report_lines.py "$out/$name.json" perf.tokens-per-s llamacpp.build
}
case $phase in
vmm)
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.mem --format=csv
  build build-vmm
  t0=$(date +%s)
  python3 tests/random_llama.py .devcarry/vocab.gguf /tmp/model.gguf --embd 2048 --layers 14 \
    --ff 5632 --heads 16
  echo "model written in $(( $(date +%s) - t0 )) s"
  inventory "$ll/build-vmm/bin/llama-bench"
  "$ll/build-vmm/bin/llama-bench" -m /tmp/model.gguf -p 512 -n 128 -ngl 99 -fa 1 -r 5 -o json \
    > "$out/llama-bench-h100-vmm.json" 2> /dev/null
  bench 1-baseline
  for i in 2 3 4 5; do bench "$i-unchanged"; done
  # A competing load on the same GPU: a matrix product loop in another process.
  python3 -c 'import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 150
while time.time() < end:
    for _ in range(50): a @ a
    torch.cuda.synchronize()' &
  load=$!
  sleep 8
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$out/compute-apps-busy.csv"
  bench 6-busy
  bench 7-busy-forced --force
  kill $load; wait $load 2>/dev/null
  bench 8-after-load
  ;;
novmm)
  build build-novmm -DGGML_CUDA_NO_VMM=ON
  inventory "$ll/build-novmm/bin/llama-bench"
  "$ll/build-novmm/bin/llama-bench" -m /tmp/model.gguf -p 512 -n 128 -ngl 99 -fa 1 -r 5 -o json \
    > "$out/llama-bench-h100-novmm.json" 2> /dev/null
  bench 9-novmm
  bench 10-novmm-again
  inventory "$ll/build-vmm/bin/llama-bench"
  bench 11-vmm-again
  tar czf "$out/store.tar.gz" -C "$store" .
  ;;
esac
tar czf "$final/$phase.tar.gz" -C "$out" .
