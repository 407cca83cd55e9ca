#!/bin/bash
# The Sentinel over time on a lent GPU machine (issue 67), as an operator runs it: the
# documented config (-p 512 -n 128 -ngl 99 -fa 1, 5 repetitions) on the 1.7 GB random llama.
#   1. calibrate by hand a steady duty-cycled GPU load (benchmarks/gpu_load.py, started 6 s
#      before) to cost tg128 about 3%: llama-bench alone and under each duty, -r 20, alone and
#      loaded interleaved;
#   2. a baseline, 10 unchanged benches, then 5 with that load already running (--force: a
#      job that was there first) - the step the series must name within 3 runs;
#   3. the same by hand after the runs (3 pairs): the step's size as measured around them;
#   4. each GPU alone (-sm none -mg 0): a baseline and 6 benches, the runs that stand in for
#      the GPUs of one box (tests/test_gpu_twins.py).
# Knobs: WARM_S (llama-bench for that long first: a box in service is warm; the first runs
# of a freshly started H200 ran 2-4% low), DUTIES (the calibration's), UNCHANGED (10), NO_MG.
# Runs in the background (setsid) so that two device calls can wait for it; everything lands
# in OUTDIR/step.tar.gz.  Usage: bash benchmarks/step_gpu.sh OUTDIR [wait]
set -u
. benchmarks/gpu_lib.sh
gpu_background step "$1" "${2:-}"
gpu_python "$out"
gpu_dense_bench "$out"
nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.max.sm --format=csv,noheader
cp benchmarks/gpu_load.py /tmp/load.py
DOC='["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
bench_inventory /tmp/inv.yml "$bin" "$model" "$DOC"
bench_inventory /tmp/inv-mg.yml "$bin" "$model" '["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1", "-sm", "none", "-mg", "0"]'
hand() {  # hand PAIRS DUTIES...: tg128 by hand, alone and under each duty, interleaved
  python3 - "$bin" "$model" "$@" <<'PY'
import json, subprocess, sys, time
binary, model, pairs, duties = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def run(duty):
    load = subprocess.Popen([sys.executable, "/tmp/load.py", duty, "40", "now", "0.020"]) \
        if duty != "0" else None
    time.sleep(6 if load else 0)
    proc = subprocess.run([binary, "-m", model, "-o", "json", "-r", "20", "-ngl", "99", "-fa",
                           "1", "-p", "0", "-n", "128"], capture_output=True, text=True)
    if load:
        load.kill(); load.wait()
    return json.loads(proc.stdout)[0]["avg_ts"]
table = {d: [] for d in ["0", *duties]}
for _ in range(pairs):
    for d in table:
        table[d].append(run(d))
alone = sorted(table["0"])[len(table["0"]) // 2]
print(json.dumps({d: {"ts": v, "drop": 1 - sorted(v)[len(v) // 2] / alone}
                  for d, v in table.items()}), flush=True)
PY
}
if [ "${WARM_S:-0}" -gt 0 ]; then  # a box in service is warm: llama-bench for WARM_S first
  end=$(( $(date +%s) + WARM_S ))
  while [ "$(date +%s)" -lt $end ]; do "$bin" -m "$model" -r 20 -ngl 99 -fa 1 -p 512 -n 128 > /dev/null 2>&1; done
fi
echo "calibration: $(hand 2 ${DUTIES:-0.02 0.03 0.04 0.05} | tee $out/calibration.json)"
duty=$(python3 -c "import json; t = json.load(open('$out/calibration.json')); \
print(min((d for d in t if d != '0'), key=lambda d: abs(t[d]['drop'] - 0.03)))")
echo "duty $duty"
S=/tmp/store-step
bench s00-baseline /tmp/inv.yml $S
for i in $(seq -w 1 ${UNCHANGED:-10}); do bench "s$i" /tmp/inv.yml $S; done
for i in $(seq -w $(( ${UNCHANGED:-10} + 1 )) $(( ${UNCHANGED:-10} + 5 ))); do
  python3 /tmp/load.py "$duty" 60 now 0.020 & load=$!
  sleep 6
  bench "s$i" /tmp/inv.yml $S --force
  kill $load 2>/dev/null; wait $load 2>/dev/null
done
echo "by hand after: $(hand 3 "$duty" | tee $out/after.json)"
M=/tmp/store-mg
[ -n "${NO_MG:-}" ] || bench m0-baseline /tmp/inv-mg.yml $M
[ -n "${NO_MG:-}" ] || for i in 1 2 3 4 5 6; do bench "m$i" /tmp/inv-mg.yml $M; done
tar czf "$out/stores.tar.gz" -C /tmp store-step $([ -d $M ] && echo store-mg)
echo "step done after $(( $(date +%s) - t0 )) s"
touch $out/done
