"""What watching a bench costs, and whether it moves the number (issue 44): the bench helper's
sampler through nvidia-smi (three processes a second) against one NVML session (library calls
every 0.25 s), side by side in one run, interleaved.

1. cost: ``run_bench`` of a stand-in that sleeps (no GPU work), so every CPU-second spent is the
   watcher's: the helper's own CPU and its children's (the nvidia-smi runs), per second watched.
2. the number: the real llama-bench of the documented config watched each way, PAIRS pairs,
   alternating which goes first; each test's median t/s.
Prints one JSON document (stdout) with every run, then the medians and ratios.

Usage (on a lent GPU machine, the tree on PYTHONPATH):
    python3 benchmarks/sampler_cost.py LLAMA_BENCH MODEL [PAIRS]
"""

from __future__ import annotations

import json
import os
import statistics
import sys

from omni_host.remote import bench as helper

WATCHED_S = "8"


def _cpu() -> float:
    t = os.times()
    return t[0] + t[1] + t[2] + t[3]


def _watch(kind: str, session: helper.Nvml | None) -> helper.Nvml | bool:
    return session if kind == "nvml" and session is not None else True


def cost(session: helper.Nvml | None, pairs: int) -> dict:
    runs = []
    for i in range(pairs):
        for kind in ("smi", "nvml") if i % 2 == 0 else ("nvml", "smi"):
            before = _cpu()
            run, during = helper.run_bench(["sleep", WATCHED_S], 60, _watch(kind, session),
                                           dict(os.environ))
            spent = _cpu() - before
            runs.append({"kind": kind, "cpu_s": round(spent, 4), "wall_s": run["duration_s"],
                         "cpu_per_s": round(spent / run["duration_s"], 4),
                         "samples": len(during.get("samples") or []),
                         "row": (during.get("samples") or [[None]])[-1]})
    medians = {k: statistics.median(r["cpu_per_s"] for r in runs if r["kind"] == k)
               for k in ("smi", "nvml")}
    return {"runs": runs, "median_cpu_per_s": medians}


def number(binary: str, model: str, session: helper.Nvml | None, pairs: int) -> dict:
    args = ["-p", "512", "-n", "128", "-ngl", "99", "-fa", "1", "-r", "5", "-o", "json"]
    runs = []
    for i in range(pairs):
        for kind in ("smi", "nvml") if i % 2 == 0 else ("nvml", "smi"):
            run, during = helper.run_bench([binary, "-m", model, *args], 300,
                                           _watch(kind, session), dict(os.environ))
            tests = {f"{'pp' if r['n_prompt'] else 'tg'}{r['n_prompt'] or r['n_gen']}":
                     statistics.median(r["samples_ts"]) for r in json.loads(run["stdout"])}
            runs.append({"kind": kind, "tests": tests, "own_cpu_s": during.get("own_cpu_s"),
                         "duration_s": run["duration_s"],
                         "samples": len(during.get("samples") or []),
                         "sampled_with": during.get("sampled_with"),
                         "first_rows": (during.get("samples") or [None])[:2],
                         "event_reasons": during.get("event_reasons")})
    out: dict = {"runs": runs, "median_ts": {}, "nvml_over_smi": {}}
    for test in runs[0]["tests"]:
        m = {k: statistics.median(r["tests"][test] for r in runs if r["kind"] == k)
             for k in ("smi", "nvml")}
        out["median_ts"][test] = m
        out["nvml_over_smi"][test] = round(m["nvml"] / m["smi"], 4)
    return out


def main() -> None:
    binary, model = sys.argv[1], sys.argv[2]
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    session = helper.open_nvml()
    doc = {"nvml": session is not None,
           "memory": session.memory() if session else None,
           "cost": cost(session, 3), "number": number(binary, model, session, pairs)}
    if session is not None:
        session.close()
    json.dump(doc, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
