"""Where the collector's CPU goes on the audited host, part by part: the payload (as
``omni-host payload`` prints it) run as an audit runs it (``python3 -I -S``), with a prelude that
times the interpreter's start, compiling the program, its imports and each probe's threads
(an in-process helper's CPU is its threads' ``thread_time``; a subprocess's CPU is the
children's rusage, not split here), median of N runs.

    python3 benchmarks/collector_split.py PAYLOAD [N]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

PRELUDE = r'''
import resource, sys, threading, time
t0 = time.process_time()
LABELS, CPU = {}, {}
_init, _run = threading.Thread.__init__, threading.Thread.run
def __init__(self, *a, **k):
    _init(self, *a, **k)
    args = k.get("args") or (a[2] if len(a) > 2 else ())
    probe = args[0] if args and isinstance(args[0], dict) else None
    self._label = probe["id"] if probe else getattr(threading.current_thread(), "_label", "?")
def run(self):
    try:
        _run(self)
    finally:
        CPU[self._label] = CPU.get(self._label, 0.0) + time.thread_time()
threading.Thread.__init__, threading.Thread.run = __init__, run
source = sys.stdin.read()
source = source[:source.rindex("\nleave()")] if "\nleave()" in source else source  # no os._exit
t1 = time.process_time()
code = compile(source, "<payload>", "exec")
t2 = time.process_time()
main_thread_before = time.thread_time()
g = {"__name__": "__main__"}
import io
real = sys.stdout
sys.stdout = io.StringIO()
exec(code, g)
sys.stdout = real
t3 = time.process_time()
self_ru = resource.getrusage(resource.RUSAGE_SELF)
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(__import__("json").dumps({"read": t1 - t0, "compile": t2 - t1,
    "main_thread": time.thread_time() - main_thread_before, "threads": CPU,
    "self": self_ru.ru_utime + self_ru.ru_stime, "children": kids.ru_utime + kids.ru_stime}))
'''


def main() -> None:
    payload = Path(sys.argv[1]).read_bytes()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    runs = []
    for _ in range(rounds):
        start = time.monotonic()
        proc = subprocess.run(["python3", "-I", "-S", "-c", PRELUDE], input=payload,
                              stdout=subprocess.PIPE, check=True)
        doc = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        doc["wall"] = time.monotonic() - start
        runs.append(doc)
    cold = subprocess.run(["python3", "-I", "-S", "-c",
                           "import resource,time;r=resource.getrusage(resource.RUSAGE_SELF);"
                           "print(r.ru_utime+r.ru_stime)"], stdout=subprocess.PIPE, check=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)
    print(f"median of {rounds}: process {med('self'):.3f} CPU-s (children {med('children'):.3f}),"
          f" wall {med('wall'):.3f} s; an empty interpreter {float(cold.stdout):.3f} CPU-s")
    for key in ("read", "compile", "main_thread"):
        print(f"  {key}: {med(key):.4f}")
    labels = sorted({k for r in runs for k in r["threads"]})
    rows = [(statistics.median(r["threads"].get(k, 0.0) for r in runs), k) for k in labels]
    for cpu, label in sorted(rows, reverse=True):
        print(f"  thread {label}: {cpu:.4f}")


if __name__ == "__main__":
    main()
