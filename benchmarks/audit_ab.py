"""``omni-host audit`` of this machine (``--no-store --format json``), this tree against the
earlier one carried in .devold, interleaved run by run, as a user's venv runs it (after
``gpu_trees`` of benchmarks/gpu_lib.sh: /tmp/venv, the wheels in /tmp/site): walls and each
tree's verdicts.

    python benchmarks/audit_ab.py RUNS OUT.json
"""

import json
import os
import statistics
import subprocess
import sys
import time

trees = {"new": ".", "old": ".devold"}
w = {k: [] for k in trees}
verdicts = {}
for i in range(int(sys.argv[1])):
    for k in (list(trees) if i % 2 == 0 else list(trees)[::-1]):
        env = {**os.environ, "PYTHONPATH": os.path.abspath(trees[k]) + ":/tmp/site"}
        t = time.monotonic()
        p = subprocess.run(["/tmp/venv/bin/python", "-m", "omni_host", "audit", "--no-store",
                            "--format", "json"], capture_output=True, env=env, cwd="/tmp")
        w[k].append(time.monotonic() - t)
        doc = json.loads(p.stdout)
        verdicts[k] = sorted((r["id"], r["status"]) for r in doc["hosts"][0]["results"])
for k, v in w.items():
    print(f"{k} median {statistics.median(v):.3f} min {min(v):.3f} max {max(v):.3f}")
print("same verdicts:", verdicts["new"] == verdicts["old"], len(verdicts["new"]))
with open(sys.argv[2], "w") as handle:
    json.dump({"walls_s": w, "verdicts": verdicts}, handle, indent=1)
