set -u
. benchmarks/gpu_lib.sh
mkdir -p $OUT/s
gpu_python $OUT/s
python3 - <<'PY'
import json, subprocess, sys
from omni_host.probes.catalog import PROBES_BY_ID, bench_probe
reader = PROBES_BY_ID["gpu.nvml"]
out = subprocess.run([sys.executable, *reader.argv[1:]], capture_output=True, text=True)
doc = json.loads(out.stdout)
print("reader exit", out.returncode, "sections", sorted(doc), "topo", (doc["topo"] or "")[:60].replace("\t", " "))
from omni_host.probes.parsers.nvidia import parse_nvml, parse_nvidia_smi_xml
inv = parse_nvidia_smi_xml(parse_nvml(out.stdout)["q"])
print([g.name for g in inv.gpus], inv.driver_version)
code = "\n\n".join(open(f"omni_host/remote/{n}.py").read() for n in ("procfacts", "gguf", "nvml_session", "bench"))
g = {"__name__": "bench_smoke"}
exec(compile(code, "bench", "exec"), g)
n = g["open_nvml"]()
print("bench nvml", n is not None, n.memory(), n.sample())
n.close()
PY
python3 -m omni_host payload > $OUT/s/new.py
python3 benchmarks/collector_cost.py $OUT/s $OUT/s/new.py 15 2>&1 | head -3
