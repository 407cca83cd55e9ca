#!/bin/sh
# On a lent GPU machine, as a user would: omni-host from the working tree plus a wheelhouse
# (.whl, built on the workstation: the machine reaches no registry), then
#   1. an audit with a policy that describes this machine (every GPU check should pass),
#   2. an audit with the built-in reference policy (the reference box's failures),
#   3. a bundle of this machine, kept as a test fixture,
# with the wall and CPU time of the whole CLI and of the collector on the host.
# Usage: sh benchmarks/capture_gpu_audit.sh NAME OUTDIR
set -u
name=$1 out=$2
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
gpus=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits |
       python3 -c 'import json,sys; print(json.dumps([{"model": l.split(",")[0].replace("NVIDIA ", "").strip(), "vram_gib": round(int(l.split(",")[1]) / 1024)} for l in sys.stdin if l.strip()]))')
cat > /tmp/inv.ini <<INI
$name ansible_connection=local

[all:vars]
omni_gpus=$gpus
omni_gpu_driver_min="580.95.05"
omni_swap_size_mib=0
omni_build_packages=[]
INI
cat /tmp/inv.ini > "$out/$name.inventory.ini"
# wall and CPU (user, sys) of a command and everything it waited for, on stderr's last line
t() { python3 -c 'import resource, subprocess, sys, time
start = time.monotonic(); code = subprocess.call(sys.argv[1:]); u = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write("%.3f s wall, %.3f s user, %.3f s sys\n" % (time.monotonic() - start, u.ru_utime, u.ru_stime)); sys.exit(code)' "$@"; }
t python3 -m omni_host.cli audit -i /tmp/inv.ini --format json --no-store > "$out/$name.own.json" 2> "$out/$name.own.err"
echo "own policy: exit $?"; tail -1 "$out/$name.own.err"
t python3 -m omni_host.cli audit --format json --no-store > "$out/$name.reference.json" 2> "$out/$name.reference.err"
echo "reference policy: exit $?"; tail -1 "$out/$name.reference.err"
python3 -m omni_host.cli collect -i /tmp/inv.ini --out "$out/$name.tar.gz"
python3 -m omni_host.cli payload > /tmp/payload.py
t python3 -I -S /tmp/payload.py > /dev/null 2> "$out/$name.collector.err"  # as an audit runs it
echo "collector alone (static probes): $(tail -1 "$out/$name.collector.err")"
python3 - "$out/$name.own.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for h in doc["hosts"]:
    print(h["host"], {r["id"]: r["effective_status"] for r in h["results"]})
    for r in h["results"]:
        if r["id"] in ("numa.nps1", "gpu.topology", "gpu.health", "gpu.driver-version"):
            print(" ", r["id"], r["status"], r["summary"][:200])
PY
