"""Benchmark: one fleet of N hosts (N real sshd on loopback, default 32) audited three ways,
side by side in one run: omni-host's own engine (`omni-host audit`), the Ansible engine
(`omni-host collect --engine ansible`, then `omni-host audit --bundle`), and the collection's
playbook (`ansible-playbook omni.host.audit`, the AWX route). Same collector, same verdicts.

    .venv/bin/python benchmarks/bench_engines.py [--hosts 32] [--runs 3] [--write docs/performance.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

from bench_fleet import BIN, host_cpu, inventory  # noqa: E402
from conftest import start_sshd  # noqa: E402

MARK = "<!-- bench_engines -->"


def timed(argv: list[str], env: dict[str, str], ok: tuple[int, ...]) -> tuple[float, float]:
    """Wall seconds and controller CPU seconds (the process and every child it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                          check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(argv[:3])} failed ({proc.returncode}): "
                         f"{proc.stderr.decode()[-1500:]}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "omni_host")], check=True)
    work = Path(tempfile.mkdtemp(prefix="omni-bench-engines-"))
    servers = [start_sshd(work / f"sshd{i}") for i in range(args.hosts)]
    known = work / "known_hosts"
    known.write_text("".join(s.known_hosts.read_text() for s in servers))
    env = dict(os.environ, ANSIBLE_SSH_COMMON_ARGS=f"-o UserKnownHostsFile={known}",
               ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO))
    inv = inventory(work / "inv", servers)
    n = str(args.hosts)
    common = ["--known-hosts", str(known), "--ssh-config", str(work / "none")]
    ways = {
        "omni-host audit (native engine)": [
            ([str(BIN / "omni-host"), "audit", "-i", str(inv), "all", "--forks", n, "--no-store",
              "--format", "json", *common], (0, 1))],
        "omni-host collect --engine ansible + audit --bundle": [
            ([str(BIN / "omni-host"), "collect", "-i", str(inv), "all", "--engine", "ansible",
              "--forks", n, "--out", str(work / "bundles"), "--known-hosts", str(known)], (0,)),
            ([str(BIN / "omni-host"), "audit", "--bundle", str(work / "bundles"), "-i", str(inv),
              "--format", "json"], (0, 1))],
        "ansible-playbook omni.host.audit (AWX route)": [
            ([str(BIN / "ansible-playbook"), "-i", str(inv / "hosts.yml"), "omni.host.audit",
              "-f", n], (0, 2))],
    }
    results: dict[str, list[tuple[float, float, float]]] = {w: [] for w in ways}
    try:
        for steps in ways.values():  # warm-up: imports cached, ControlPersist masters up
            for argv, ok in steps:
                timed(argv, env, ok)
        for _ in range(args.runs):
            for way, steps in ways.items():
                before = host_cpu(servers)
                wall = cpu = 0.0
                for argv, ok in steps:
                    w, c = timed(argv, env, ok)
                    wall, cpu = wall + w, cpu + c
                results[way].append((wall, cpu, (host_cpu(servers) - before) / args.hosts))
                print(f"{way}: {wall:.2f} s", file=sys.stderr)
    finally:
        for s in servers:
            s.proc.terminate()
    native = statistics.median(r[0] for r in results[next(iter(ways))])
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs "
        f"({platform.processor() or platform.machine()}), Python {platform.python_version()}; "
        f"{args.hosts} hosts (separate sshd on loopback, sharing this machine's CPUs), "
        f"forks {args.hosts}, median of {args.runs} runs, interleaved.",
        "",
        "| route | wall (s) | / native | controller CPU-s | host-side CPU per host (s) |",
        "|---|---|---|---|---|",
    ]
    for way, rows in results.items():
        wall = statistics.median(r[0] for r in rows)
        remote = statistics.median(r[2] for r in rows)
        # Ansible's ControlPersist master keeps each host's sshd session open past the run:
        # the listener never reaps it, so its CPU is not counted here
        shown = f"{remote:.3f}" if remote > 0 else "n/a (ControlPersist)"
        lines.append(f"| {way} | {wall:.2f} | {wall / native:.1f}x | "
                     f"{statistics.median(r[1] for r in rows):.2f} | {shown} |")
    text = "\n".join(lines)
    print(text)
    if args.write:
        head, _, rest = args.write.read_text().partition(MARK)
        tail = rest.split(MARK, 1)[1] if MARK in rest else ""
        args.write.write_text(f"{head}{MARK}\n{text}\n{MARK}{tail}")


if __name__ == "__main__":
    main()
