"""The fixed cost of omni-host bench: the whole bench with a llama-bench that answers at once
(a real capture of its JSON, printed by a script), so every second measured is omni-host's own:
start-up, inventory, the audit's probes, the helper's gate and context, evaluation, storing.
Interleaved with the stand-in by hand; medians. With --profile, one run under cProfile (the
20 costliest functions by cumulative time) and python -X importtime's top imports.

    python3 benchmarks/bench_fixed_cost.py [--runs 9] [--profile] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CAPTURE = (Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "captures" /
           "llama-bench" / "llama-bench-json_h100_random-llama-1.7gb-f16_vmm.json")


def stand_in(work: Path, **bench: object) -> tuple[Path, Path]:
    """In ``work``: a llama-bench that prints the capture at once, a 2 MiB model, and an
    inventory of this machine whose omni_bench runs them (``bench``: more omni_bench values);
    (the stand-in, the inventory)."""
    fake = work / "llama-bench"
    fake.write_text(f"#!/bin/sh\ncat {CAPTURE}\n")
    fake.chmod(0o755)
    model = work / "model.gguf"
    model.write_bytes(os.urandom(2 << 20))
    inv = work / "inv.yml"
    inv.write_text(json.dumps({"all": {"hosts": {"box": {
        "ansible_connection": "local", "omni_build_packages": [],
        "omni_bench": {"llama_bench": str(fake), "model": str(model), "max_spread_pct": 100,
                       "max_other_cpus": 64, **bench}}}}}))
    return fake, inv


def compiled(tree: Path) -> None:
    """``tree``'s modules compiled, as pip install does: a tree without .pyc (a fresh worktree,
    PYTHONDONTWRITEBYTECODE) would compile every module each run, 0.3 s here."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "omni_host")],
                   check=True, capture_output=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-fixed-"))
    fake, inv = stand_in(work)
    ours = [sys.executable, "-m", "omni_host", "bench", "-i", str(inv), "box", "--report-dir",
            str(work / "store"), "--format", "json"]
    by_hand = [str(fake)]
    times: dict[str, list[float]] = {"by_hand": [], "omni_host": []}
    subprocess.run(ours, capture_output=True)  # the baseline, caches warm
    for i in range(args.runs):
        pairs = [("by_hand", by_hand), ("omni_host", ours)]
        for name, argv in pairs if i % 2 == 0 else pairs[::-1]:
            t = time.monotonic()
            subprocess.run(argv, capture_output=True, check=False)
            times[name].append(time.monotonic() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"runs": args.runs, "median_s": med, "fixed_s": med["omni_host"] - med["by_hand"],
              "times_s": times}
    print(json.dumps({k: result[k] for k in ("median_s", "fixed_s")}))
    if args.profile:
        prof = subprocess.run([sys.executable, "-m", "cProfile", "-s", "cumtime", "-m", "omni_host",
                               *ours[3:]], capture_output=True, text=True).stdout
        start = prof.find("   ncalls")
        result["profile"] = prof[start:].splitlines()[:45]
        imports = subprocess.run([sys.executable, "-X", "importtime", "-m", "omni_host", *ours[3:]],
                                 capture_output=True, text=True).stderr.splitlines()
        rows = [r for r in imports if r.startswith("import time:") and "|" in r]
        rows.sort(key=lambda r: -int(r.split("|")[1]) if r.split("|")[1].strip().isdigit() else 0)
        result["imports"] = rows[:25]
        print("\n".join(result["profile"][:40]))
        print("\n".join(result["imports"][:15]))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fixed_cost.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
