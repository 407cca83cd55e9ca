#!/bin/bash
# The quiet Sentinel on a lent GPU machine (issue 44), as an operator runs it. Two phases, each
# one device call (the machine stays warm between them and keeps /tmp):
#   unchanged: llama-bench built with CUDA (benchmarks/gpu_lib.sh), the 1.7 GB random llama, the
#              documented config (-p 512 -n 128 -ngl 99 -fa 1 -r 5): a baseline, then 30
#              unchanged runs; partial offload (-ngl 7 -t 16): a baseline, then 5 unchanged;
#   drops:     a duty-cycled competing GPU load calibrated by hand (llama-bench alone, the load
#              off and at several duty cycles, -r 20) to cost tg128 5-6% and pp512 about 20%,
#              then 10 omni-host benches under each (-r 20), the load's CUDA context starting
#              after the idle gate (as a job that starts while the bench runs).
# Every run's JSON report and the stores (the raw bundles) come back in OUTDIR/quiet-PHASE.tar.gz:
# the verdicts are judged again offline from the bundles (tests/test_quiet_sentinel.py).
#   two:       on two GPUs, the documented config (a layer split by free memory): a baseline,
#              30 unchanged runs, then one run each with GGML_CUDA_DISABLE_GRAPHS=1,
#              CUDA_VISIBLE_DEVICES=0 and -ts 75,25 (llama-bench reads the comma as two tests).
#   overhead:  omni-host bench against the same llama-bench by hand, 7 interleaved pairs:
#              wall times and tg128 medians (overhead.json).
#   steady:    the drops' calibration, then 10 benches with the tg128 load already running
#              (started 6 s before, its CUDA context up: steady through the whole run, as a
#              job that was there first), each --force (the gate would refuse it), -r 20.
# Usage: bash benchmarks/quiet_gpu.sh unchanged|drops|steady|two|overhead OUTDIR
set -u
phase=$1 final=$2 out=/tmp/quiet-$1
mkdir -p "$out" "$final"
. benchmarks/gpu_lib.sh
gpu_python "$out"
gpu_dense_bench "$out"
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader

DOC='["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
bench_inventory /tmp/inv.yml "$bin" "$model" "$DOC"
bench_inventory /tmp/inv-offload.yml "$bin" "$model" '["-p", "512", "-n", "128", "-ngl", "7", "-fa", "1", "-t", "16"]'

if [ "$phase" = overhead ]; then  # omni-host bench against llama-bench by hand, 7 pairs
  python3 benchmarks/bench_overhead.py "$bin" "$model" /tmp/inv.yml "$out"
elif [ "$phase" = two ]; then  # the documented config over two GPUs (layer split by free memory)
  S=/tmp/store-two
  bench 00-baseline /tmp/inv.yml $S
  for i in $(seq -w 1 30); do bench "u$i" /tmp/inv.yml $S; done
  with() {  # with NAME JSON-of-omni_bench-changes: one run of the documented config, changed
    bench "$1" /tmp/inv.yml $S -e "{\"omni_bench\": {\"llama_bench\": \"$bin\", \"model\": \"$model\", \"args\": $DOC, $2}}"
  }
  with c1-graphs-off '"env": {"GGML_CUDA_DISABLE_GRAPHS": "1"}'
  with c2-visible-0 '"env": {"CUDA_VISIBLE_DEVICES": "0"}'
  bench c3-ts-comma /tmp/inv.yml $S -e "{\"omni_bench\": {\"llama_bench\": \"$bin\", \"model\": \"$model\", \"args\": [\"-p\", \"512\", \"-n\", \"128\", \"-ngl\", \"99\", \"-fa\", \"1\", \"-ts\", \"75,25\"]}}"
  tar czf "$out/stores.tar.gz" -C /tmp store-two
elif [ "$phase" = unchanged ]; then
  S=/tmp/store
  bench 00-baseline /tmp/inv.yml $S
  for i in $(seq -w 1 30); do bench "u$i" /tmp/inv.yml $S; done
  S2=/tmp/store-offload
  bench o0-baseline /tmp/inv-offload.yml $S2
  for i in 1 2 3 4 5; do bench "o$i" /tmp/inv-offload.yml $S2; done
  tar czf "$out/stores.tar.gz" -C /tmp store store-offload
else
  cp benchmarks/gpu_load.py /tmp/load.py  # the duty-cycled load
  python3 - "$bin" "$model" "$out" <<'PY'
# Calibrate by hand: llama-bench alone, without and with the load at each duty cycle.
import json, subprocess, sys, time
binary, model, out = sys.argv[1:4]
def run(duty, args, period):
    load = subprocess.Popen([sys.executable, "/tmp/load.py", str(duty), "60", "now", period]) \
        if duty else None
    time.sleep(6 if duty else 0)
    proc = subprocess.run([binary, "-m", model, "-o", "json", "-r", "20", "-ngl", "99", "-fa", "1", *args],
                          capture_output=True, text=True)
    if load:
        load.kill(); load.wait()
    return json.loads(proc.stdout)[0]["avg_ts"]
table = {}
PERIOD = {"tg128": "0.020", "pp512": "0.004"}
for kind, args in (("tg128", ["-p", "0", "-n", "128"]), ("pp512", ["-p", "512", "-n", "0"])):
    base = [run(0, args, PERIOD[kind]) for _ in range(2)]
    table[kind] = {"alone": base}
    for duty in (0.05, 0.08, 0.1, 0.13, 0.2, 0.3, 0.45):
        table[kind][str(duty)] = run(duty, args, PERIOD[kind])
    print(kind, json.dumps(table[kind]), flush=True)
json.dump(table, open(f"{out}/calibration.json", "w"), indent=1)
def pick(kind, want):
    alone = sum(table[kind]["alone"]) / 2
    drops = {d: 1 - v / alone for d, v in table[kind].items() if d != "alone"}
    return min(drops, key=lambda d: abs(drops[d] - want)), drops
for kind, want in (("tg128", 0.055), ("pp512", 0.20)):
    duty, drops = pick(kind, want)
    print(f"{kind}: duty {duty} costs {drops[duty]:.1%} by hand", flush=True)
    open(f"/tmp/duty-{kind}", "w").write(duty)
PY
  S=/tmp/store-drops
  bench d0-baseline /tmp/inv.yml $S
  if [ "$phase" = steady ]; then
    LONG="{\"omni_bench\": {\"llama_bench\": \"$bin\", \"model\": \"$model\", \"repetitions\": 20, \"args\": $DOC}}"
    duty=$(cat /tmp/duty-tg128)
    for i in $(seq -w 1 10); do
      python3 /tmp/load.py "$duty" 60 now 0.020 & load=$!
      sleep 6
      bench "steady-$i" /tmp/inv.yml $S --force -e "$LONG"
      kill $load 2>/dev/null; wait $load 2>/dev/null
    done
    tar czf "$out/stores.tar.gz" -C /tmp store-drops
    tar czf "$final/quiet-$phase.tar.gz" -C "$out" .
    exit 0
  fi
  # 20 repetitions (not part of what is compared): long enough for the load to land
  LONG="{\"omni_bench\": {\"llama_bench\": \"$bin\", \"model\": \"$model\", \"repetitions\": 20, \"args\": $DOC}}"
  for kind in tg128 pp512; do
    duty=$(cat /tmp/duty-$kind)
    period=$([ $kind = tg128 ] && echo 0.020 || echo 0.004)
    for i in $(seq -w 1 10); do
      rm -f /tmp/go
      python3 /tmp/load.py "$duty" 40 /tmp/go "$period" & load=$!
      sleep 8  # torch imported: the gate sees no process on the GPU
      ( for _ in $(seq 1 1000); do pgrep -f "bin/llama-bench -m" >/dev/null && { touch /tmp/go; break; }; sleep 0.05; done ) & watcher=$!
      bench "$kind-$i" /tmp/inv.yml $S -e "$LONG"
      kill $load $watcher 2>/dev/null; wait $load $watcher 2>/dev/null
    done
  done
  tar czf "$out/stores.tar.gz" -C /tmp store-drops
fi
echo "phase $phase done after $(( $(date +%s) - t0 )) s"
tar czf "$final/quiet-$phase.tar.gz" -C "$out" .
ls -la "$final"
