"""The bench's own cost, an earlier tree against this one, interleaved in one run: each tree's
`omni-host bench` of this machine with a llama-bench that answers at once (the real H100
capture printed by a script, as benchmarks/bench_fixed_cost.py does), so the wall time is all
omni-host's: start, inventory, the audit's probes, the helper's gate and context, evaluation,
storing. Medians of N each, alternating which goes first; also the collector's wall inside it
(the report's duration) and the helper's own before-phase.

    python3 benchmarks/fixed_cost_ab.py OLD_TREE NEW_TREE [--runs 15] [--out FILE]
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


def one(tree: Path, inv: Path, store: Path) -> dict[str, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "omni_host", "bench", "-i", str(inv), "box",
                           "--report-dir", str(store), "--format", "json"], cwd=tree,
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": f"{tree}:{os.environ.get('PYTHONPATH', '')}"})
    wall = time.monotonic() - start
    host = json.loads(proc.stdout)["hosts"][0]
    perf = next(r for r in host["results"] if r["id"] == "perf.tokens-per-s")
    return {"wall": wall, "collect": float(host["duration_s"]), "status": perf["status"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-fixed-ab-"))
    _, inv = stand_in(work, max_busy_pct=100)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    for tree in trees.values():
        compiled(tree)
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for name, tree in trees.items():  # each tree's baseline, caches warm
        one(tree, inv, work / f"store-{name}")
    for i in range(args.runs):
        order = ["old", "new"] if i % 2 == 0 else ["new", "old"]
        for name in order:
            runs[name].append(one(trees[name], inv, work / f"store-{name}"))
    result = {name: {"wall_s": statistics.median(r["wall"] for r in rs),
                     "collect_s": statistics.median(r["collect"] for r in rs),
                     "statuses": sorted({str(r["status"]) for r in rs})}
              for name, rs in runs.items()}
    result["runs"] = runs  # type: ignore[assignment]
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
