"""`bench --why` where nothing that changed costs: how often it calls a harmless factor costly.
The CPU llama-bench of tests/llama_bench.sh and a random llama (tests/random_llama.py),
through `omni-host bench` over the local connection: a baseline, one bench after two
harmless changes (the logical batch -b 2048 -> 512 for a 64-token prompt; GGML_CUDA_FORCE_MMQ=1,
which a CPU build never reads), then N runs of --why; prints each verdict and the tally.

    python3 benchmarks/why_quiet.py [--runs 10] [--out FILE]
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


def _inventory(path: Path, model: Path, args: list[str], env: dict[str, str]) -> None:
    path.write_text(json.dumps({"all": {"hosts": {"vm": {
        "ansible_connection": "local", "omni_build_packages": [],
        "omni_bench": {"llama_bench": str(CACHE / "bin" / "llama-bench"), "model": str(model),
                       "args": args, "env": env, "repetitions": 5, "tolerance_pct": 30,
                       "max_spread_pct": 60}}}}}))


def _bench(inv: Path, store: Path, *extra: str) -> dict:
    for _ in range(300):  # another bench on this machine holds its lock: wait for it
        proc = subprocess.run([sys.executable, "-m", "omni_host", "bench", "-i", str(inv), "vm",
                               "--report-dir", str(store), "--format", "json", *extra],
                              capture_output=True, text=True)
        if "another bench is running" not in proc.stderr:
            break
        time.sleep(3)
    if not proc.stdout.strip():
        sys.exit(f"no report: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-why-quiet-"))
    model = work / "model.gguf"
    subprocess.run([sys.executable, str(ROOT / "tests" / "random_llama.py"),
                    str(CACHE / "vocab.gguf"), str(model)], check=True, capture_output=True)
    base = ["-p", "64", "-n", "16", "-t", "1"]
    inv = work / "inv.yml"
    _inventory(inv, model, [*base, "-b", "2048"], {})
    for _ in range(3):  # a first run not fit to be the baseline is run again
        doc = _bench(inv, work / "store")
        perf = next(r for r in doc["hosts"][0]["results"] if r["id"] == "perf.tokens-per-s")
        if perf["details"].get("recorded_baseline"):
            break
    else:
        sys.exit("no fit baseline in 3 runs")
    _inventory(inv, model, [*base, "-b", "512"], {"GGML_CUDA_FORCE_MMQ": "1"})
    _bench(inv, work / "store")
    tally: collections.Counter[str] = collections.Counter()
    rows = []
    for i in range(args.runs):
        doc = _bench(inv, work / "store", "--why")
        why = next(r for r in doc["hosts"][0]["results"] if r["id"] == "perf.why")
        tally[why["status"]] += 1
        rows.append({"status": why["status"], "summary": why["summary"],
                     "lines": why["evidence"][0]["lines"] if why["evidence"] else []})
        print(i + 1, why["status"], why["summary"][:200], flush=True)
    print("tally:", dict(tally), "costly calls:", sum(bool(r["summary"].count(" costs "))
                                                       for r in rows))
    if args.out:
        args.out.write_text(json.dumps({"tally": tally, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
