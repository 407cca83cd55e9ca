#!/bin/bash
# The served Sentinel on a lent GPU machine (issue 36), as an operator runs it, in one call:
# llama-bench and llama-server built with CUDA from the llama-cpp-python 0.3.36 sdist's sources
# (one build), the 1.7 GB random-weight F16 llama, the bench baseline of the documented config
# (-p 512 -n 128 -ngl 99 -fa 1 -r 5), then audits of a running llama-server:
#   matching:  -ngl 99 -fa on, 8 requests of 128 tokens, then audited (its rate against the bench);
#   probed:    the same server idle, audited with omni_serve.probe (one 24-token completion);
#   offload:   -ngl 7 (of 14 layers), 8 requests, audited (the difference named, the verdict);
#   watch:     omni-host serve watch --for 40s --every 5s under steady requests, the server
#              killed and started again 25 s in (a restart to catch);
#   cost:      the collector's CPU with the server running and without it (median of 9 each), and
#              the server's own CPU for the reads (/proc/PID/stat before and after 20 audits).
# Carried in .devcarry/ (the machine reaches no registry): whl/, llama-src.tar.gz, vocab.gguf.
# Usage: bash benchmarks/serve_gpu.sh OUTDIR [build]   (build: stop after the build and the
# model, for a machine whose calls are limited in time; a second call skips both)
set -u
out=$1
mkdir -p "$out"
. benchmarks/gpu_lib.sh
gpu_python "$out"
bin=$LLAMA_BIN model=/tmp/model.gguf
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
t0=$(date +%s)
if [ ! -x "$bin/llama-server" ]; then
  gpu_build_start "$out" llama-bench llama-server
  random_dense "$model" "$out/model.log"
  wait $build; echo "build exit $? after $(( $(date +%s) - t0 )) s"
fi
[ -x "$bin/llama-server" ] || { tail -20 "$out/build.log"; exit 1; }
[ "${2:-}" = build ] && exit 0

bench_inventory /tmp/inv.yml "$bin/llama-bench" "$model" '["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]'
store=/tmp/store
python3 -m omni_host bench -i /tmp/inv.yml gpu --report-dir $store --format json \
  > "$out/baseline.json" 2> "$out/baseline.err"
echo "== baseline: exit $?"; python3 benchmarks/report_lines.py "$out/baseline.json" perf.tokens-per-s

serve() {  # serve ARGS...: start llama-server on :8080, wait until healthy; pid in $server
  "$bin/llama-server" -m "$model" --port 8080 -c 4096 --metrics "$@" > "$out/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 240); do
    curl -sf localhost:8080/health > /dev/null 2>&1 && return 0; sleep 0.5
  done
  echo "server did not come up"; tail -5 "$out/server.log"; return 1
}
requests() {  # requests N: N sequential completions of 128 tokens; their own rates
  for _ in $(seq 1 "$1"); do
    curl -s localhost:8080/completion -d '{"prompt": "Tell me a story about a GPU", "n_predict": 128, "ignore_eos": true, "cache_prompt": false}' |
      python3 -c 'import json,sys; print("%.1f" % json.load(sys.stdin)["timings"]["predicted_per_second"], end=" ")'
  done; echo "t/s per request"
}
audit() {  # audit NAME [-e ...]
  local name=$1; shift
  python3 -m omni_host audit -i /tmp/inv.yml gpu --report-dir $store --format json "$@" \
    > "$out/$name.json" 2> "$out/$name.err"
  echo "== $name: exit $?"; python3 benchmarks/report_lines.py "$out/$name.json" serve.tokens-per-s
  curl -s localhost:8080/metrics > "$out/$name.metrics.txt"
}

serve -ngl 99 -fa on && requests 8 && audit matching
audit probed -e '{"omni_serve": {"probe": true}}'
python3 -m omni_host payload > /tmp/payload.py
cp /tmp/payload.py /tmp/payload-server.py
stat_cpu() { awk '{print $14 + $15}' /proc/$server/stat; }
before=$(stat_cpu)
for _ in $(seq 1 20); do python3 -I -S - < /tmp/payload.py > /dev/null; done
echo "server CPU for 20 collections (ticks of 1/$(getconf CLK_TCK) s): $(( $(stat_cpu) - before ))"
python3 benchmarks/collector_cost.py "$out/cost-with" /tmp/payload-server.py 9 > "$out/cost-with.txt"
head -2 "$out/cost-with.txt"; grep serve.servers "$out/cost-with.txt"

( while :; do requests 1 > /dev/null 2>&1; done ) &
traffic=$!
python3 -m omni_host serve watch -i /tmp/inv.yml gpu --for 40s --every 5s --report-dir $store \
  --format json > "$out/watch.json" 2> "$out/watch.err" &
watcher=$!
sleep 25; kill $server; wait $server 2>/dev/null; serve -ngl 99 -fa on
wait $watcher; echo "== watch: exit $?"; cat "$out/watch.err"
python3 benchmarks/report_lines.py "$out/watch.json" serve.stability
kill $traffic; kill $server; wait $server 2>/dev/null
python3 benchmarks/collector_cost.py "$out/cost-without" /tmp/payload.py 9 > "$out/cost-without.txt"
head -2 "$out/cost-without.txt"

serve -ngl 7 -fa on && requests 8 && audit offload
kill $server; wait $server 2>/dev/null
tar czf "$out/store.tar.gz" -C /tmp store
