# Sourced by the scripts that run on a lent GPU machine (bench_trust_gpu.sh, serve_gpu.sh,
# ceiling_gpu.sh, sweep_gpu.sh). The machine reaches no registry: .devcarry/ brings whl/,
# llama-src.tar.gz (the llama-cpp-python 0.3.36 sdist's llama.cpp) and vocab.gguf.
LL=/tmp/llama.cpp
LLAMA_BIN=$LL/build/bin

gpu_background() {  # gpu_background NAME FINAL [wait]: run the calling script in the background
  # (setsid) so that two device calls can wait for it: the first starts it and waits, a second
  # (wait) only waits; either packs /tmp/NAME into FINAL/NAME.tar.gz once it has touched
  # /tmp/NAME/done (or its time is up: what is there so far, exit 3), and exits. Returns only inside the background run, with $out set.
  local name=$1 final=$2
  out=/tmp/$name
  if [ "${3:-}" = wait ]; then
    for _ in $(seq 1 1150); do [ -e "$out/done" ] && break; sleep 0.5; done
    cat "$out/progress.log"
    tar czf "$final/$name.tar.gz" -C "$out" . || exit 1
    [ -e "$out/done" ] || exit 3  # not done yet: what is there so far comes back all the same
    exit 0
  fi
  mkdir -p "$out" "$final"
  if [ -z "${GPU_BACKGROUND:-}" ]; then
    GPU_BACKGROUND=1 setsid bash "$0" "$final" > "$out/progress.log" 2>&1 < /dev/null &
    bash "$0" "$final" wait
    exit $?
  fi
}

gpu_python() {  # gpu_python OUTDIR: the carried wheels and this tree on PYTHONPATH, compiled once
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    .devcarry/whl/*.whl > "$1/pip.log" 2>&1 || { echo "wheels did not install"; tail -5 "$1/pip.log"; }
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
  python3 -m compileall -q omni_host /tmp/site > /dev/null 2>&1  # as pip install does
}

gpu_trees() {  # gpu_trees: gpu_python, a venv's interpreter at /tmp/venv/bin/python (a user's
  # install: the machine's python3 may run .pth hooks of its CUDA packages on every start), and
  # the earlier tree carried in .devold compiled
  gpu_python /tmp
  python3 -m venv --without-pip /tmp/venv > /tmp/venv.log 2>&1 || echo "no venv: $(tail -1 /tmp/venv.log)"
  python3 -m compileall -q .devold/omni_host > /dev/null 2>&1
}

gpu_build_start() {  # gpu_build_start OUTDIR TARGET...: llama.cpp with CUDA (sm_90, static) in
  # the background, its log in OUTDIR/build.log; its pid in $build
  local out=$1 server=OFF
  shift
  case " $* " in *" llama-server "*) server=ON ;; esac
  mkdir -p "$LL" && tar xzf .devcarry/llama-src.tar.gz -C "$LL"
  ( cmake -S "$LL" -B "$LL/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=$server -DCMAKE_BUILD_TYPE=Release \
      && cmake --build "$LL/build" --target "$@" -j "$(nproc)" ) > "$out/build.log" 2>&1 &
  build=$!
}

random_dense() {  # random_dense OUT.gguf LOG: the 1.7 GB random F16 llama of the H100 figures
  python3 tests/random_llama.py .devcarry/vocab.gguf "$1" --embd 2048 --layers 14 --ff 5632 \
    --heads 16 > "$2" 2>&1
}

bench_inventory() {  # bench_inventory FILE LLAMA_BENCH MODEL ARGS-JSON [ENV-JSON]: the lent machine, local
  cat > "$1" <<YML
all:
  hosts:
    gpu:
      ansible_connection: local
      omni_build_packages: []
      omni_swap_size_mib: 0
      omni_bench:
        llama_bench: "$2"
        model: "$3"
        args: $4
        env: ${5:-"{}"}
        repetitions: 5
YML
}

random_moe() {  # random_moe OUT.gguf LOG: the plan's random mixture of experts (issue 46), about
  # 23 GB: 28 layers, 32 experts of which 4 are used per token, F16, trained for 32768 tokens
  # (the plan holds --ctx and --depth to it)
  python3 tests/random_llama.py .devcarry/vocab.gguf "$1" --embd 2048 --layers 28 --ff 2048 \
    --heads 16 --experts 32 --experts-used 4 --context 32768 > "$2" 2>&1
}

gpu_dense_bench() {  # gpu_dense_bench OUTDIR [TARGET...]: sets $bin (llama-bench, CUDA) and
  # $model (the 1.7 GB random F16 llama), built once per machine (a warm one keeps them) with the
  # other TARGETs beside it (llama-fit-params for a plan), and $t0; exits where the build
  # failed, its log's tail printed
  local out=$1 target missing=
  shift
  bin=$LLAMA_BIN/llama-bench model=/tmp/model.gguf
  t0=$(date +%s)
  for target in llama-bench "$@"; do [ -x "$LLAMA_BIN/$target" ] || missing=1; done
  if [ -n "$missing" ]; then
    gpu_build_start "$out" llama-bench "$@"
    random_dense "$model" "$out/model.log"
    wait $build; echo "build exit $? after $(( $(date +%s) - t0 )) s"
  fi
  [ -x "$bin" ] || { tail -20 "$out/build.log"; exit 1; }
}

bench() {  # bench NAME INVENTORY STORE [flags]: omni-host bench of the lent machine ($out set
  # by the caller; BENCH_PREFIX, a command it is started under: taskset -c 0-3): its JSON report
  # in $out/NAME.json; one line: status, wall, summary (of perf.tokens-per-s, or of perf.why
  # under --why)
  local name=$1 inv=$2 store=$3 s; shift 3
  s=$(date +%s.%N)
  ${BENCH_PREFIX:-} python3 -m omni_host bench -i "$inv" gpu --report-dir "$store" --format json "$@" \
    > "$out/$name.json" 2> "$out/$name.err"
  python3 - "$out/$name.json" "$name" "$s" <<'PY'
import json, sys, time
try:
    doc = json.load(open(sys.argv[1]))
    r = next(r for r in doc["hosts"][0]["results"] if r["id"] in ("perf.tokens-per-s", "perf.why"))
    print(f"{sys.argv[2]} {r['status']} {time.time() - float(sys.argv[3]):.1f}s {r['summary'][:300]}")
except Exception as exc:
    print(sys.argv[2], "no report:", exc)
PY
}
