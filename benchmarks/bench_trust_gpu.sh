#!/bin/bash
# The trustworthy tokens/s verdict on a lent GPU machine (issue 32), as an operator runs it, in
# one call: llama-bench built with CUDA from the llama-cpp-python 0.3.36 sdist's sources, a
# 1.7 GB random-weight F16 llama, the documented config (-p 512 -n 128 -ngl 99 -fa 1 -r 5).
# Carried in .devcarry/ (the machine reaches no registry): whl/, llama-src.tar.gz, vocab.gguf.
#   overhead: omni-host bench against the same llama-bench by hand, interleaved, 7 pairs;
#   series:   baseline, unchanged runs, a competing GPU load started after the gate, the gate
#             refusing under load, --force under load, --baseline refused under load, after;
#   offload:  partial offload (-ngl 7 of 14 layers), then the CPUs allowed narrowed to 2.
# Usage: bash benchmarks/bench_trust_gpu.sh OUTDIR   (everything lands in OUTDIR/trust.tar.gz)
set -u
final=$1 out=/tmp/trust
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
bin=$LLAMA_BIN/llama-bench model=/tmp/model.gguf
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.mem --format=csv
t0=$(date +%s)
gpu_build_start "$out" llama-bench
random_dense "$model" "$out/model.log"
wait $build; echo "build exit $? after $(( $(date +%s) - t0 )) s; $(ls -la $bin 2>&1)"
[ -x "$bin" ] || { tail -20 "$out/build.log"; exit 1; }

DOC='["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
bench_inventory /tmp/inv.yml "$bin" "$model" "$DOC"
bench_inventory /tmp/inv-offload.yml "$bin" "$model" '["-p", "512", "-n", "128", "-ngl", "7", "-fa", "1", "-t", "16"]'
bench() {  # bench NAME INVENTORY STORE [flags]: JSON report, exit code and its lines
  local name=$1 inv=$2 store=$3; shift 3
  python3 -m omni_host bench -i "$inv" gpu --report-dir "$store" --format json "$@" \
    > "$out/$name.json" 2> "$out/$name.err"
  echo "== $name: exit $?; $(grep -v '^omni-host: bench stored' "$out/$name.err" | tr '\n' ' ' | cut -c1-400)"
  python3 benchmarks/report_lines.py "$out/$name.json" perf.tokens-per-s
}

# -- overhead: interleaved pairs, medians ------------------------------------------------------
python3 benchmarks/bench_overhead.py "$bin" "$model" /tmp/inv.yml "$out"
# -- the series -------------------------------------------------------------------------------
S=/tmp/store
bench 01-baseline /tmp/inv.yml $S
for i in 02 03 04; do bench "$i-unchanged" /tmp/inv.yml $S; done
cat > /tmp/load.py <<'PY'
import os, sys, time
import torch
trigger = sys.argv[1]
while trigger != "now" and not os.path.exists(trigger):
    time.sleep(0.01)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
PY
rm -f /tmp/go
python3 /tmp/load.py /tmp/go 40 & load=$!  # torch imported, no CUDA context yet: the gate sees none
( for _ in $(seq 1 3000); do pgrep -f "[-]-llama-bench" >/dev/null && { sleep 0.3; touch /tmp/go; break; }; sleep 0.01; done ) &
# the same test, 30 repetitions (not part of what is compared): long enough for the load to land
LONG="{\"omni_bench\": {\"llama_bench\": \"$bin\", \"model\": \"$model\", \"repetitions\": 30, \"args\": $DOC}}"
bench 05-load-after-gate /tmp/inv.yml $S -e "$LONG"
wait $load
python3 /tmp/load.py now 60 & load=$!
sleep 6
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$out/compute-apps.csv"
bench 06-busy-refused /tmp/inv.yml $S
bench 07-busy-forced /tmp/inv.yml $S --force
bench 08-baseline-forced-refused /tmp/inv.yml $S --force --baseline
kill $load; wait $load 2>/dev/null
sleep 2
bench 09-after-load /tmp/inv.yml $S

# -- partial offload, then fewer CPUs ---------------------------------------------------------
S2=/tmp/store-offload
bench 10-offload-baseline /tmp/inv-offload.yml $S2
bench 11-offload-unchanged /tmp/inv-offload.yml $S2
taskset -c 0,1 bash -c "$(declare -f bench); out=$out; bench 12-offload-2cpus /tmp/inv-offload.yml $S2"
python3 benchmarks/bench_fixed_cost.py --runs 5 --profile --out "$out" 2>&1 | head -3
echo "all done after $(( $(date +%s) - t0 )) s"
tar czf "$out/stores.tar.gz" -C /tmp store store-offload store-overhead 2>/dev/null
tar czf "$final/trust.tar.gz" -C "$out" --exclude=stores.tar.gz . && cp "$out/stores.tar.gz" "$final/"
ls -la "$final"
