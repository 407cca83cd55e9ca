"""Where the bench's fixed cost goes, on the machine it runs on: ``omni-host bench`` with the
instant llama-bench stand-in of ``bench_fixed_cost.py`` (every second is omni-host's), warmed
by three runs, then one run under cProfile (its pstats file kept, to read anywhere) and one
under ``python -X importtime``; and, without a profiler, the wall of N runs beside the time
its interpreter takes to import what the bench imports and to do nothing else, split where it
counts for a real llama-bench: the time until the host's collector starts (a shim interpreter
notes it), until llama-bench starts (the stand-in notes it: every second before it is added to
a real run), and after it ended (judging, storing, rendering: added too). Imports after the
collector started overlap the host's probes and a real llama-bench.

    python3 benchmarks/profile_fixed_cost.py --out DIR [--runs 9]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fixed_cost import stand_in  # noqa: E402  (the same stand-in, one place)

IMPORTS = ("import omni_host.cli.bench, omni_host.app.bench_run, omni_host.app.bench, "
           "omni_host.report.views, omni_host.evaluate.checks, omni_host.collect.transport.local")


def _wall(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, capture_output=True, check=False)
    return time.monotonic() - start


def _split(argv: list[str], marks: Path) -> dict[str, float]:
    """One run's wall, and when the collector and llama-bench started (time.time marks)."""
    marks.write_text("")
    start = time.time()
    subprocess.run(argv, capture_output=True, check=False)
    end = time.time()
    seen = dict(line.split() for line in marks.read_text().splitlines() if line.strip())
    collector, bench = float(seen.get("collector", "nan")), float(seen.get("bench", "nan"))
    return {"wall": end - start, "to_collector": collector - start, "to_bench": bench - start,
            "after_bench": end - bench}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="omni-prof-"))
    fake, inv = stand_in(work)
    marks = work / "marks"
    fake.write_text(f"#!/bin/sh\necho bench $(date +%s.%N) >> {marks}\n" +
                    fake.read_text().split("\n", 1)[1])
    shim = work / "python3"
    shim.write_text(f"#!/bin/sh\necho collector $(date +%s.%N) >> {marks}\n"
                    f"exec {sys.executable} \"$@\"\n")
    shim.chmod(0o755)
    doc = json.loads(inv.read_text())
    doc["all"]["hosts"]["box"]["ansible_python_interpreter"] = str(shim)
    inv.write_text(json.dumps(doc))
    bench = ["bench", "-i", str(inv), "box", "--report-dir", str(work / "store"), "--format", "json"]
    ours = [sys.executable, "-m", "omni_host", *bench]
    for _ in range(3):
        _wall(ours)
    walls = {"bench": [], "imports": [], "python": [], "to_collector": [], "to_bench": [],
             "after_bench": []}  # type: dict[str, list[float]]
    for _ in range(args.runs):
        split = _split(ours, marks)
        for key, value in split.items():
            walls["bench" if key == "wall" else key].append(value)
        walls["imports"].append(_wall([sys.executable, "-c", IMPORTS]))
        walls["python"].append(_wall([sys.executable, "-c", "pass"]))
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(args.out / "bench.prof"),
                    "-m", "omni_host", *bench], capture_output=True, check=False)
    imports = subprocess.run([sys.executable, "-X", "importtime", "-m", "omni_host", *bench],
                             capture_output=True, text=True, check=False).stderr
    (args.out / "importtime.txt").write_text(imports)
    last = json.loads(subprocess.run(ours, capture_output=True, text=True, check=False).stdout)
    medians = {k: round(statistics.median(v), 4) for k, v in walls.items()}
    result = {"medians_s": medians, "walls_s": walls, "collect_s": last["hosts"][0]["duration_s"]}
    (args.out / "walls.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({"medians_s": medians, "collect_s": result["collect_s"]}))


if __name__ == "__main__":
    main()
