"""Benchmark: one host's full audit against ``ansible HOST -m setup``, same loopback sshd.

Run as root on a machine with openssh-server (``bash tests/setup.sh`` installs it)::

    .venv/bin/python benchmarks/bench_single_host.py [--runs 7]

Both tools run as a user would run them (a new process each time, the CLI's start-up
included), interleaved so that a noisy moment hurts both alike. omni-host's inventory cache is
warm after the first run (as for a user who audits the same inventory again); the inventory
resolution table gives the cold (through Ansible) and warm figures for 1 to 1,000 hosts.
Ansible keeps its default OpenSSH ControlPersist, so its runs after the first reuse a master
connection: that is what its users get. The medians and the ratio are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import start_sshd  # noqa: E402  (the tests' real sshd launcher)

from omni_host.evaluate.checks import catalog  # noqa: E402
from omni_host.plan.policy import reference_vars  # noqa: E402
from omni_host.probes.catalog import PROBES  # noqa: E402

BIN = Path(sys.executable).parent


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-800:]}"
                         f"{proc.stdout[-800:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-bench-"))
    sshd = start_sshd(work / "sshd")
    try:
        # Both tools use the distribution's interpreter (no pyenv shim on the path).
        inv = sshd.inventory(work / "inv", {"loop": {
            "ansible_python_interpreter": "/usr/bin/python3"}}, group_vars=reference_vars())
        env = dict(os.environ, ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_SSH_COMMON_ARGS=f"-o UserKnownHostsFile={sshd.known_hosts} "
                                           "-o StrictHostKeyChecking=yes")
        omni = [str(BIN / "omni-host"), "audit", "-i", str(inv), "loop", "--no-store",
                "--format", "json", "--known-hosts", str(sshd.known_hosts),
                "--ssh-config", str(work / "none")]
        ansible = [str(BIN / "ansible"), "loop", "-i", str(inv / "hosts.yml"), "-m", "setup"]
        help_cmd = [str(BIN / "omni-host"), "--help"]
        timed(omni, env)
        timed(ansible, env)  # warm both (imports cached, ControlPersist master up)
        omni_s, ansible_s, help_s = [], [], []
        for _ in range(args.runs):
            omni_s.append(timed(omni, env))
            ansible_s.append(timed(ansible, env))
            help_s.append(timed(help_cmd, env))
    finally:
        sshd.proc.terminate()
    resolution = {n: (inventory_resolution_s(work, n, args.runs, cached=False),
                      inventory_resolution_s(work, n, args.runs, cached=True))
                  for n in (1, 100, 1000)}
    o, a, h = (statistics.median(x) for x in (omni_s, ansible_s, help_s))
    print(f"| what (median of {args.runs}, loopback sshd) | seconds |")
    print("|---|---|")
    print(f"| `omni-host audit` (full audit: {len(PROBES)} probes, {len(catalog())} checks) "
          f"| {o:.3f} |")
    print(f"| `ansible loop -m setup` (facts only) | {a:.3f} |")
    print(f"| ratio omni-host / ansible | {o / a:.2f} (ansible is {a / o:.1f}x slower) |")
    print(f"| `omni-host --help` | {h:.3f} |")
    print()
    print("| inventory resolution, new process (import, parse, render, validate) "
          "| cold: Ansible | warm: cache |")
    print("|---|---|---|")
    for n, (cold, warm) in resolution.items():
        print(f"| {n} host(s), reference policy in group_vars | {cold:.3f} s | {warm:.3f} s |")


RESOLVE = """
import sys, time
start = time.perf_counter()
from omni_host.plan.hosts import plan_inventory
from omni_host.plan.inventory import load_inventory
plans = plan_inventory(load_inventory(sys.argv[1]), "all")
assert len(plans) == int(sys.argv[2])
print(time.perf_counter() - start)
"""


def inventory_resolution_s(work: Path, hosts: int, runs: int, *, cached: bool) -> float:
    """Median time to resolve and validate ``hosts`` hosts in a new process: through Ansible
    (an empty cache directory each run), or answered by omni-host's inventory cache."""
    import yaml

    inv = work / f"inv-{hosts}"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"inference": {"hosts": {
        f"gpu{i:04d}": {"ansible_host": f"10.1.{i // 250}.{i % 250 + 1}"}
        for i in range(hosts)}}}}}))
    (inv / "group_vars" / "inference.yml").write_text(yaml.safe_dump(reference_vars()))
    times = []
    for i in range(runs + 1):
        cache = work / ("cache" if cached else f"cache-{hosts}-{i}")
        out = subprocess.run([sys.executable, "-c", RESOLVE, str(inv), str(hosts)],
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, XDG_CACHE_HOME=str(cache))).stdout
        if i or not cached:  # the first warm run fills the cache
            times.append(float(out))
    return statistics.median(times[-runs:])


if __name__ == "__main__":
    main()
