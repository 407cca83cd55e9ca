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
import resource
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


def run_measured(argv: list[str], env: dict[str, str]) -> tuple[float, int, float, int]:
    """Wall seconds, the peak RSS (bytes) of the process and its child processes together,
    its CPU seconds (user + system, with every child it waited for: the controller's worker
    processes) and the most processes it ran at once."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    peak, most = 0, 1
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            kids = [k for k in ps.children(recursive=True)
                    if "spawn_main" in " ".join(k.cmdline())]
            peak = max(peak, ps.memory_info().rss + sum(k.memory_info().rss for k in kids))
            most = max(most, 1 + len(kids))
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {err[-1500:]}")
    return elapsed, peak, cpu, most


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


ROUND_TRIPS = 6  # TCP handshake, SSH version + key exchange (2), auth (2), session + exec
FORKS, CORES = (50, 200), 4


def projection(rows: list[dict]) -> list[str]:
    """1,000 hosts, from this run's figures. Model: each host needs its own time t_host =
    (the one-host audit, start-up included: an upper bound) + ROUND_TRIPS x RTT, FORKS at a
    time; the controller needs c CPU-s per host (the marginal cost between the smallest and the
    largest one-process fleet of this run) on min(processes, CORES) cores, plus each extra
    worker process's start-up (measured at the largest fleet, when it spread). The wall is
    whichever bound is larger."""
    single = [r for r in rows if r["processes"] == 1]
    lo, hi = single[0], single[-1]
    c = (hi["omni_cpu"] - lo["omni_cpu"]) / max(hi["n"] - lo["n"], 1)
    spread = [r for r in rows if r["processes"] > 1]
    start = ((spread[-1]["omni_cpu"] - hi["omni_cpu"] - (spread[-1]["n"] - hi["n"]) * c)
             / (spread[-1]["processes"] - 1)) if spread else 0.35
    session = rows[0]["omni"]
    out = [f"Projection for 1,000 hosts. Model: wall = max(N x t_host / forks, N x c / cores + "
           f"worker start-up); t_host = {session:.2f} s (one host, start-up included) + "
           f"{ROUND_TRIPS} x RTT; c = {c * 1000:.0f} ms of controller CPU per host (marginal, "
           f"one process, {lo['n']} -> {hi['n']} hosts); a worker process costs "
           f"{start:.2f} CPU-s to start; a {CORES}-core controller; every host "
           "answers on CPUs of its own.", "",
           "| network | forks | one process | spread over the cores | bound by (spread) |",
           "|---|---|---|---|---|"]
    for name, rtt in (("LAN, RTT 0.5 ms", 0.0005), ("WAN, RTT 50 ms", 0.050)):
        for forks in FORKS:
            net = 1000 * (session + ROUND_TRIPS * rtt) / forks
            one = max(net, 1000 * c)
            many = max(net, 1000 * c / CORES + start)
            bound = "the network (forks)" if net >= 1000 * c / CORES + start else "controller CPU"
            out.append(f"| {name} | {forks} | {one:.1f} s | {many:.1f} s | {bound} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", type=Path, default=None, help="Markdown file for the table")
    args = parser.parse_args()
    # omni-host's modules byte-compiled, as an installed package's are (this VM sets
    # PYTHONDONTWRITEBYTECODE, which would have every run compile them again)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "omni_host")],
                   check=True)
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
            o_s, a_s, o_rss, remote, o_cpu, a_cpu, procs = [], [], [], [], [], [], []
            for _ in range(args.runs):
                before = host_cpu(servers[:n])
                t, rss, cpu, most = run_measured(omni, env)
                remote.append((host_cpu(servers[:n]) - before) / n)
                o_s.append(t)
                o_rss.append(rss)
                o_cpu.append(cpu)
                procs.append(most)
                a_t, _, a_c, _ = run_measured(ansible, env)
                a_s.append(a_t)
                a_cpu.append(a_c)
            rows.append({"n": n, "omni": statistics.median(o_s), "ansible": statistics.median(a_s),
                         "rss_mib": max(o_rss) / 2**20, "host_cpu": statistics.median(remote),
                         "omni_cpu": statistics.median(o_cpu), "ansible_cpu": statistics.median(a_cpu),
                         "processes": max(procs)})
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
        "| hosts | omni-host audit (s) | ansible -m setup (s) | omni-host / ansible | "
        "controller processes | controller CPU-s: omni-host | ansible | "
        "host-side CPU per host (s) | omni-host peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['n']} | {r['omni']:.2f} | {r['ansible']:.2f} | "
                     f"{r['omni'] / r['ansible']:.2f} | {r['processes']} | "
                     f"{r['omni_cpu']:.2f} | {r['ansible_cpu']:.2f} | "
                     f"{r['host_cpu']:.3f} | {r['rss_mib']:.0f} |")
    single = [r for r in rows if r["processes"] == 1]
    if len(single) > 1:
        top = single[-1]
        per_host = (top["rss_mib"] - base["rss_mib"]) / max(top["n"] - base["n"], 1)
        lines += ["", f"Memory per host in flight: {per_host:.2f} MiB (one process, "
                  f"{base['n']} -> {top['n']} hosts; 256 hosts would add {per_host * 256:.0f} "
                  "MiB); each extra controller process adds its own interpreter (peak RSS "
                  "above counts the parent and its workers)."]
    lines += ["", *projection(rows)]
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
