"""The audit as an Ansible playbook (``omni.host.audit``, an AWX job template): the collector
runs over Ansible's own connection, the controller judges each host under its hostvars with
the same checks. Same verdicts as ``omni-host audit``, check by check; the failed hosts are
the failing ones."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, Sshd, free_port, run_cli

pytestmark = pytest.mark.system  # sshd and ansible-playbook processes

BIN = Path(sys.executable).parent
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=\d+\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def play(sshd: Sshd, inv: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_SSH_COMMON_ARGS": f"-o UserKnownHostsFile={sshd.known_hosts}"}
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), "omni.host.audit",
                           *extra], capture_output=True, text=True, env=env, check=False,
                          timeout=300)


def recap(stdout: str) -> dict[str, tuple[int, int]]:
    """Host -> (unreachable, failed), from the PLAY RECAP."""
    return {m[1]: (int(m[3]), int(m[4])) for m in RECAP.finditer(stdout)}


# Summaries that quote what moves between two collections seconds apart: the uptime
# (gpu.xid), containers, and the servers' pages (on swap, in huge pages, resident) on a busy
# machine with swap; one full run under ordinary-machine differed in one of them.
MOVING = {"docker.healthchecks", "gpu.xid", "serve.memory", "kernel.thp", "serve.model-pages"}


def statuses(found: dict[str, list]) -> dict[str, list]:
    """``verdicts`` without the summaries: each check's id and status."""
    return {host: [(check, status) for check, status, _ in results]
            for host, results in found.items()}


def steady(found: dict[str, list]) -> dict[str, list]:
    """``verdicts`` of the checks whose summaries do not quote what moves (``MOVING``)."""
    return {host: [v for v in results if v[0] not in MOVING] for host, results in found.items()}


def verdicts(doc: dict) -> dict[str, list]:
    return {h["host"]: [(r["id"], r["status"], r["summary"]) for r in h["results"]]
            for h in doc["hosts"] if h["reachable"]}


def test_the_audit_playbook_gives_omni_host_audits_verdicts_and_fails_the_failing_hosts(
        sshd: Sshd, tmp_path: Path) -> None:
    py = {"ansible_python_interpreter": "/usr/bin/python3"}
    inv = sshd.inventory(tmp_path / "inv", {
        "fine": {**py, "omni_swap_max_used_pct": 100},
        "short": {**py, "omni_swap_size_mib": 10_000_000},  # 9.5 TiB of swap: no host has it
        "gone": {**py, "ansible_port": free_port()},
    }, group_vars={"omni_numa_nps": 1})
    bundles = tmp_path / "bundles"
    played = play(sshd, inv, "-e", f"audit_bundle_dir={bundles}")
    by_host = recap(played.stdout)
    assert by_host["gone"][0] == 1, played.stdout[-3000:]
    live = run_cli("audit", "-i", str(inv), "--format", "json", "--no-store", "--known-hosts",
                   str(sshd.known_hosts), "--ssh-config", str(sshd.workdir / "none"))
    want = verdicts(json.loads(live.stdout))
    failing = {h for h, results in want.items() if any(v[1] == "fail" for v in results)}
    assert "short" in failing
    assert {h for h, (_, failed) in by_host.items() if failed} == failing, played.stdout[-3000:]
    assert played.returncode != 0
    # the bundles the play wrote judge, offline, to the live audit's verdicts check by check
    offline = run_cli("audit", "--bundle", str(bundles), "-i", str(inv), "--format", "json")
    got = verdicts(json.loads(offline.stdout))
    assert statuses(got) == statuses(want)
    assert steady(got) == steady(want)
    manifest = json.loads((bundles / "short" / "manifest.json").read_text())
    assert manifest["transport"] == "ansible"
    assert oct((bundles / "short").stat().st_mode & 0o777) == "0o700"
    # the task's message names the failing check
    assert "swap.capacity" in played.stdout


def test_fail_on_never_reports_without_failing_and_a_bad_value_is_refused(sshd: Sshd,
                                                                         tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"short": {
        "ansible_python_interpreter": "/usr/bin/python3", "omni_swap_size_mib": 10_000_000}})
    quiet = play(sshd, inv, "-e", "audit_fail_on=never")
    assert quiet.returncode == 0, quiet.stdout[-3000:]
    assert recap(quiet.stdout)["short"] == (0, 0)
    wrong = play(sshd, inv, "-e", "audit_fail_on=sometimes")
    assert wrong.returncode != 0
    assert "fail_on" in wrong.stdout and "sometimes" in wrong.stdout


def test_an_invalid_policy_is_the_hosts_one_line_failure(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"typo": {"omni_swap_size_mb": 1024}})
    played = play(sshd, inv)
    assert recap(played.stdout)["typo"] == (0, 1)
    assert "typo: " in played.stdout and "omni_swap_size_mb" in played.stdout
    assert "Traceback" not in played.stdout + played.stderr


def test_the_play_over_the_local_connection_judges_as_omni_host_audit(tmp_path: Path) -> None:
    """``ansible_connection: local`` (the controller auditing itself, as on the lent H100):
    the collector's program reaches its stdin as bytes (a str failed with "memoryview: a
    bytes-like object is required"), and the verdicts are omni-host audit's."""
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text(
        "all:\n  hosts:\n    self:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n      omni_numa_nps: 1\n"
        "      omni_build_packages: []\n      omni_swap_max_used_pct: 100\n")
    bundles = tmp_path / "bundles"
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_NOCOLOR": "1"}
    played = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), "omni.host.audit",
                             "-e", f"audit_bundle_dir={bundles}", "-e", "audit_fail_on=never"],
                            capture_output=True, text=True, env=env, check=False, timeout=300)
    assert played.returncode == 0, played.stdout[-3000:]
    assert recap(played.stdout)["self"] == (0, 0)
    live = run_cli("audit", "-i", str(inv), "--format", "json", "--no-store")
    offline = run_cli("audit", "--bundle", str(bundles), "-i", str(inv), "--format", "json")
    want, got = verdicts(json.loads(live.stdout)), verdicts(json.loads(offline.stdout))
    assert statuses(got) == statuses(want) and steady(got) == steady(want)


HANG = "#!/bin/sh\ncat > /dev/null\nsleep 90\n"  # an interpreter that does not answer in time
FLOOD = "#!/bin/sh\ncat > /dev/null\nexec yes 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'\n"
# Runs a command and prints its exit code, seconds and its children's peak RSS (MiB).
MEASURE = """
import resource, subprocess, sys, time
start = time.monotonic()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(done.returncode, round(time.monotonic() - start, 1),
      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
sys.stderr.write(done.stdout[-4000:] + done.stderr[-2000:])
"""


def measured(argv: list[str], env: dict[str, str]) -> tuple[int, float, int, str]:
    proc = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True,
                          text=True, timeout=400, env=env, check=True)
    code, seconds, rss = proc.stdout.split()
    return int(code), float(seconds), int(rss), proc.stderr


@pytest.mark.parametrize("name, text", [("hang", HANG), ("flood", FLOOD)])
def test_the_play_is_bounded_as_the_audit_is(sshd: Sshd, tmp_path: Path, name: str,
                                            text: str) -> None:
    """A host whose interpreter hangs held ``ansible-playbook omni.host.audit`` for good, and
    one printing without end for 241 s and about 1 GB (the connection buffers every byte);
    ``omni-host audit`` gives up at its deadline and at the cap. The host-side command bounds
    itself now: the play's time and memory are within 1.5x of the audit's."""
    interp = tmp_path / "python3"
    interp.write_text(text)
    interp.chmod(0o755)
    inv = sshd.inventory(tmp_path / "inv", {"box": {"ansible_python_interpreter": str(interp)}})
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_SSH_COMMON_ARGS": f"-o UserKnownHostsFile={sshd.known_hosts}"}
    audit = measured([str(BIN / "omni-host"), "audit", "-i", str(inv), "--no-store",
                      "--probe-timeout", "2", "--known-hosts", str(sshd.known_hosts),
                      "--ssh-config", str(tmp_path / "none")], env)
    played = measured([str(BIN / "ansible-playbook"), "-i", str(inv), "omni.host.audit",
                       "-e", "audit_probe_timeout=2"], env)
    assert audit[0] == 3, audit[3]
    assert played[0] != 0 and recap(played[3])["box"] == (0, 1), played[3]
    # the deadline: the longest chain of a probe and its fallbacks (the NVML reader, then
    # nvidia-smi, then pynvml: 3 x 2 s) and 15 s of slack
    reason = ("the collector did not finish within 21s" if name == "hang"
              else "the host's output passed 16 MiB")
    assert f"box: {reason}" in played[3], played[3]
    print(f"{name}: audit {audit[1]} s {audit[2]} MiB; play {played[1]} s {played[2]} MiB")
    assert played[1] <= 1.5 * audit[1] + 5, (played, audit)  # + ansible-playbook's start-up
    assert played[2] <= 1.5 * audit[2], (played, audit)
