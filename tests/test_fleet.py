"""Fleets: many hosts in one bounded pool. A silent host, a host killed mid-audit and a half
refusing fleet each cost only themselves."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import PLAYBOOKS, REPO, Sshd, free_port, run_cli, start_sshd

from omni_host.collect.pool import run_pool


@pytest.fixture
def silent_port():
    """A TCP server that accepts connections and never says a word (not even a banner)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def audit(sshd: Sshd, inv: Path, *extra: str):
    return run_cli("audit", "-i", str(inv), "--format", "json", "--no-store", "--known-hosts",
                   str(sshd.known_hosts), "--ssh-config", str(sshd.workdir / "none"), *extra)


def hosts(stdout: str) -> dict[str, dict]:
    return {h["host"]: h for h in json.loads(stdout)["hosts"]}


def test_silent_host_times_out_at_its_deadline(sshd: Sshd, tmp_path: Path, silent_port: int) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"good": {}, "silent": {"ansible_port": silent_port}})
    result = audit(sshd, inv, "--connect-timeout", "30", "--host-timeout", "2")
    assert result.code == 3
    by_host = hosts(result.stdout)
    assert by_host["good"]["reachable"] and by_host["good"]["duration_s"] < 2
    assert by_host["silent"]["error"] == "no answer within the host deadline of 2s"
    assert result.seconds < 10


def test_silent_host_connect_timeout(sshd: Sshd, tmp_path: Path, silent_port: int) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"silent": {"ansible_port": silent_port}})
    result = audit(sshd, inv, "--connect-timeout", "1")
    assert result.code == 3
    assert "silent: unreachable: " in result.stderr
    assert result.seconds < 8


def _command_lines(process: psutil.Process) -> list[str]:
    """The command lines of the process's descendants, read once each: a child that ends
    (or is a zombie) between listing and reading is left out, never raised."""
    out = []
    for child in process.children(recursive=True):
        try:
            out.append(" ".join(child.cmdline()))
        except psutil.Error:
            continue
    return out


def test_host_killed_mid_audit(sshd: Sshd, tmp_path: Path) -> None:
    doomed = start_sshd(tmp_path / "doomed")
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    inv = tmp_path / "inv"
    inv.mkdir()
    entries = {name: {"ansible_host": "127.0.0.1", "ansible_port": server.port,
                      "ansible_user": server.user,
                      "ansible_ssh_private_key_file": str(server.client_key), **extra}
               for name, server, extra in (("good", sshd, {}),
                                           ("doomed", doomed, {"ansible_python_interpreter": str(slow)}))}
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": entries}}))
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts.read_text() + doomed.known_hosts.read_text())
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_host.cli", "audit", "-i", str(inv), "--format", "json",
         "--no-store", "--known-hosts", str(known), "--ssh-config", str(tmp_path / "none")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    listener = psutil.Process(doomed.proc.pid)
    deadline = time.monotonic() + 60  # until the collector runs there (2 s was not, under load)
    while not any("sleep" in line for line in _command_lines(listener)):
        assert time.monotonic() < deadline and proc.poll() is None, "the doomed host was never reached"
        time.sleep(0.1)
    for child in listener.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    listener.kill()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    by_host = hosts(out)
    assert by_host["good"]["reachable"]
    assert not by_host["doomed"]["reachable"]
    assert "connection lost" in by_host["doomed"]["error"]


def test_half_of_32_hosts_refuse(sshd: Sshd, tmp_path: Path) -> None:
    closed = [free_port() for _ in range(16)]
    fleet = {f"ok{i:02d}": {} for i in range(16)}
    fleet.update({f"no{i:02d}": {"ansible_port": port} for i, port in enumerate(closed)})
    inv = sshd.inventory(tmp_path / "inv", fleet, group_vars={"omni_numa_nps": 1})
    result = audit(sshd, inv, "--forks", "32")
    assert result.code == 3
    doc = json.loads(result.stdout)
    assert doc["summary"]["hosts"] == 32 and doc["summary"]["unreachable"] == 16, \
        [(h["host"], h["error"]) for h in doc["hosts"] if h["host"].startswith("ok")
         and not h["reachable"]]
    by_host = hosts(result.stdout)
    for i in range(16):
        assert by_host[f"ok{i:02d}"]["reachable"]
        assert by_host[f"ok{i:02d}"]["results"][0]["status"] == "pass"
        assert "Connection refused" in by_host[f"no{i:02d}"]["error"]
    refusals = [line for line in result.stderr.splitlines()
                if line.startswith("omni-host: no") and "Connection refused" in line]
    assert len(refusals) == 16


def test_pool_keeps_order_bounds_concurrency_and_replaces_late_workers() -> None:
    running, peak = [0], [0]
    lock = threading.Lock()

    def work(n: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(5 if n == 0 else 0.05)
        with lock:
            running[0] -= 1
        return n * 10

    start = time.monotonic()
    pooled = run_pool(list(range(12)), work, forks=3, deadline_s=0.25,
                      late=lambda n, t: -1, cancelled=lambda n: -2)
    assert pooled.results == [-1] + [n * 10 for n in range(1, 12)]
    assert not pooled.interrupted
    assert time.monotonic() - start < 3  # the stuck item did not hold up the rest
    assert peak[0] <= 4  # three workers, plus one replacement for the stuck one


@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_bad_forks_is_a_usage_error(value: str) -> None:
    result = run_cli("audit", "--forks", value, "--no-store")
    assert result.code == 2 and "--forks" in result.stderr


@pytest.mark.parametrize("processes", ["1", "2"])
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_stores_a_partial_report_marked_interrupted(
        sshd: Sshd, tmp_path: Path, report_dir: Path, sig: signal.Signals, code: int,
        processes: str) -> None:
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    inv = sshd.inventory(tmp_path / "inv", {"good": {},
                                            "stuck": {"ansible_python_interpreter": str(slow)}})
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_host.cli", "audit", "-i", str(inv), "--format", "json",
         "--report-dir", str(report_dir), "--known-hosts", str(sshd.known_hosts),
         "--ssh-config", str(tmp_path / "none"), "--processes", processes],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stderr is not None
    seen = []  # readiness: the progress line of the first finished host (warnings may precede)
    while not (seen and seen[-1].startswith("[1/2] good: done")):
        line = proc.stderr.readline()
        assert line, "the CLI ended before the good host finished: " + "".join(seen)
        seen.append(line)
    first = "".join(seen)
    children = psutil.Process(proc.pid).children()  # the workers (and spawn's resource tracker)
    workers = [c for c in children if "spawn_main" in " ".join(c.cmdline())]
    assert len(workers) == (2 if processes == "2" else 0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == code, first + err
    _, alive = psutil.wait_procs(children, timeout=5)
    assert alive == []  # no controller process outlives the run
    assert "partial (interrupted) report stored in" in err
    (stored,) = list(report_dir.iterdir())
    report = json.loads((stored / "report.json").read_text())
    assert report["interrupted"] is True
    by_host = {h["host"]: h for h in report["hosts"]}
    assert by_host["good"]["reachable"] and by_host["good"]["results"]
    assert by_host["stuck"]["error"] == "interrupted before this host finished"


def test_ansible_engine_collects_the_same_bundles(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {
        "loop": {"ansible_python_interpreter": "/usr/bin/python3"},
        "gone": {"ansible_python_interpreter": "/usr/bin/python3", "ansible_port": free_port()},
    }, group_vars={"omni_numa_nps": 1, "omni_swap_size_mib": 204800})
    out = tmp_path / "bundles"
    collected = run_cli("collect", "-i", str(inv), "--engine", "ansible", "--out", str(out),
                        "--known-hosts", str(sshd.known_hosts))
    assert collected.code == 3
    assert "omni-host: gone: unreachable: " in collected.stderr
    manifest = json.loads((out / "loop" / "manifest.json").read_text())
    assert manifest["transport"] == "ansible"
    offline = run_cli("audit", "--bundle", str(out), "-i", str(inv), "--format", "json")
    live = audit(sshd, inv, "loop")

    def verdicts(doc: str) -> list:
        return [(r["id"], r["status"], r["summary"]) for h in json.loads(doc)["hosts"]
                for r in h["results"]]

    assert verdicts(offline.stdout) == verdicts(live.stdout)
    assert ("numa.nps1", "pass") in [v[:2] for v in verdicts(offline.stdout)]


def test_plain_ansible_playbook_collect_then_audit_the_outputs(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {"ansible_python_interpreter": "/usr/bin/python3"}},
                         group_vars={"omni_numa_nps": 1})
    payload = tmp_path / "payload.py"
    made = run_cli("payload")
    assert made.code == 0 and "def main(plan_json)" in made.stdout
    payload.write_text(made.stdout)
    out = tmp_path / "out"
    env = dict(os.environ, ANSIBLE_SSH_COMMON_ARGS=f"-o UserKnownHostsFile={sshd.known_hosts}")
    played = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
         str(PLAYBOOKS / "collect.yml"), "-e", f"omni_payload={payload}",
         "-e", f"omni_out={out}"], capture_output=True, text=True, env=env, check=False)
    assert played.returncode == 0, played.stdout[-2000:]
    assert (out / "loop.out").is_file()
    result = run_cli("audit", "--bundle", str(out), "-i", str(inv), "--format", "json")
    assert result.code == 0, result.stderr
    assert hosts(result.stdout)["loop"]["results"][0]["status"] == "pass"


def _fleet_plans(sshd: Sshd, tmp_path: Path, n: int) -> list:
    from omni_host.plan.hosts import plan_inventory
    from omni_host.plan.inventory import load_inventory

    inv = sshd.inventory(tmp_path / "inv", {f"h{i}": {} for i in range(n)},
                         group_vars={"omni_numa_nps": 1})
    return plan_inventory(load_inventory(inv), "all")


def _ssh(sshd: Sshd, tmp_path: Path):
    from omni_host.collect.transport.base import SshOptions

    return SshOptions(known_hosts=sshd.known_hosts, ssh_config=tmp_path / "none")


def test_a_fleet_spread_over_processes_gives_the_same_verdicts_in_order(sshd: Sshd,
                                                                        tmp_path: Path) -> None:
    import multiprocessing

    from omni_host.app.spread import audit_spread
    from omni_host.evaluate.audit import audit_many

    plans = _fleet_plans(sshd, tmp_path, 6)
    ssh = _ssh(sshd, tmp_path)
    workers_seen, done = [], []
    spread = audit_spread(plans, ssh, forks=6, processes=2,
                          on_start=lambda p: workers_seen.append(
                              len(multiprocessing.active_children())),
                          on_done=lambda p, r: done.append(p.name))
    single = audit_many(plans, ssh, forks=6)
    assert not spread.interrupted
    assert [r.host for r in spread.results] == [p.name for p in plans]  # input order
    assert sorted(done) == sorted(p.name for p in plans)  # progress saw every host
    assert max(workers_seen) == 2  # the hosts ran in two worker processes
    assert [[(c.id, c.status) for c in r.results] for r in spread.results] == \
        [[(c.id, c.status) for c in r.results] for r in single.results]
    assert all(r.reachable for r in spread.results)


def test_a_controller_process_that_dies_costs_its_hosts_a_named_error(sshd: Sshd,
                                                                      tmp_path: Path) -> None:
    import multiprocessing

    from omni_host.app.spread import audit_spread

    plans = _fleet_plans(sshd, tmp_path, 4)
    killed: list[int] = []

    def kill_the_first_worker(plan) -> None:  # noqa: ANN001
        if not killed:
            (first,) = [w for w in multiprocessing.active_children() if w.name.endswith("1/2")]
            os.kill(first.pid, signal.SIGKILL)
            killed.append(first.pid)

    spread = audit_spread(plans, _ssh(sshd, tmp_path), forks=4, processes=2,
                          on_start=kill_the_first_worker)
    by_name = {r.host: r for r in spread.results}
    for plan in plans[0::2]:  # the first worker's share
        assert by_name[plan.name].error == ("the controller process auditing this host died "
                                            "(exit -9)")
    for plan in plans[1::2]:
        assert by_name[plan.name].reachable


def test_a_controller_process_that_stops_answering_is_killed_and_named(sshd: Sshd,
                                                                       tmp_path: Path) -> None:
    """A worker that is alive but silent (stopped here; deadlocked in life) is killed once it
    has said nothing for a host's deadline plus its start-up slack: the audit ends, and its
    hosts carry the reason; the other worker's hosts are audited as ever."""
    import multiprocessing

    from omni_host.app.spread import START_SLACK_S, audit_spread

    plans = _fleet_plans(sshd, tmp_path, 4)
    stopped: list[multiprocessing.Process] = []

    def stop_the_first_worker(plan) -> None:  # noqa: ANN001
        if not stopped:
            (first,) = [w for w in multiprocessing.active_children() if w.name.endswith("1/2")]
            os.kill(first.pid, signal.SIGSTOP)
            stopped.append(first)

    start = time.monotonic()
    spread = audit_spread(plans, _ssh(sshd, tmp_path), forks=4, processes=2, host_timeout_s=5,
                          on_start=stop_the_first_worker)
    elapsed = time.monotonic() - start
    limit = 5 + START_SLACK_S
    by_name = {r.host: r for r in spread.results}
    for plan in plans[0::2]:  # the stopped worker's share
        assert by_name[plan.name].error == ("the controller process auditing this host stopped "
                                            f"answering (nothing for {limit:g}s): killed")
    for plan in plans[1::2]:
        assert by_name[plan.name].reachable
    assert limit <= elapsed < limit + 10
    assert not stopped[0].is_alive()
