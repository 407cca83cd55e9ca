#!/bin/bash
# bench --why on a lent GPU machine (issue 65), as an operator runs it after a drop: two
# induced two-factor changes since a baseline, each a factor that costs beside one that
# does not, on the 1.7 GB random llama (tg128, 5 repetitions):
#   env: omni_bench.env gains GGML_CUDA_DISABLE_GRAPHS=1 (CUDA graphs off: each token's
#        kernels launched one by one) and GGML_CUDA_FORCE_MMQ=1 (the quantized matmul
#        kernels: an F16 model has none to force);
#   threads: 8 of 14 layers on the GPU, -t 16 -> 8 (half the CPU's share of each token)
#        and -ub 512 -> 256 (the physical batch: no generated token fills it);
#   mask: 8 of 14 layers on the GPU, -t 8, the bench started with CPUs 0-3 allowed (taskset:
#        eight threads on four CPUs) and THP never (the model's buffers are not anonymous
#        memory THP would back: the weights are mapped from the file).
# Each case: a baseline, the changed bench, then --why; then each factor by hand alone, its
# effect as llama-bench measures it in 5 interleaved pairs (the figure --why must match
# within 3 points). REPEAT runs --why that many times per case (default 1); CASES picks
# them (default "env threads mask").
# Runs in the background (setsid) so that two device calls can wait for it; everything lands
# in OUTDIR/why.tar.gz.  Usage: bash benchmarks/why_gpu.sh OUTDIR [wait]
set -u
. benchmarks/gpu_lib.sh
gpu_background why "$1" "${2:-}"
gpu_python "$out"
gpu_dense_bench "$out"
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader
nproc
hand() {  # hand NAME ENV-JSON ARGS-JSON [ENV-JSON ARGS-JSON]...: each config's tg128 by hand,
  # interleaved over 5 pairs (the first config the reference); medians and ratios
  python3 - "$bin" "$model" "$@" <<'PY'
import json, os, subprocess, sys
binary, model, name, rest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
configs = [(json.loads(rest[i]), json.loads(rest[i + 1])) for i in range(0, len(rest), 2)]
THP = "/sys/kernel/mm/transparent_hugepage/enabled"
def run(env, args):  # env's _cpus (a list) and _thp (a value) set the CPUs allowed and THP
    env = dict(env)
    cpus, thp = env.pop("_cpus", None), env.pop("_thp", None)
    if thp is not None:
        with open(THP, "w") as f:
            f.write(thp)
    allowed = set(cpus) if cpus is not None else os.sched_getaffinity(0)
    proc = subprocess.run([binary, "-m", model, "-o", "json", "-r", "5", *args],
                          capture_output=True, text=True, env={**os.environ, **env},
                          preexec_fn=lambda: os.sched_setaffinity(0, allowed))
    samples = json.loads(proc.stdout)[0]["samples_ts"][1:]
    return sorted(samples)[len(samples) // 2]
table = [[] for _ in configs]
for i in range(5):
    for j in (range(len(configs)) if i % 2 == 0 else reversed(range(len(configs)))):
        table[j].append(run(*configs[j]))
medians = [sorted(v)[2] for v in table]
print(json.dumps({"case": name, "configs": [list(c) for c in configs], "ts": table,
                  "medians": medians, "vs_first": [m / medians[0] - 1 for m in medians]}),
      flush=True)
PY
}
REPEAT=${REPEAT:-1} CASES=${CASES:-env threads mask}
case_env() {
E=/tmp/store-env
bench_inventory /tmp/inv-env0.yml "$bin" "$model" '["-p", "0", "-n", "128", "-ngl", "99", "-fa", "1"]'
bench_inventory /tmp/inv-env1.yml "$bin" "$model" '["-p", "0", "-n", "128", "-ngl", "99", "-fa", "1"]' \
  '{"GGML_CUDA_DISABLE_GRAPHS": "1", "GGML_CUDA_FORCE_MMQ": "1"}'
"$bin" -m "$model" -r 20 -ngl 99 -fa 1 -p 0 -n 128 > /dev/null 2>&1  # warm
bench e0-baseline /tmp/inv-env0.yml $E
bench e1-changed /tmp/inv-env1.yml $E
for r in $(seq 1 $REPEAT); do bench "e2-why$r" /tmp/inv-env1.yml $E --why; done
A='["-p", "0", "-n", "128", "-ngl", "99", "-fa", "1"]'
echo "by hand env: $(hand env '{"GGML_CUDA_DISABLE_GRAPHS": "1", "GGML_CUDA_FORCE_MMQ": "1"}' "$A" \
  '{"GGML_CUDA_FORCE_MMQ": "1"}' "$A" '{"GGML_CUDA_DISABLE_GRAPHS": "1"}' "$A" '{}' "$A" | tee $out/hand-env.json)"
}
case_threads() {
T=/tmp/store-threads
bench_inventory /tmp/inv-t0.yml "$bin" "$model" '["-p", "0", "-n", "128", "-ngl", "8", "-t", "16", "-ub", "512"]'
bench_inventory /tmp/inv-t1.yml "$bin" "$model" '["-p", "0", "-n", "128", "-ngl", "8", "-t", "8", "-ub", "256"]'
bench t0-baseline /tmp/inv-t0.yml $T
bench t1-changed /tmp/inv-t1.yml $T
for r in $(seq 1 $REPEAT); do bench "t2-why$r" /tmp/inv-t1.yml $T --why; done
echo "by hand threads: $(hand threads '{}' '["-p", "0", "-n", "128", "-ngl", "8", "-t", "8", "-ub", "256"]' \
  '{}' '["-p", "0", "-n", "128", "-ngl", "8", "-t", "16", "-ub", "256"]' \
  '{}' '["-p", "0", "-n", "128", "-ngl", "8", "-t", "8", "-ub", "512"]' \
  '{}' '["-p", "0", "-n", "128", "-ngl", "8", "-t", "16", "-ub", "512"]' | tee $out/hand-threads.json)"
}
case_mask() {
M=/tmp/store-mask THPF=/sys/kernel/mm/transparent_hugepage/enabled
thp=$(sed 's/.*\[\(.*\)\].*/\1/' $THPF)
echo "THP before: $thp"
A='["-p", "0", "-n", "128", "-ngl", "8", "-t", "8"]'
bench_inventory /tmp/inv-m.yml "$bin" "$model" "$A"
bench m0-baseline /tmp/inv-m.yml $M
echo never > $THPF
BENCH_PREFIX="taskset -c 0-3" bench m1-changed /tmp/inv-m.yml $M
for r in $(seq 1 $REPEAT); do BENCH_PREFIX="taskset -c 0-3" bench "m2-why$r" /tmp/inv-m.yml $M --why; done
echo "THP after --why: $(cat $THPF)"
echo "by hand mask: $(hand mask '{"_cpus": [0, 1, 2, 3], "_thp": "never"}' "$A" \
  "{\"_cpus\": [0, 1, 2, 3], \"_thp\": \"$thp\"}" "$A" '{"_thp": "never"}' "$A" \
  "{\"_thp\": \"$thp\"}" "$A" | tee $out/hand-mask.json)"
echo "$thp" > $THPF
}
for c in $CASES; do "case_$c"; echo "case $c done after $(( $(date +%s) - t0 )) s"; done
tar czf "$out/stores.tar.gz" -C /tmp $(cd /tmp && ls -d store-* 2>/dev/null)
echo "why done after $(( $(date +%s) - t0 )) s"
touch $out/done
