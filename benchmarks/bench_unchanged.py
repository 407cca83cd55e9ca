"""Unchanged runs in a row: how often the tokens/s verdict cries wolf on a box where nothing
changed. The CPU llama-bench of tests/llama_bench.sh and a random llama (tests/random_llama.py),
through `omni-host bench` over the local connection, one baseline then N judged runs; prints
each verdict and the tally (fail / warn / pass) and the noise each test settled at.

    python3 benchmarks/bench_unchanged.py [--runs 30] [--tolerance 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "omni-host" /
         "llama-cpp-python-0.3.36")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--tolerance", type=float, default=30)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-unchanged-"))
    model = work / "model.gguf"
    subprocess.run([sys.executable, str(ROOT / "tests" / "random_llama.py"),
                    str(CACHE / "vocab.gguf"), str(model)], check=True, capture_output=True)
    inv = work / "inv.yml"
    inv.write_text(json.dumps({"all": {"hosts": {"vm": {
        "ansible_connection": "local", "omni_build_packages": [],
        "omni_bench": {"llama_bench": str(CACHE / "bin" / "llama-bench"), "model": str(model),
                       "args": ["-p", "128", "-n", "64", "-t", "2"], "repetitions": 5,
                       "tolerance_pct": args.tolerance}}}}}))
    tally: collections.Counter[str] = collections.Counter()
    rows = []
    for i in range(args.runs + 1):
        for _ in range(300):  # another bench on this machine holds its lock: wait for it
            proc = subprocess.run([sys.executable, "-m", "omni_host", "bench", "-i", str(inv),
                                   "vm", "--report-dir", str(work / "store"), "--format", "json"],
                                  capture_output=True, text=True)
            if "another bench is running" not in proc.stderr:
                break
            time.sleep(3)
        if not proc.stdout.strip():
            sys.exit(f"run {i}: no report: {proc.stderr.strip()[-300:]}")
        doc = json.loads(proc.stdout)
        perf = next(r for r in doc["hosts"][0]["results"] if r["id"] == "perf.tokens-per-s")
        rows.append({"status": perf["status"], "summary": perf["summary"],
                     "verdicts": perf["details"].get("verdicts"),
                     "unfit": perf["details"].get("unfit")})
        print(i, perf["status"], perf["summary"][:220], flush=True)
        if i == 0 and not perf["details"].get("recorded_baseline"):
            continue  # an unfit first run: the next fit one is the baseline
        if i:
            tally[perf["status"]] += 1
    print(json.dumps(dict(tally)))
    if args.out:
        args.out.write_text(json.dumps({"tally": dict(tally), "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
