"""Where the bench's fixed cost goes, on the machine it runs on: ``omni-host bench`` with the
instant llama-bench stand-in of ``bench_fixed_cost.py`` (every second is omni-host's), for
one tree or several side by side (``--tree``, interleaved run by run, the order alternating),
each warmed by three runs. Each run's wall is split where it counts for a real llama-bench:
the time until the host's collector starts (a shim interpreter notes it), until llama-bench
starts (the stand-in notes it: every second before it is added to a real run), and after it
ended (judging, storing, rendering: added too); imports after the collector started overlap
the host's probes and a real llama-bench. Beside them: the time the interpreter takes to
import what the bench imports and to do nothing else, the helper's own timing (its
preparation, its wait for the word to go) and each probe's duration from the stored bundle.
For the first tree, one run under cProfile (its pstats file, to read anywhere) and one under
``python -X importtime``.

    python3 benchmarks/profile_fixed_cost.py --out DIR [--runs 9] [--tree PATH ...] [--sleep S]

``--sleep S``: the stand-in takes S seconds before it answers, as a real llama-bench does: the
imports that overlap the host's work end within it (``after_bench`` counts from its answer).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fixed_cost import compiled, stand_in  # noqa: E402  (the same stand-in, one place)

IMPORTS = ("import omni_host.cli.bench, omni_host.app.bench_run, omni_host.app.bench, "
           "omni_host.report.views, omni_host.evaluate.checks, omni_host.collect.transport.local")


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{tree}:{os.environ.get('PYTHONPATH', '')}"}


def _wall(argv: list[str], tree: Path) -> float:
    start = time.monotonic()
    subprocess.run(argv, capture_output=True, check=False, cwd=tree, env=_env(tree))
    return time.monotonic() - start


def _newest(store: Path) -> Path:
    return max(store.glob("*/bundles/box/manifest.json"), key=lambda m: m.stat().st_mtime).parent


def _split(argv: list[str], tree: Path, marks: Path, store: Path) -> dict[str, float]:
    """One run's wall, when the collector and llama-bench started (time.time marks), and
    the helper's own timing."""
    marks.write_text("")
    start = time.time()
    subprocess.run(argv, capture_output=True, check=False, cwd=tree, env=_env(tree))
    end = time.time()
    seen = dict(line.split() for line in marks.read_text().splitlines() if line.strip())
    collector, bench = float(seen.get("collector", "nan")), float(seen.get("bench", "nan"))
    answered = float(seen.get("answered", bench))
    helper = json.loads((_newest(store) / "probes" / "bench.llama.stdout").read_text())
    timing = helper.get("timing") or {}
    return {"wall": end - start, "to_collector": collector - start, "to_bench": bench - start,
            "after_bench": end - answered, "helper_before": timing.get("before_s", float("nan")),
            "helper_waited": timing.get("waited_s", float("nan"))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--tree", type=Path, action="append", default=None)
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()
    trees = [t.resolve() for t in args.tree or [Path(__file__).resolve().parent.parent]]
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="omni-prof-"))
    fake, inv = stand_in(work)
    marks = work / "marks"
    fake.write_text(f"#!/bin/sh\necho bench $(date +%s.%N) >> {marks}\nsleep {args.sleep}\n"
                    f"echo answered $(date +%s.%N) >> {marks}\n" + fake.read_text().split("\n", 1)[1])
    shim = work / "python3"
    shim.write_text(f"#!/bin/sh\necho collector $(date +%s.%N) >> {marks}\n"
                    f"exec {sys.executable} \"$@\"\n")
    shim.chmod(0o755)
    doc = json.loads(inv.read_text())
    doc["all"]["hosts"]["box"]["ansible_python_interpreter"] = str(shim)
    inv.write_text(json.dumps(doc))

    def bench(i: int) -> list[str]:
        return [sys.executable, "-m", "omni_host", "bench", "-i", str(inv), "box",
                "--report-dir", str(work / f"store-{i}"), "--format", "json"]

    for i, tree in enumerate(trees):
        compiled(tree)
        for _ in range(3):
            _wall(bench(i), tree)
    walls: dict[str, dict[str, list[float]]] = {str(t): {} for t in trees}
    for run in range(args.runs):
        order = list(enumerate(trees))
        for i, tree in order if run % 2 == 0 else order[::-1]:
            mine = walls[str(tree)]
            for key, value in _split(bench(i), tree, marks, work / f"store-{i}").items():
                mine.setdefault(key, []).append(value)
            mine.setdefault("imports", []).append(_wall([sys.executable, "-c", IMPORTS], tree))
    first = trees[0]
    mine = walls[str(first)]
    mine["python"] = [_wall([sys.executable, "-c", "pass"], first) for _ in range(args.runs)]
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(args.out / "bench.prof"),
                    *bench(0)[1:]], capture_output=True, check=False, cwd=first, env=_env(first))
    imports = subprocess.run([sys.executable, "-X", "importtime", *bench(0)[1:]],
                             capture_output=True, text=True, check=False, cwd=first,
                             env=_env(first)).stderr
    (args.out / "importtime.txt").write_text(imports)
    manifests = {str(t): json.loads((_newest(work / f"store-{i}") / "manifest.json").read_text())
                 for i, t in enumerate(trees)}
    durations = {t: {p["id"]: p.get("duration_s") for p in m["probes"]} | {
        "collector": m["collector"].get("duration_s"), "round_trip": m["collector"].get(
            "round_trip_s")} for t, m in manifests.items()}
    medians = {t: {k: round(statistics.median(v), 4) for k, v in w.items()}
               for t, w in walls.items()}
    (args.out / "walls.json").write_text(json.dumps(
        {"medians_s": medians, "walls_s": walls, "durations_s": durations}, indent=1))
    print(json.dumps(medians, indent=1))


if __name__ == "__main__":
    main()
