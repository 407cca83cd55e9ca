"""Reliability round four (issue 34), the items resolved so far: each a test that fails on the
code before it (a traceback, a silent exit 0, an option let through)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import GPU_BUNDLES, run_cli, until_unlocked

DEEP = 5000  # levels: enough for YAML's recursive composer to hit the interpreter's limit


def _nested() -> str:
    return "[" * DEEP + "]" * DEEP


@pytest.mark.parametrize("how", ["file", "inline"])
def test_deeply_nested_extra_vars_are_one_line(tmp_path: Path, how: str) -> None:
    if how == "file":
        path = tmp_path / "vars.yml"
        path.write_text(f"omni_bench: {_nested()}\n")
        arg = f"@{path}"
    else:
        arg = '{"omni_bench": ' + _nested() + "}"
    result = run_cli("audit", "--no-store", "-e", arg)
    assert result.code == 2
    line = result.stderr.strip().splitlines()[-1]
    assert "nested too deeply to be omni_* values" in line and "Traceback" not in result.stderr


def test_a_deeply_nested_waivers_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "waivers.yml"
    path.write_text(f"version: 1\nwaivers: {_nested()}\n")
    result = run_cli("audit", "--no-store", "--waivers", str(path))
    assert result.code == 2
    # (the in-process runner's StringIO draws two warnings from Ansible's import: not ours)
    assert result.stderr.strip().splitlines()[-1] == \
        f"omni-host: {path}: nested too deeply to be a waivers file"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("when", [1e300, -1e12])
def test_a_bundle_from_no_calendar_is_refused_not_a_traceback(tmp_path: Path, when: float) -> None:
    """`--format junit` on a bundle with collected_at 1e300 or -1e12: OverflowError and
    ValueError tracebacks."""
    import tarfile

    with tarfile.open(GPU_BUNDLES / "h100-x1.tar.gz") as tar:
        tar.extractall(tmp_path / "b", filter="data")
    (manifest,) = (tmp_path / "b").rglob("manifest.json")
    doc = json.loads(manifest.read_text())
    doc["collected_at"] = when
    manifest.write_text(json.dumps(doc))
    result = run_cli("audit", "--bundle", str(manifest.parent), "--format", "junit")
    assert "Traceback" not in result.stderr and result.code == 2
    assert "manifest's collected_at is not a time" in result.stderr


def test_a_stored_report_from_no_calendar_still_renders(tmp_path: Path, two_audits: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(two_audits, store)
    newest = sorted(store.glob("*/report.json"))[-1]
    doc = json.loads(newest.read_text())
    doc["started_at"] = 1e300
    doc["hosts"][0]["collected_at"] = -1e12
    newest.write_text(json.dumps(doc))
    shown = run_cli("report", "show", newest.parent.name, "--format", "junit", "--report-dir",
                    str(store))
    assert shown.code == 0, shown.stderr
    assert 'timestamp="1970-01-01T00:00:00"' in shown.stdout


def test_report_diff_of_an_empty_or_refused_store_says_so(tmp_path: Path) -> None:
    """It printed nothing and exited 0."""
    empty = run_cli("report", "diff", "--report-dir", str(tmp_path / "none"))
    assert empty.code == 2 and "holds no stored audit: nothing to compare" in empty.stderr
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    refused = run_cli("report", "diff", "--report-dir", str(shared))
    assert refused.code == 2
    assert "writable by others: the report store is not read: nothing to compare" in refused.stderr


def _lab(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "hosts.yml").write_text("all:\n  hosts:\n    box:\n      ansible_connection: local\n"
                                    "      omni_numa_nps: 1\n      omni_build_packages: []\n")
    return path


def _install(tmp_path: Path, **env: str):
    root = tmp_path / "root"
    inventory = _lab(tmp_path / "inv")
    result = run_cli("schedule", "install", "--quarterly", "--root", str(root), "--cron", "--",
                     "-i", str(inventory), "all", env=env)
    return result, root / "etc" / "cron.d" / "omni-host-audit"


@pytest.mark.parametrize("name", ["XDG_STATE_HOME", "LOGNAME"])
def test_a_newline_from_the_environment_writes_no_cron_line(tmp_path: Path, name: str) -> None:
    """A newline in XDG_STATE_HOME or LOGNAME wrote a second cron line into cron.d."""
    value = "/state\n* * * * * root touch /tmp/owned" if name == "XDG_STATE_HOME" else \
        "root\n* * * * * root touch /tmp/owned"
    result, cron = _install(tmp_path, **{name: value, "USER": value} if name == "LOGNAME"
                            else {name: value})
    assert result.code == 2, result.stderr
    assert "control character" in result.stderr or "is not a user name" in result.stderr
    assert not cron.exists()


def test_a_relative_state_home_is_ignored_as_the_spec_says(tmp_path: Path) -> None:
    result, cron = _install(tmp_path, XDG_STATE_HOME="relative/state")
    assert result.code == 0, result.stderr
    assert "relative/state" not in cron.read_text()


def test_status_never_follows_a_log_link_to_another_file(tmp_path: Path) -> None:
    """`schedule status` followed a log symlinked to /etc/shadow and printed its last lines."""
    result, _ = _install(tmp_path, XDG_STATE_HOME="/state")
    assert result.code == 0, result.stderr
    log = tmp_path / "root" / "state" / "omni-host" / "schedule.log"
    secret = tmp_path / "secret"
    secret.write_text("root:$6$not-for-you:19000:0:99999:7:::\n")
    log.unlink(missing_ok=True)
    log.symlink_to(secret)
    status = run_cli("schedule", "status", "--root", str(tmp_path / "root"), "--cron",
                     env={"XDG_STATE_HOME": "/state"})
    assert "not-for-you" not in status.stdout + status.stderr


def test_a_log_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    import os

    folder = tmp_path / "root" / "state" / "omni-host"
    folder.mkdir(parents=True)
    os.chown(folder, 65534, 65534)  # nobody: it could swap the log for a link
    result, cron = _install(tmp_path, XDG_STATE_HOME="/state")
    assert result.code == 2 and "belongs to uid 65534" in result.stderr
    assert not cron.exists()


def test_the_markdown_report_holds_no_raw_html_or_control(tmp_path: Path, two_audits: Path) -> None:
    """A host's name and its outputs reached the Markdown raw: `<script>` rendered by a
    viewer, ESC and BEL (from llama-bench test names) reached a terminal that showed it, and
    a line of backticks closed the evidence block."""
    store = tmp_path / "store"
    shutil.copytree(two_audits, store)
    newest = sorted(store.glob("*/report.json"))[-1]
    doc = json.loads(newest.read_text())
    host = doc["hosts"][0]
    host["host"] = "box<script>alert(1)</script>\x1b]0;owned\x07"
    failing = next(r for r in host["results"] if r["status"] == "fail")
    failing["title"] = "pp512 \x1b[2J\u202e"
    failing["evidence"][0]["lines"] = ["```", "<img src=x onerror=alert(1)>", "\x07bell"]
    newest.write_text(json.dumps(doc))
    shown = run_cli("report", "show", newest.parent.name, "--format", "markdown",
                    "--report-dir", str(store))
    assert shown.code in (0, 1), shown.stderr
    md = shown.stdout
    assert "<script>" not in md and "&lt;script&gt;" in md
    assert "\x1b" not in md and "\x07" not in md and "\u202e" not in md
    assert "\\x1b]0;owned\\x07" in md
    block = md[md.index("<img src=x") - 200:]
    fence = next(line for line in block.splitlines() if set(line) == {"`"} and len(line) > 3)
    assert block.count(fence) == 2  # the evidence's own ``` line cannot close its block


def test_the_progress_lines_print_no_host_controlled_control(tmp_path: Path) -> None:
    """Host names from an inventory (OSC, ESC c, C1, U+202E) and a failing host's own error
    reached the operator's terminal raw through the progress lines."""
    from conftest import free_port

    names = ["a\x1b]0;owned\x07", "b\x1bc", "c\u202ebox", "d\x9b2J"]
    inv = tmp_path / "hosts.json"
    inv.write_text(json.dumps({"all": {"hosts": {
        name: {"ansible_host": "127.0.0.1", "ansible_port": free_port()} for name in names}}}))
    result = run_cli("audit", "-i", str(inv), "all", "--no-store")
    assert result.code == 3
    progress = [line for line in result.stderr.splitlines() if line.startswith("[") and "/4] " in line]
    assert len(progress) == 4, result.stderr
    for bad in ("\x1b", "\x07", "\u202e", "\x9b"):
        assert bad not in result.stderr and bad not in result.stdout
    assert any("\\x1b]0;owned\\x07" in line for line in progress)


@pytest.mark.system  # a real child process that outlives its parent
def test_a_child_llama_bench_leaves_behind_neither_survives_nor_loses_the_run(tmp_path: Path) -> None:
    """A setsid child of llama-bench survived the run (PPID 1); holding llama-bench's stdout,
    it cost the run its output ("not JSON: ''" after 17 s: the reader waited for a full
    buffer)."""
    import subprocess
    import time

    capture = Path(__file__).parent / "fixtures" / "captures" / "llama-bench" / \
        "llama-bench-json_vm-epyc-2cpu_tiny-f16_r3.json"
    marker = f"omni-orphan-{tmp_path.name}"
    fake = tmp_path / "llama-bench"
    # a shell in a session of its own, holding llama-bench's stdout, with a sleep of its own
    fake.write_text(f"#!/bin/sh\nsetsid sh -c 'sleep 3017.5; true' {marker} &\ncat {capture}\n")
    fake.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(4096))
    inv = tmp_path / "hosts.json"
    inv.write_text(json.dumps({"all": {"hosts": {"box": {
        "ansible_connection": "local", "omni_build_packages": [],
        "omni_bench": {"llama_bench": str(fake), "model": str(model)}}}}}))
    start = time.monotonic()
    result = until_unlocked(lambda: run_cli("bench", "-i", str(inv), "box", "--no-store",
                                            "--format", "json"))
    took = time.monotonic() - start
    perf = next(r for r in json.loads(result.stdout)["hosts"][0]["results"]
                if r["id"] == "perf.tokens-per-s")
    assert perf["status"] != "error", perf["summary"]
    assert "pp64" in perf["details"]["tests"]
    assert took < 10, took
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    assert left == "", f"survived: {left}"
    # and its own child, reparented to the helper once the shell was killed
    sleeps = subprocess.run(["pgrep", "-f", "sleep 3017.5"], capture_output=True, text=True)
    assert sleeps.stdout == "", f"survived: {sleeps.stdout}"


@pytest.mark.system  # a real TCP server on the loopback
def test_a_server_that_greets_then_stalls_is_not_called_bannerless(tmp_path: Path) -> None:
    """A banner, then nothing: it was reported as "no SSH banner (is an SSH server listening
    there?)" after paramiko's own 15 s, sending the operator to the wrong place."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    held = []

    def greet() -> None:
        conn, _ = server.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Stalled\r\n")
        held.append(conn)  # open, silent

    threading.Thread(target=greet, daemon=True).start()
    inv = tmp_path / "hosts.json"
    inv.write_text(json.dumps({"all": {"hosts": {"stall": {
        "ansible_host": "127.0.0.1", "ansible_port": port}}}}))
    try:
        result = run_cli("audit", "-i", str(inv), "--no-store", "--connect-timeout", "1",
                         "--known-hosts", str(tmp_path / "known"),
                         "--ssh-config", str(tmp_path / "none"))
    finally:
        server.close()
        for conn in held:
            conn.close()
    assert result.code == 3
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"omni-host: stall: unreachable: 127.0.0.1:{port} sent its SSH "
                           "banner (SSH-2.0-OpenSSH_9.2p1 Stalled) and then nothing for 1s")
    assert result.seconds < 10


# The real collector, its answer's tail written 1 s after the interpreter's process exited: what
# OpenSSH does under CPU contention made certain. sshd sends the exit status when it reaps the
# session's process (session.c: "there could be some more data waiting in the pipe") and the
# rest of the pipe after it; a reader that stopped at the exit status cut the answer off.
LATE_TAIL = """#!/bin/sh
out=$(/usr/bin/python3 "$@")
printf '%s\\n' "$out" | head -c 12000
(sleep 1; printf '%s\\n' "$out" | tail -c +12001) &
exit 0
"""


@pytest.mark.system  # the loopback OpenSSH server
def test_an_exit_status_before_the_last_bytes_is_not_a_cut_answer(sshd, tmp_path: Path) -> None:
    """A healthy host was reported unreachable twice in about 300 runs under load
    ("collector output was cut off or corrupted (Unterminated string starting at: line 1
    column 12830)"): the reader ended at the exit status, not at the end of the stream."""
    interp = tmp_path / "python3"
    interp.write_text(LATE_TAIL)
    interp.chmod(0o755)
    inv = sshd.inventory(tmp_path / "inv", {"box": {"ansible_python_interpreter": str(interp)}})
    result = run_cli("audit", "-i", str(inv), "--no-store", "--format", "json", "--known-hosts",
                     str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"))
    assert "unreachable" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert doc["hosts"][0]["reachable"] and len(doc["hosts"][0]["results"]) > 20


# A SIGINT whose handler runs inside a finalizer (made certain: the finalizer sends it), then a
# pool of hosts that would each take their whole deadline. Prints the pool's outcome.
SWALLOWED = """
import os, signal, sys, time
from omni_host import interrupts
from omni_host.collect.pool import run_pool

interrupts.install()

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs here, between two bytecodes: its exception
            pass               # is "ignored" (printed, then lost)

Finalized()
start = time.monotonic()
done = run_pool([1, 2, 3, 4, 5], lambda item: time.sleep(60), forks=5, deadline_s=8,
                late=lambda item, t: "late", cancelled=lambda item: "cancelled")
print(done.interrupted, done.terminated, sorted(set(done.results)), round(time.monotonic() - start))
"""


def test_a_ctrl_c_swallowed_by_a_finalizer_still_interrupts_the_pool() -> None:
    """Under load, SIGINTs in the first second of a five-host audit were lost (the audit ran to
    its host deadline, exit 3, a report not marked interrupted): Python loses the exception a
    signal handler raises inside a finalizer the garbage collector runs."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SWALLOWED], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "KeyboardInterrupt" in done.stderr  # "Exception ignored in: ... __del__"
    interrupted, terminated, results, seconds = done.stdout.split(" ", 3)
    assert (interrupted, terminated) == ("True", "False"), done.stdout  # Ctrl-C, not SIGTERM
    assert results == "['cancelled']" and int(seconds.strip()) < 2
