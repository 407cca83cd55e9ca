"""Benchmark: a fleet of N hosts (N real sshd on loopback) audited by omni-host and by
``ansible all -m setup -f N``, side by side in one run, for N = 1, 8, 32.

    .venv/bin/pip install -e '.[bench]'     # matplotlib, for the plot only
    .venv/bin/python benchmarks/bench_fleet.py [--sizes 1 8 32] [--runs 3] [--write docs/performance.md]

Each "host" is its own sshd process on its own port, so every audit opens N SSH connections
and runs N collectors, exactly as against N machines; but all of them share this machine's
CPUs, which the table states. The peak memory of the omni-host process is sampled with psutil.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import start_sshd  # noqa: E402  (the tests' real sshd launcher)

BIN = Path(sys.executable).parent


def run_measured(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and the peak RSS (bytes) of the process itself."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak = 0
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {err[-1500:]}")
    return elapsed, peak


def host_cpu(servers: list) -> float:
    """CPU seconds the "hosts" spent (each sshd's finished sessions: sshd, shell, collector
    and every probe), read from the listeners' reaped-children counters."""
    total = 0.0
    for s in servers:
        t = psutil.Process(s.proc.pid).cpu_times()
        total += t.children_user + t.children_system
    return total


def inventory(path: Path, servers: list) -> Path:
    hosts = {
        f"h{i:02d}": {"ansible_host": "127.0.0.1", "ansible_port": s.port, "ansible_user": s.user,
                      "ansible_ssh_private_key_file": str(s.client_key),
                      "ansible_python_interpreter": "/usr/bin/python3"}
        for i, s in enumerate(servers)}
    path.mkdir(parents=True, exist_ok=True)
    (path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"fleet": {
        "hosts": hosts, "vars": {"omni_numa_nps": 1, "omni_swap_size_mib": 204800}}}}}))
    return path


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(sizes, [r["omni"] for r in rows], "o-", label="omni-host audit (full audit)")
    ax.plot(sizes, [r["ansible"] for r in rows], "s-", label="ansible all -m setup -f N (facts only)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel("hosts (sshd on loopback, forks = N)")
    ax.set_ylabel("seconds (median)")
    ax.set_title("Fleet audit time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", type=Path, default=None, help="Markdown file for the table")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-bench-fleet-"))
    servers = [start_sshd(work / f"sshd{i}") for i in range(max(args.sizes))]
    known = work / "known_hosts"
    known.write_text("".join(s.known_hosts.read_text() for s in servers))
    env = dict(os.environ, ANSIBLE_SSH_COMMON_ARGS=f"-o UserKnownHostsFile={known}",
               ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"), ANSIBLE_NOCOLOR="1")
    rows = []
    try:
        for n in args.sizes:
            inv = inventory(work / f"inv{n}", servers[:n])
            omni = [str(BIN / "omni-host"), "audit", "-i", str(inv), "all", "--forks", str(n),
                    "--no-store", "--format", "json", "--known-hosts", str(known),
                    "--ssh-config", str(work / "none")]
            ansible = [str(BIN / "ansible"), "all", "-i", str(inv / "hosts.yml"), "-m", "setup",
                       "-f", str(n)]
            run_measured(omni, env)
            run_measured(ansible, env)  # warm-up: imports cached, ControlPersist masters up
            o_s, a_s, o_rss, remote = [], [], [], []
            for _ in range(args.runs):
                before = host_cpu(servers[:n])
                t, rss = run_measured(omni, env)
                remote.append((host_cpu(servers[:n]) - before) / n)
                o_s.append(t)
                o_rss.append(rss)
                a_s.append(run_measured(ansible, env)[0])
            rows.append({"n": n, "omni": statistics.median(o_s), "ansible": statistics.median(a_s),
                         "rss_mib": max(o_rss) / 2**20, "host_cpu": statistics.median(remote)})
            print(f"N={n}: omni {rows[-1]['omni']:.2f}s ansible {rows[-1]['ansible']:.2f}s "
                  f"rss {rows[-1]['rss_mib']:.0f} MiB", file=sys.stderr)
    finally:
        for s in servers:
            s.proc.terminate()
    base = rows[0]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs "
        f"({platform.processor() or platform.machine()}), Python {platform.python_version()}; "
        f"median of {args.runs} runs; every host is a separate sshd on loopback, all sharing "
        "this machine's CPUs.",
        "",
        "| hosts | omni-host audit (s) | ansible -m setup (s) | ansible / omni-host | "
        "omni-host vs 1 host | host-side CPU per host (s) | omni-host peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['n']} | {r['omni']:.2f} | {r['ansible']:.2f} | "
                     f"{r['ansible'] / r['omni']:.1f}x | {r['omni'] / base['omni']:.2f}x | "
                     f"{r['host_cpu']:.3f} | {r['rss_mib']:.0f} |")
    if len(rows) > 1:
        per_host = (rows[-1]["rss_mib"] - base["rss_mib"]) / max(rows[-1]["n"] - base["n"], 1)
        lines += ["", f"Memory per host in flight: {per_host:.2f} MiB "
                  f"(256 hosts would add {per_host * 256:.0f} MiB)."]
    text = "\n".join(lines)
    print(text)
    if args.write:
        png = args.write.with_suffix(".png")
        plot(rows, png)
        args.write.write_text(args.write.read_text().split("<!-- bench_fleet -->")[0]
                              + "<!-- bench_fleet -->\n" + text + f"\n\n![scaling]({png.name})\n"
                              if args.write.exists() else text + "\n")


if __name__ == "__main__":
    main()
