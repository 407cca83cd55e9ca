"""Benchmark: one host's full audit against what an operator would run instead, on the same
loopback sshd, in one interleaved run: ``ansible HOST -m setup`` (facts only), pyinfra gathering
8 facts, testinfra running 10 checks; the floor and the cold floor; the on-host CPU per audit.

Run as root on a machine with openssh-server (``bash tests/setup.sh`` installs it)::

    python3 -m venv .venv-bench && .venv-bench/bin/pip install pyinfra pytest-testinfra
    .venv/bin/python benchmarks/bench_single_host.py [--runs 9]

(pyinfra and testinfra pin paramiko below 5: they live in their own venv, never in omni-host's.)

``--against REV`` instead times omni-host's audit at this tree and at the commit REV (a git
worktree of it), interleaved, each as ``python -m omni_host`` with its own tree first on the
path: a change's cost on one host's audit, before and after in one run (no other tool needed).

Every tool runs as a user would run it (a new process each time, the CLI's start-up included),
interleaved round by round so that a noisy moment hurts all alike. omni-host's inventory cache
is warm after the first run (as for a user who audits the same inventory again). Ansible keeps
its default OpenSSH ControlPersist, so its runs after the first reuse a master connection: that
is what its users get. testinfra uses its paramiko backend (its OpenSSH backend opens a
connection per command and is slower still).

The floor is what the host itself needs for an audit with no controller overhead: paramiko,
already imported, connects (handshake, key auth) over a socket as prompt as omni-host's own
(``prompt.Prompt``: no Nagle or delayed-ACK stalls), opens one session and runs omni-host's
own collector (every probe, in parallel) to completion. The cold floor is the wall time of the
process that measures the floor: an interpreter that imports paramiko (the lean way omni-host
does: ``loading.import_paramiko``) and nothing else of ours but the socket wrapper, does the
floor's work and exits. It is the least that any tool which starts a process per audit can
take; the ratio to it is what omni-host's own start-up, planning and judging add.

omni-host's modules are byte-compiled first, as an installed package's are (this VM sets
PYTHONDONTWRITEBYTECODE). The on-host CPU is the collector's and its probes' user + system
CPU, run as the audit runs it. Medians; the ratios are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import start_sshd  # noqa: E402  (the tests' real sshd launcher)

from omni_host.collect.run import payload  # noqa: E402
from omni_host.collect.transport.base import collector_argv  # noqa: E402
from omni_host.evaluate.checks import catalog  # noqa: E402
from omni_host.plan.policy import reference_vars  # noqa: E402
from omni_host.probes.catalog import PROBES  # noqa: E402

BIN = Path(sys.executable).parent
BENCH = REPO / ".venv-bench" / "bin"

TESTINFRA = """
def test_numactl(host): assert host.package("numactl").is_installed
def test_swaps(host): assert host.file("/proc/swaps").exists
def test_fstab(host): assert host.file("/etc/fstab").exists
def test_nproc(host): assert int(host.check_output("nproc")) >= 1
def test_python(host): assert host.exists("python3")
def test_meminfo(host): assert "MemTotal" in host.file("/proc/meminfo").content_string
def test_cpuinfo(host): assert "flags" in host.file("/proc/cpuinfo").content_string
def test_kernel(host): assert host.sysctl("kernel.osrelease")
def test_sshd(host): assert host.package("openssh-server").is_installed
def test_docker_group(host): assert host.group("root").exists
"""
PYINFRA_FACTS = ["server.Hostname", "server.Os", "server.Arch", "server.KernelVersion",
                 "server.Users", "server.Mounts", "deb.DebPackages", "server.LinuxDistribution"]

FLOOR = """
import sys, time
from omni_host.collect.transport.loading import import_paramiko
import_paramiko(None)
import paramiko
from omni_host.collect.transport.prompt import prompt_socket
port, key, known, program = sys.argv[1], sys.argv[2], sys.argv[3], open(sys.argv[4]).read()
start = time.perf_counter()
client = paramiko.SSHClient()
client.load_host_keys(known)
client.connect("127.0.0.1", port=int(port), username="root", key_filename=key,
               allow_agent=False, look_for_keys=False,
               transport_factory=lambda sock, **kw: paramiko.Transport(prompt_socket(sock), **kw))
chan = client.get_transport().open_session()
chan.exec_command("/usr/bin/python3 -I -S -")
chan.sendall(program.encode())
chan.shutdown_write()
while chan.recv(65536):
    pass
assert chan.recv_exit_status() == 0
print(time.perf_counter() - start)
client.close()
import gc; gc.freeze()
"""


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    """The process's wall seconds, start-up and exit included."""
    return run(argv, env, cwd)[0]


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str]:
    """The process's wall seconds and its standard output."""
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=cwd)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-800:]}"
                         f"{proc.stdout[-800:]}")
    return elapsed, proc.stdout


def collector_cpu(program: Path, runs: int) -> tuple[float, float]:
    """Median CPU-s (user + system, the collector and every probe it spawns) and wall of the
    collector run on this host as an audit runs it (``python3 -`` with the program on stdin)."""
    cpu, wall = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        with program.open("rb") as fh:
            subprocess.run(collector_argv("/usr/bin/python3"), stdin=fh, capture_output=True,
                           check=True)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--against", metavar="REV", default=None,
                        help="time this tree's audit against the commit REV's, and nothing else")
    args = parser.parse_args()
    if args.against:
        return against(args.against, args.runs)
    if not (BENCH / "pyinfra").exists() or not (BENCH / "pytest").exists():
        raise SystemExit("needs .venv-bench: python3 -m venv .venv-bench && "
                         ".venv-bench/bin/pip install pyinfra pytest-testinfra")
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "omni_host")],
                   check=True)
    work = Path(tempfile.mkdtemp(prefix="omni-bench-"))
    sshd = start_sshd(work / "sshd")
    program = work / "collector.py"
    program.write_text(payload(PROBES))
    try:
        # Every tool uses the distribution's interpreter on the host (no pyenv shim).
        inv = sshd.inventory(work / "inv", {"loop": {
            "ansible_python_interpreter": "/usr/bin/python3"}}, group_vars=reference_vars())
        env = dict(os.environ, ANSIBLE_LOCAL_TEMP=str(work / "ansible-tmp"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_SSH_COMMON_ARGS=f"-o UserKnownHostsFile={sshd.known_hosts} "
                                           "-o StrictHostKeyChecking=yes")
        (work / "ssh_config").write_text(
            f"Host loop\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
            f"  IdentityFile {sshd.client_key}\n  UserKnownHostsFile {sshd.known_hosts}\n"
            "  StrictHostKeyChecking yes\n")
        (work / "test_host.py").write_text(TESTINFRA)
        tools = {
            "omni-host audit": [str(BIN / "omni-host"), "audit", "-i", str(inv), "loop",
                                "--no-store", "--format", "json", "--known-hosts",
                                str(sshd.known_hosts), "--ssh-config", str(work / "none")],
            "ansible -m setup": [str(BIN / "ansible"), "loop", "-i", str(inv / "hosts.yml"),
                                 "-m", "setup"],
            "pyinfra, 8 facts": [str(BENCH / "pyinfra"), "127.0.0.1", "--ssh-port",
                                 str(sshd.port), "--ssh-user", "root", "--ssh-key",
                                 str(sshd.client_key), "--data",
                                 f"ssh_known_hosts_file={sshd.known_hosts}", "--data",
                                 "ssh_strict_host_key_checking=yes", "-y", "fact",
                                 *PYINFRA_FACTS],
            "testinfra, 10 checks": [str(BENCH / "pytest"), "-q", "-p", "no:cacheprovider",
                                     "--hosts=paramiko://loop", "--ssh-config",
                                     str(work / "ssh_config"), str(work / "test_host.py")],
            "floor": [str(BIN / "python"), "-c", FLOOR, str(sshd.port), str(sshd.client_key),
                      str(sshd.known_hosts), str(program)],
        }
        times: dict[str, list[float]] = {name: [] for name in (*tools, "cold floor")}
        for argv in tools.values():  # warm every tool once (caches, ControlPersist)
            timed(argv, env, cwd=work)
        for _ in range(args.runs):
            for name, argv in tools.items():
                wall, out = run(argv, env, cwd=work)
                if name == "floor":  # its own timing of the work, and the process's wall
                    times["floor"].append(float(out))
                    times["cold floor"].append(wall)
                else:
                    times[name].append(wall)
        cpu, cpu_wall = collector_cpu(program, args.runs)
    finally:
        sshd.proc.terminate()
    med = {name: statistics.median(t) for name, t in times.items()}
    omni = med["omni-host audit"]
    print(f"One host, loopback sshd, median of {args.runs} interleaved rounds "
          f"({os.cpu_count()} CPUs, Python {sys.version.split()[0]}):\n")
    print("| tool | seconds | omni-host / tool |")
    print("|---|---|---|")
    print(f"| `omni-host audit` (full audit: {len(PROBES)} probes, {len(catalog())} checks) "
          f"| {omni:.3f} | 1.00 |")
    for name in ("ansible -m setup", "pyinfra, 8 facts", "testinfra, 10 checks"):
        print(f"| {name} | {med[name]:.3f} | {omni / med[name]:.2f} |")
    print(f"| floor: handshake + one session + the collector, paramiko pre-imported | "
          f"{med['floor']:.3f} | omni-host is {omni / med['floor']:.2f}x the floor |")
    print(f"| cold floor: the same, by a fresh process that imports only paramiko | "
          f"{med['cold floor']:.3f} | omni-host is {omni / med['cold floor']:.2f}x the cold "
          f"floor; the cold floor is {med['cold floor'] / med['floor']:.2f}x the floor |")
    print(f"\nOn-host CPU per audit (collector and probes, user + system, median of "
          f"{args.runs}): {cpu:.3f} CPU-s, {cpu_wall:.3f} s wall.")


def against(rev: str, runs: int) -> None:
    """This tree's one-host audit against REV's, interleaved round by round."""
    work = Path(tempfile.mkdtemp(prefix="omni-against-"))
    old = work / "old"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(old), rev],
                   check=True)
    sshd = start_sshd(work / "sshd")
    try:
        trees = {"this tree": REPO, rev: old}
        for tree in trees.values():
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "omni_host")],
                           check=True)
        inv = sshd.inventory(work / "inv", {"loop": {
            "ansible_python_interpreter": "/usr/bin/python3"}}, group_vars=reference_vars())
        argv = [sys.executable, "-m", "omni_host", "audit", "-i", str(inv), "loop", "--no-store",
                "--format", "json", "--known-hosts", str(sshd.known_hosts), "--ssh-config",
                str(work / "none")]
        envs = {name: dict(os.environ, PYTHONPATH=str(tree)) for name, tree in trees.items()}
        times: dict[str, list[float]] = {name: [] for name in trees}
        for name in trees:  # warm each once (the inventory cache, the page cache)
            timed(argv, envs[name], cwd=work)
        for i in range(runs):  # which goes first alternates (a fixed order moved medians 3-5%)
            for name in (list(trees) if i % 2 == 0 else list(trees)[::-1]):
                times[name].append(timed(argv, envs[name], cwd=work))
    finally:
        sshd.proc.terminate()
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)],
                       check=False)
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"One host's audit, loopback sshd, median of {runs} interleaved rounds "
          f"({os.cpu_count()} CPUs):\n")
    print(f"| tree | seconds | min-max | this tree / {rev} |")
    print("|---|---|---|---|")
    for name, t in times.items():
        print(f"| {name} | {med[name]:.3f} | {min(t):.3f}-{max(t):.3f} | "
              f"{med['this tree'] / med[name]:.3f} |")


if __name__ == "__main__":
    main()
