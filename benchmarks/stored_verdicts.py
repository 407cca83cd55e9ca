"""Each stored bench of a store, oldest first, in one line: its verdict, whether it ran twice
(the first run's verdicts and why it was disturbed), its disturbances and why it was unfit;
what a fixed-cost comparison needs to tell a slower tree from a run measured twice.

    python3 benchmarks/stored_verdicts.py STORE [STORE ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    for store in sys.argv[1:]:
        print(f"== {store}")
        for report in sorted(Path(store).glob("*/report.json")):
            host = json.loads(report.read_text())["hosts"][0]
            perf = next((r for r in host.get("results", []) if r["id"] == "perf.tokens-per-s"), None)
            if perf is None:
                continue
            d = perf.get("details") or {}
            first = d.get("first_run") or {}
            print(json.dumps({
                "at": report.parent.name[:19], "status": perf["status"],
                "first": {n: v.get("status") for n, v in (first.get("verdicts") or {}).items()},
                "first_disturbed": first.get("disturbed"),
                "disturbances": d.get("disturbances"), "unfit": d.get("unfit"),
                "summary": perf["summary"][:400]}))


if __name__ == "__main__":
    main()
