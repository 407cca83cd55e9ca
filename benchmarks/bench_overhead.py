"""omni-host bench against the same llama-bench by hand, interleaved pairs, medians: the wall
time of each, the fixed cost and the ratio, each omni-host verdict, and tg128's median as each
measured it (watching must not move the number). Run on a lent GPU machine by
bench_trust_gpu.sh and quiet_gpu.sh; writes OUT/overhead.json.

    python3 benchmarks/bench_overhead.py LLAMA_BENCH MODEL INVENTORY OUT [--pairs 7]
"""

from __future__ import annotations

import argparse
import json
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
    a = ap.parse_args()
    by_hand = [a.binary, "-m", a.model, "-o", "json", *ARGS]
    ours = [sys.executable, "-m", "omni_host", "bench", "-i", a.inventory, "gpu", "--report-dir",
            a.store, "--format", "json"]
    subprocess.run(by_hand, capture_output=True)  # page cache and GPU warm for both
    times: dict[str, list[float]] = {"by_hand": [], "omni_host": []}
    tg: dict[str, list[float]] = {"by_hand": [], "omni_host": []}
    statuses = []
    for i in range(a.pairs):
        for name, argv in (("by_hand", by_hand), ("omni_host", ours))[:: 1 if i % 2 == 0 else -1]:
            t = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True)
            times[name].append(time.monotonic() - t)
            if name == "by_hand":
                rec = next(r for r in json.loads(proc.stdout) if r["n_gen"])
                tg[name].append(statistics.median(rec["samples_ts"][1:]))
            else:
                perf = next(r for r in json.loads(proc.stdout)["hosts"][0]["results"]
                            if r["id"] == "perf.tokens-per-s")
                statuses.append(perf["status"])
                tg[name].append(perf["details"]["tests"]["tg128"]["center_ts"])
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {"times_s": times, "median_s": med, "fixed_s": med["omni_host"] - med["by_hand"],
              "ratio": med["omni_host"] / med["by_hand"], "statuses": statuses, "tg128": tg,
              "tg_ratio": statistics.median(tg["omni_host"]) / statistics.median(tg["by_hand"])}
    print("overhead:", json.dumps({k: result[k] for k in
                                   ("median_s", "fixed_s", "ratio", "statuses", "tg_ratio")}))
    with open(f"{a.out}/overhead.json", "w") as fh:
        json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
