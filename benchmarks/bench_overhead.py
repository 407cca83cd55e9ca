"""omni-host bench against the same llama-bench by hand, interleaved, medians: the wall time of
each, the fixed cost and the ratio, each omni-host verdict, and tg128's median as each
measured it (watching must not move the number). With ``--tree`` (repeatable) each tree's
omni-host takes its turn beside the same llama-bench by hand, the order rotating round by
round, each with its own store: a change's fixed cost, before and after in one run. Run on a
lent GPU machine by bench_trust_gpu.sh, quiet_gpu.sh and overhead_trees_gpu.sh; writes
OUT/overhead.json.

    python3 benchmarks/bench_overhead.py LLAMA_BENCH MODEL INVENTORY OUT [--pairs 7] [--tree DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ARGS = ["-r", "5", "-p", "512", "-n", "128", "-ngl", "99", "-fa", "1"]  # the documented config


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("inventory")
    ap.add_argument("out")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--store", default="/tmp/store-overhead")
    ap.add_argument("--tree", action="append", default=None)
    a = ap.parse_args()
    by_hand = [a.binary, "-m", a.model, "-o", "json", *ARGS]
    trees = [os.path.abspath(t) for t in a.tree] if a.tree else [None]
    names = ["omni_host"] if a.tree is None else [f"omni_host {t}" for t in trees]

    def ours(i: int) -> tuple[list[str], dict[str, str] | None, str | None]:
        store = a.store if len(trees) == 1 else f"{a.store}-{i}"
        argv = [sys.executable, "-m", "omni_host", "bench", "-i", a.inventory, "gpu",
                "--report-dir", store, "--format", "json"]
        tree = trees[i]
        if tree is None:
            return argv, None, None
        return argv, {**os.environ, "PYTHONPATH": f"{tree}:{os.environ.get('PYTHONPATH', '')}"}, tree

    subprocess.run(by_hand, capture_output=True)  # page cache and GPU warm for all
    times: dict[str, list[float]] = {"by_hand": [], **{n: [] for n in names}}
    tg: dict[str, list[float]] = {"by_hand": [], **{n: [] for n in names}}
    statuses: dict[str, list[str]] = {n: [] for n in names}
    turns = [("by_hand", (by_hand, None, None))] + [(n, ours(i)) for i, n in enumerate(names)]
    for i in range(a.pairs):
        shift = i % len(turns)
        for name, (argv, env, cwd) in turns[shift:] + turns[:shift]:
            t = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
            times[name].append(time.monotonic() - t)
            if name == "by_hand":
                rec = next(r for r in json.loads(proc.stdout) if r["n_gen"])
                tg[name].append(statistics.median(rec["samples_ts"][1:]))
            else:
                perf = next(r for r in json.loads(proc.stdout)["hosts"][0]["results"]
                            if r["id"] == "perf.tokens-per-s")
                statuses[name].append(perf["status"])
                tg[name].append(perf["details"]["tests"]["tg128"]["center_ts"])
    med = {k: statistics.median(v) for k, v in times.items()}
    hand = med["by_hand"]
    result = {"times_s": times, "median_s": med, "tg128": tg,
              "fixed_s": {n: med[n] - hand for n in names},
              # the median of each round's difference: the rounds rotate, so drift cancels
              "paired_s": {n: statistics.median(o - h for o, h in zip(times[n], times["by_hand"],
                                                                      strict=True))
                           for n in names},
              "ratio": {n: med[n] / hand for n in names},
              "statuses": statuses,
              "tg_ratio": {n: statistics.median(tg[n]) / statistics.median(tg["by_hand"])
                           for n in names}}
    if a.tree is None:  # one tree: the form the earlier captures have
        result = {**result, **{k: result[k]["omni_host"] for k in  # type: ignore[index]
                               ("fixed_s", "ratio", "statuses", "tg_ratio")}}
    print("overhead:", json.dumps({k: result[k] for k in
                                   ("median_s", "fixed_s", "paired_s", "ratio", "statuses",
                                    "tg_ratio")}))
    with open(f"{a.out}/overhead.json", "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
