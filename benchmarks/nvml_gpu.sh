# On a lent GPU machine (two GPUs for the topology): the collector's GPU reads through one NVML
# session against the nvidia-smi runs they replace, side by side in one run (issue 44).
#   1. the NVML reader's document and nvidia-smi's own outputs on the same host, for the
#      fixtures that prove the reader's forms parse to the same facts;
#   2. the collector's cost, the tree before (.devcarry/old) against this one
#      (benchmarks/collector_cost.py, interleaved, medians);
#   3. the bench's fixed cost, the same two trees (benchmarks/fixed_cost_ab.py);
#   4. an audit of this machine by each tree (JSON), to compare verdicts.
# Usage: bash benchmarks/nvml_gpu.sh OUTDIR [RUNS]   (everything also in OUTDIR.tar.gz)
set -u
out=$1
runs=${2:-15}
mkdir -p "$out"
. benchmarks/gpu_lib.sh
gpu_python "$out"
nvidia-smi -L > "$out/nvidia-smi-L.txt"
python3 -I -S -c "$(cat omni_host/remote/nvml_session.py omni_host/remote/nvml.py)" > "$out/nvml.json" 2> "$out/nvml.err"
echo "nvml exit $?"
nvidia-smi -q -x > "$out/nvidia-smi-q-x.xml"
nvidia-smi --query-gpu=index,name,compute_cap,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,persistence_mode,ecc.errors.uncorrected.volatile.total --format=csv,noheader > "$out/query-gpu.csv"
nvidia-smi topo -m > "$out/topo-m.txt" 2>&1
nvidia-smi topo -p2p r > "$out/topo-p2p-r.txt" 2>&1
for i in 1 2 3; do
  /usr/bin/time -f "nvml reader: %e s wall, %U user %S sys" python3 -I -S -c "$(cat omni_host/remote/nvml_session.py omni_host/remote/nvml.py)" > /dev/null
  /usr/bin/time -f "nvidia-smi -q -x: %e s wall, %U user %S sys" nvidia-smi -q -x > /dev/null
done 2> "$out/reader-times.txt"
cat "$out/reader-times.txt"
# the old tree's own directory: python3 -m puts the working directory before PYTHONPATH
(cd .devcarry/old && python3 -m omni_host payload) > "$out/old-payload.py"
python3 -m omni_host payload > "$out/new-payload.py"
python3 benchmarks/collector_cost.py "$out" "$out/old-payload.py" "$out/new-payload.py" "$runs" > "$out/collector-cost.txt" 2>&1
cat "$out/collector-cost.txt"
python3 benchmarks/fixed_cost_ab.py .devcarry/old . --runs "$runs" --out "$out/fixed-cost-ab.json"
(cd .devcarry/old && python3 -m omni_host audit --format json) > "$out/audit-old.json" 2> "$out/audit-old.err"
python3 -m omni_host audit --format json > "$out/audit-new.json" 2> "$out/audit-new.err"
grep -c '"gpu.nvml"' "$out/old-payload.py" "$out/new-payload.py"  # 0 and 1: the two trees
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def statuses(name):
    host = json.load(open(f"{out}/{name}"))["hosts"][0]
    return {r["id"]: (r["status"], r["summary"]) for r in host["results"]}
old, new = statuses("audit-old.json"), statuses("audit-new.json")
for cid in sorted(set(old) | set(new)):
    if old.get(cid) != new.get(cid):
        print("DIFF", cid, "\n  old:", old.get(cid), "\n  new:", new.get(cid))
print(len(old), "checks compared")
PY
python3 -I -S benchmarks/nvml_calls.py > "$out/nvml-calls.txt" 2>&1
tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
