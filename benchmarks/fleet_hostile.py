"""Benchmark (issue 43): a fleet of 20 hosts of which 5 are hostile, against the same fleet all
healthy, side by side in one run: does every healthy host finish within its usual time?

Each host is its own real sshd on loopback (tests/conftest.start_sshd). A hostile host's
sessions get a PATH (sshd's SetEnv) whose first folder holds what a hostile or broken host
answers with: a dmidecode that prints one 5 MB whitespace line (86 s of regex backtracking in
the controller before), a dmidecode that never answers, an nvidia-smi that prints 2 MB of
garbage, a numactl that floods 20 MB. The 15 healthy hosts are audited alone, then with the
5 hostile ones, each fleet at once (``--forks 20``), three times each way.

    .venv/bin/python benchmarks/fleet_hostile.py [--hosts 20] [--hostile 5] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from conftest import start_sshd  # noqa: E402  (the tests' real sshd launcher)

HOSTILE = {  # what the first folder of a hostile host's PATH holds
    "dmidecode": "#!/bin/sh\nprintf '\\tSize: 16 GB\\n\\t'; head -c 5000000 /dev/zero | tr '\\0' ' '; "
                 "echo x\n",
    "nvidia-smi": "#!/bin/sh\nhead -c 2000000 /dev/urandom | base64\n",
    "numactl": "#!/bin/sh\nyes 'node 0 cpus: 0 1 2 3 4 5 6 7 8 9 10 11 12 13' | head -c 20000000\n",
}
HANGS = {"dmidecode": "#!/bin/sh\nexec sleep 600\n"}  # a second kind: never answers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--hostile", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="omni-fleet-hostile-"))
    kinds = []
    for i, tools in enumerate((HOSTILE, HANGS)):
        folder = work / f"hostile-bin-{i}"
        folder.mkdir()
        for name, text in tools.items():
            (folder / name).write_text(text)
            (folder / name).chmod(0o755)
        kinds.append(folder)
    servers, hosts = [], {}
    for i in range(args.hosts):
        hostile = i < args.hostile
        extra = f"SetEnv PATH={kinds[i % 2]}:/usr/sbin:/usr/bin:/sbin:/bin\n" if hostile else ""
        sshd = start_sshd(work / f"sshd{i}", extra=extra)
        servers.append(sshd)
        hosts[f"{'bad' if hostile else 'ok'}{i:02d}"] = {
            "ansible_host": "127.0.0.1", "ansible_port": sshd.port, "ansible_user": sshd.user,
            "ansible_ssh_private_key_file": str(sshd.client_key)}
    known = work / "known_hosts"
    known.write_text("".join(s.known_hosts.read_text() for s in servers))
    try:
        table = {}
        healthy = {n: h for n, h in hosts.items() if n.startswith("ok")}
        for label, chosen in (("healthy alone", healthy), ("with the hostile", hosts)):
            inv = work / f"{label.replace(' ', '-')}.yml"
            inv.write_text(yaml.safe_dump({"all": {"vars": {"omni_build_packages": []},
                                                   "hosts": chosen}}))
            table[label] = [_audit(inv, known, work) for _ in range(args.runs)]
        _report(table)
    finally:
        for sshd in servers:
            if sshd.proc is not None:
                sshd.proc.kill()


def _audit(inv: Path, known: Path, work: Path) -> dict:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "omni_host", "audit", "-i", str(inv), "all",
                           "--forks", "20", "--known-hosts", str(known), "--ssh-config",
                           str(work / "none"), "--no-store", "--format", "json"],
                          capture_output=True, text=True)
    wall = time.monotonic() - start
    doc = json.loads(proc.stdout)
    return {"wall_s": wall, "exit": proc.returncode,
            "hosts": {h["host"]: (h["duration_s"], h["reachable"], h.get("error"))
                      for h in doc["hosts"]},
            "traceback": "Traceback" in proc.stderr, "stderr": proc.stderr[-600:]}


def _report(table: dict) -> None:
    for label, runs in table.items():
        healthy = [d for run in runs for name, (d, _, _) in run["hosts"].items()
                   if name.startswith("ok")]
        hostile = [d for run in runs for name, (d, _, _) in run["hosts"].items()
                   if name.startswith("bad")]
        print(f"{label}: fleet wall {statistics.median(r['wall_s'] for r in runs):.1f} s "
              f"(median of {len(runs)}); healthy hosts median {statistics.median(healthy):.2f} s, "
              f"max {max(healthy):.2f} s"
              + (f"; hostile hosts median {statistics.median(hostile):.2f} s, max "
                 f"{max(hostile):.2f} s" if hostile else "")
              + f"; tracebacks {sum(r['traceback'] for r in runs)}; exits "
              f"{sorted({r['exit'] for r in runs})}")
    last = table["with the hostile"][-1]["hosts"]
    for name in sorted(last):
        if name.startswith("bad"):
            print(f"  {name}: {last[name][0]:.2f} s, reachable {last[name][1]}, {last[name][2]}")


if __name__ == "__main__":
    main()
