#!/bin/sh
# Issue 44/48 on a lent GPU machine: the bench helper's sampler through nvidia-smi against one
# NVML session (benchmarks/sampler_cost.py: its CPU per second watched, and tg128/pp512 watched
# each way, interleaved), then omni-host bench as an operator runs it (a baseline and 3 runs:
# the PCIe link sampled during the run shows in the evidence). Outputs under OUTDIR.
# Usage: bash benchmarks/sampler_gpu.sh OUTDIR [PAIRS]
set -u
final=$1 pairs=${2:-5} out=/tmp/sampler
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
bin=$LLAMA_BIN/llama-bench model=/tmp/model.gguf
t0=$(date +%s)
if [ ! -x "$bin" ]; then
  gpu_build_start "$out" llama-bench
  random_dense "$model" "$out/model.log"
  wait $build; echo "build exit $? after $(( $(date +%s) - t0 )) s"
fi
[ -x "$bin" ] || { tail -20 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
python3 benchmarks/sampler_cost.py "$bin" "$model" "$pairs" > "$final/sampler_cost.json" 2> "$out/sampler.err" \
  || tail -20 "$out/sampler.err"
python3 - "$final/sampler_cost.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("nvml", d["nvml"], "cost median CPU/s", d["cost"]["median_cpu_per_s"])
print("samples (sleep 8 s):", [(r["kind"], r["samples"]) for r in d["cost"]["runs"]])
print("last row", d["cost"]["runs"][-1]["row"])
print("median t/s", d["number"]["median_ts"], "nvml/smi", d["number"]["nvml_over_smi"])
print("own CPU", [(r["kind"], r["own_cpu_s"], r["duration_s"]) for r in d["number"]["runs"]])
PY
bench_inventory /tmp/inv.yml "$bin" "$model" '["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
for name in base u1 u2 u3; do
  python3 -m omni_host bench -i /tmp/inv.yml gpu --report-dir /tmp/store --format json \
    > "$final/$name.json" 2> "$final/$name.err"
  python3 - "$final/$name.json" "$name" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
r = next(r for r in doc["hosts"][0]["results"] if r["id"] == "perf.tokens-per-s")
print(sys.argv[2], r["status"], r["summary"][:400])
for ev in r.get("evidence", []):
    for line in ev.get("lines", ev.get("output", [])) if isinstance(ev, dict) else []:
        if "PCIe" in str(line):
            print("  ", line)
PY
done
tar czf "$final/store.tar.gz" -C /tmp store
