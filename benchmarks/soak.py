"""Soak runs of issue 34's two intermittent faults, under a CPU hog on every CPU.

``unreachable``: host audits over the tests' loopback sshd, ten hosts per run (one sshd, ten
names), counting the hosts reported unreachable; a healthy host must never be.

``sigint``: a five-host audit of hosts that accept and never answer (each would hold the
audit to its deadline), SIGINT at a random moment of its first second; counts the runs that
did not end interrupted (exit 130) within 5 s.

Run as root on a machine with openssh-server (``bash tests/setup.sh`` installs it)::

    .venv/bin/python benchmarks/soak.py unreachable --hosts 1000
    .venv/bin/python benchmarks/soak.py sigint --runs 500
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import start_sshd  # noqa: E402  (the tests' real sshd launcher)

OMNI = [sys.executable, "-m", "omni_host"]


def hogs() -> list[subprocess.Popen]:
    """One busy loop per CPU, and one more."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range((os.cpu_count() or 1) + 1)]


def unreachable(hosts: int, work: Path) -> int:
    sshd = start_sshd(work / "sshd")
    per_run = 10
    inv = sshd.inventory(work / "inv", {f"h{i}": {"ansible_python_interpreter": "/usr/bin/python3"}
                                        for i in range(per_run)})
    try:
        return _audits(hosts, inv, sshd.known_hosts, work)
    finally:
        assert sshd.proc is not None
        sshd.proc.terminate()  # also when an audit's output stops the soak


def _audits(hosts: int, inv: Path, known_hosts: Path, work: Path) -> int:
    lost, done, messages = 0, 0, []
    started = time.monotonic()
    while done < hosts:
        run = subprocess.run([*OMNI, "audit", "-i", str(inv), "--no-store", "--format", "json",
                              "--known-hosts", str(known_hosts), "--ssh-config",
                              str(work / "none")], capture_output=True, text=True, check=False)
        if not run.stdout.strip():
            raise SystemExit(f"the audit printed no report (exit {run.returncode}): "
                             f"{run.stderr.strip()[-500:]}")
        doc = json.loads(run.stdout)
        bad = [h for h in doc["hosts"] if not h["reachable"]]
        lost += len(bad)
        messages += [line for line in run.stderr.splitlines() if "unreachable" in line]
        done += len(doc["hosts"])
    print(f"{done} host audits in {time.monotonic() - started:.0f} s under "
          f"{(os.cpu_count() or 1) + 1} busy loops: {lost} unreachable")
    for line in messages[:5]:
        print("  " + line)
    return lost


def silent_hosts(work: Path, count: int) -> Path:
    """Listeners that accept and never send a banner; the inventory of them."""
    ports, held = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        ports.append(s.getsockname()[1])

        def accept(server: socket.socket = s) -> None:
            while True:
                held.append(server.accept()[0])

        threading.Thread(target=accept, daemon=True).start()
    inv = work / "silent.json"
    inv.write_text(json.dumps({"all": {"hosts": {
        f"h{i}": {"ansible_host": "127.0.0.1", "ansible_port": p} for i, p in enumerate(ports)}}}))
    return inv


def sigint(runs: int, work: Path) -> int:
    """Lost: the audit went on past 5 s after the signal (each host holds it for 30 s). An
    interrupted end is exit 130, or death by SIGINT after its "interrupted" line (the
    interpreter re-raises SIGINT at exit where a library ran code through PyRun_String while
    the KeyboardInterrupt passed: a shell reads both as 130). Counted apart: the runs the
    signal reached before omni-host's code ran (a traceback of the interpreter's start-up)."""
    inv = silent_hosts(work, 5)
    lost, early, seen = 0, 0, {}
    for _ in range(runs):
        proc = subprocess.Popen([*OMNI, "audit", "-i", str(inv), "all", "--no-store",
                                 "--connect-timeout", "30"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(random.uniform(0.0, 1.0))
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            lost += 1
            print(f"  lost: still running 5 s after the signal: {err.strip()[-200:]!r}")
            continue
        last = err.strip().splitlines()[-1] if err.strip() else ""
        how = "130" if proc.returncode == 130 else f"{proc.returncode}: {last[:60]}"
        seen[how] = seen.get(how, 0) + 1
        if proc.returncode not in (130, -signal.SIGINT):
            early += 1
            print(f"  not an interrupted end: exit {proc.returncode}: {err.strip()[-200:]!r}")
    print(f"{runs} SIGINTs in the first second of a 5-host audit under "
          f"{(os.cpu_count() or 1) + 1} busy loops: {lost} lost, {early} ended otherwise "
          f"(exits: {seen})")
    return lost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("unreachable", "sigint"))
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    busy = hogs()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.what == "unreachable":
                return 1 if unreachable(args.hosts, Path(tmp)) else 0
            return 1 if sigint(args.runs, Path(tmp)) else 0
    finally:
        for hog in busy:
            hog.kill()


if __name__ == "__main__":
    sys.exit(main())
