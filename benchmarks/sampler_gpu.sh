#!/bin/sh
# Issue 44/48 on a lent GPU machine: the bench helper's sampler through nvidia-smi against one
# NVML session (benchmarks/sampler_cost.py: its CPU per second watched, and tg128/pp512 watched
# each way, interleaved), then omni-host bench as an operator runs it (a baseline and 3 runs:
# the PCIe link sampled during the run shows in the evidence). Outputs under OUTDIR.
# Phase cotenant (the build kept from a first call on the same warm machine): a baseline, then
# a run with a second llama-bench started 0.4 s after omni-host bench (its CUDA context comes
# after the gate: only the run's sampler can see it), then one --force with it there first;
# and the bench's fixed cost, the tree before the NVML sampler (.devcarry/old) against this
# one (benchmarks/fixed_cost_ab.py).
# Usage: babash benchmarks/sampler_gpu.sh OUTDIR [PAIRS|cotenant]
set -u
final=$1 pairs=${2:-5} out=/tmp/sampler
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
gpu_dense_bench "$out"
nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
report() {  # report NAME: status, summary, PCIe and the other processes on the GPUs
  python3 - "$final/$1.json" "$1" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
r = next(r for r in doc["hosts"][0]["results"] if r["id"] == "perf.tokens-per-s")
print(sys.argv[2], r["status"], r["summary"][:500])
print("   disturbances:", r["details"].get("disturbances"), "changed:", r["details"].get("changed"))
for ev in r.get("evidence", []):
    for line in ev.get("lines", []):
        if "PCIe" in str(line):
            print("  ", line)
PY
}
if [ "$pairs" = cotenant ]; then
  bench_inventory /tmp/inv.yml "$bin" "$model" '["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
  LONG="{\"omni_bench\": {\"llama_bench\": \"$bin\", \"model\": \"$model\", \"repetitions\": 20, \"args\": [\"-p\", \"512\", \"-n\", \"128\", \"-ngl\", \"99\", \"-fa\", \"1\"]}}"
  S=/tmp/store-co
  python3 -m omni_host bench -i /tmp/inv.yml gpu --report-dir $S --format json > "$final/co-base.json" 2> "$final/co-base.err"
  report co-base
  # the load starts once the benched llama-bench is there (after the gate), for about 30 s
  ( while ! pgrep -f "llama-bench -m $model -o json" > /dev/null; do sleep 0.05; done
    exec "$bin" -m "$model" -p 512 -n 0 -r 4000 -ngl 99 -fa 1 > /dev/null 2>&1 ) & load=$!
  python3 -m omni_host bench -i /tmp/inv.yml gpu --report-dir $S --format json -e "$LONG" > "$final/co-late.json" 2> "$final/co-late.err"
  report co-late
  kill $load 2>/dev/null; pkill -f "r 4000" 2>/dev/null; wait $load 2>/dev/null
  "$bin" -m "$model" -p 512 -n 0 -r 4000 -ngl 99 -fa 1 > /dev/null 2>&1 & load=$!
  sleep 2
  python3 -m omni_host bench -i /tmp/inv.yml gpu --report-dir $S --format json --force > "$final/co-forced.json" 2> "$final/co-forced.err"
  report co-forced
  kill $load; wait $load 2>/dev/null
  tar czf "$final/store-co.tar.gz" -C /tmp store-co
  python3 benchmarks/fixed_cost_ab.py .devcarry/old . --runs 21 --out "$final/fixed-cost-ab.json"
  exit 0
fi
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
