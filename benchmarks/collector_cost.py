"""The collector's cost on the audited host, side by side in one run: each payload (the
collector with its probe plan, as ``omni-host payload`` prints it) run as an audit runs it,
``python3 -I -S -``, interleaved, median of N; then each command the last payload ran on this
host, alone (median of 5: what each probe costs; an in-process one costs less inside the
collector). CPU is the children's user + system time (resource.RUSAGE_CHILDREN), so every
process a probe starts is counted.

    python3 benchmarks/collector_cost.py OUTDIR old.py [new.py] [N]

Writes OUTDIR/<payload name>.out (one run's raw output, for the verdicts) and prints a table.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def ran(output: bytes) -> list[tuple[str, list[str]]]:
    """(probe id, argv) of each probe the collector ran, from its bundle output."""
    text = output.decode("utf-8", "replace")
    doc = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    return [(p["id"], [sys.executable if a == "{python}" else a for a in p["argv"]])
            for p in doc["probes"] if p["status"] == "ran"]


def measure(argv: list[str], stdin: bytes | None = None) -> tuple[float, float, bytes]:
    """(wall s, CPU s of the process and its children, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def main() -> None:
    out = Path(sys.argv[1])
    payloads = [Path(p) for p in sys.argv[2:] if not p.isdigit()]
    rounds = int(sys.argv[-1]) if sys.argv[-1].isdigit() else 9
    out.mkdir(parents=True, exist_ok=True)
    cost: dict[str, list[tuple[float, float]]] = {p.name: [] for p in payloads}
    for _ in range(rounds):
        for payload in payloads:
            wall, cpu, stdout = measure(["python3", "-I", "-S", "-"], payload.read_bytes())
            cost[payload.name].append((wall, cpu))
            (out / f"{payload.stem}.out").write_bytes(stdout)
    print(f"collector, median of {rounds} (interleaved):")
    for name, runs in cost.items():
        print(f"  {name}: {statistics.median(c for _, c in runs):.3f} CPU-s, "
              f"{statistics.median(w for w, _ in runs):.3f} s wall")
    print(f"each command {payloads[-1].name} ran, alone, median of 5:")
    for probe, argv in ran((out / f"{payloads[-1].stem}.out").read_bytes()):
        runs = [measure(argv)[:2] for _ in range(5)]
        print(f"  {probe}: {statistics.median(c for _, c in runs):.3f} CPU-s, "
              f"{statistics.median(w for w, _ in runs):.3f} s wall  ({' '.join(argv)[:50]!r})")


if __name__ == "__main__":
    main()
