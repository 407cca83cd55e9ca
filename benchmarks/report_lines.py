"""The lines of a `--format json` report a GPU benchmark script prints: each named check's
status and summary per host, and the bench's own verdict details. Shared by bench_gpu.sh and
bench_trust_gpu.sh (one reader of the report's JSON in the benchmarks).

    python3 benchmarks/report_lines.py REPORT.json CHECK_ID...
"""

from __future__ import annotations

import json
import sys


def main(path: str, checks: list[str]) -> None:
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except ValueError:  # a refused or failed run wrote no report: its exit line said why
        return
    for host in doc["hosts"]:
        for result in host.get("results") or []:
            if result["id"] not in checks:
                continue
            print("  ", result["id"], result["status"], result["summary"][:900])
            details = result.get("details") or {}
            if "changed" in details or "unfit" in details:
                print("   changed:", details.get("changed"), "unfit:", details.get("unfit"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
