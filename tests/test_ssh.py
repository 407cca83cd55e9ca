"""The audit over SSH against a real OpenSSH server on loopback: verdicts, one round trip,
ssh_config (ProxyJump), host-key policy, become, and every kind of unreachable host."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from conftest import Sshd, free_port, keygen, run_cli

from omni_host.plan.policy import reference_vars

STATUSES = {"numa.nps1": "pass", "gpu.driver-version": "fail", "swap.capacity": "fail"}


def audit(sshd: Sshd, inv: Path, *extra: str, known_hosts: Path | None = None,
          ssh_config: Path | None = None):
    return run_cli("audit", "-i", str(inv), *extra, "--format", "json", "--no-store",
                   "--known-hosts", str(known_hosts or sshd.known_hosts),
                   "--ssh-config", str(ssh_config or sshd.workdir / "no-ssh-config"),
                   "--connect-timeout", "5")


def results(stdout: str) -> dict[str, dict[str, str]]:
    doc = json.loads(stdout)
    return {h["host"]: {r["id"]: r["status"] for r in h["results"]} for h in doc["hosts"]}


def sessions(sshd: Sshd) -> int:
    time.sleep(0.2)  # sshd writes its log line as the session starts
    return len(re.findall(r"Starting session: command", (sshd.workdir / "sshd.log").read_text()))


@pytest.mark.parametrize("fmt", ["yaml", "ini"])
def test_audit_over_ssh_gives_the_machine_verdicts_in_one_round_trip(sshd: Sshd, tmp_path: Path,
                                                                   fmt: str) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}}, group_vars=reference_vars(), fmt=fmt)
    before = sessions(sshd)
    result = audit(sshd, inv, "loop")
    assert result.code == 1, result.stderr
    verdicts = results(result.stdout)["loop"]
    for check_id, status in STATUSES.items():
        assert verdicts[check_id] == status, (check_id, verdicts)
    doc = json.loads(result.stdout)
    host = doc["hosts"][0]
    assert host["reachable"] is True and host["transport"] == "ssh"
    assert host["address"] == f"{sshd.user}@127.0.0.1:{sshd.port}"
    driver = next(r for r in host["results"] if r["id"] == "gpu.driver-version")
    assert "policy expects 2 GPU(s) but no NVIDIA driver answers" in driver["summary"]
    assert doc["schema_version"] == 1 and doc["summary"]["fail"] >= 2
    assert sessions(sshd) - before == 1  # every probe in one command on one connection


def test_ini_and_yaml_inventories_give_the_same_verdicts(sshd: Sshd, tmp_path: Path) -> None:
    verdicts = {}
    for fmt in ("yaml", "ini"):
        inv = sshd.inventory(tmp_path / fmt, {"loop": {}}, group_vars=reference_vars(), fmt=fmt)
        result = audit(sshd, inv, "lab")
        assert result.code == 1, result.stderr
        doc = json.loads(result.stdout)["hosts"][0]
        verdicts[fmt] = (results(result.stdout)["loop"], doc["policy"]["values"])
    assert verdicts["ini"] == verdicts["yaml"]
    assert verdicts["ini"][1]["omni_gpus"][0]["vram_gib"] == 96


def test_bundle_from_ssh_audits_to_the_same_verdicts(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}}, group_vars=reference_vars())
    live = audit(sshd, inv, "loop")
    out = tmp_path / "loop.tar.gz"
    collected = run_cli("collect", "-i", str(inv), "loop", "--out", str(out), "--known-hosts",
                        str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"))
    assert collected.code == 0, collected.stderr
    offline = run_cli("audit", "--bundle", str(out), "-i", str(inv), "--format", "json")
    assert offline.code == live.code == 1

    def strip(doc: str) -> list:
        return [(r["id"], r["status"], r["summary"]) for h in json.loads(doc)["hosts"]
                for r in h["results"]]

    assert strip(offline.stdout) == strip(live.stdout)


def test_unreachable_hosts_are_reported_and_the_rest_audited(sshd: Sshd, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger_ed25519"
    keygen(stranger)
    known = tmp_path / "known_hosts"
    other_key = keygen(tmp_path / "other_host_key")
    known.write_text(sshd.known_hosts.read_text() +
                     f"[localhost]:{sshd.port} {' '.join(other_key.split()[:2])}\n")
    inv = sshd.inventory(tmp_path / "inv", {
        "good": {},
        "refused": {"ansible_port": free_port()},
        "unknown": {"ansible_host": "no-such-host.invalid"},
        "wrongkey": {"ansible_ssh_private_key_file": str(stranger)},
        "changedkey": {"ansible_host": "localhost"},
    }, group_vars=reference_vars())
    result = audit(sshd, inv, "all", known_hosts=known)
    assert result.code == 3  # unreachable outranks failed checks
    doc = json.loads(result.stdout)
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts["good"]["reachable"] and results(result.stdout)["good"]["numa.nps1"] == "pass"
    reasons = {name: hosts[name]["error"] for name in hosts if name != "good"}
    assert all(not hosts[n]["reachable"] and not hosts[n]["results"] for n in reasons)
    assert "refused" in reasons["refused"].lower()
    assert "no-such-host.invalid" in reasons["unknown"]
    assert "authentication" in reasons["wrongkey"]
    assert "CHANGED" in reasons["changedkey"]
    assert doc["summary"]["unreachable"] == 4
    err_lines = [line for line in result.stderr.splitlines()
                 if line.startswith("omni-host:") and "unreachable" in line]
    progress = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 5 and progress[-1].startswith("[5/5] ")
    assert sorted(line.split(":")[1].strip() for line in err_lines) == sorted(reasons)
    assert "Traceback" not in result.stderr


def test_unknown_host_key_needs_explicit_acceptance(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}})
    known = tmp_path / "known_hosts"
    known.write_text("")
    refused = audit(sshd, inv, known_hosts=known)
    assert refused.code == 3
    assert "not in known_hosts" in refused.stderr
    assert known.read_text() == ""
    accepted = audit(sshd, inv, "--accept-new-host-key", known_hosts=known)
    assert accepted.code == 0, accepted.stderr
    assert known.read_text().split()[:3] == [f"[127.0.0.1]:{sshd.port}",
                                             *sshd.host_pub.split()[:2]]
    again = audit(sshd, inv, known_hosts=known)  # recorded: no flag needed any more
    assert again.code == 0, again.stderr


def test_ssh_config_host_user_port_identity_and_proxyjump(sshd: Sshd, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    common = (f"  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
              f"  IdentityFile {sshd.client_key}\n")
    config.write_text(f"Host box\n{common}  ProxyJump jumpbox\n\nHost jumpbox\n{common}")
    inv = tmp_path / "inv"
    inv.mkdir()
    # everything from ssh_config; the one value pins what this machine's packages would decide
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    box:\n      omni_build_packages: []\n")
    log = sshd.workdir / "sshd.log"
    time.sleep(0.2)
    accepted_before = log.read_text().count("Accepted publickey")
    result = audit(sshd, inv, "box", ssh_config=config)
    assert result.code == 0, result.stderr  # audited through the jump host
    assert results(result.stdout)["box"]["swap.capacity"] == "skip"  # nothing expected of it
    time.sleep(0.2)
    assert log.read_text().count("Accepted publickey") - accepted_before == 2  # jump + target


def test_ssh_config_proxycommand_carries_the_connection(sshd: Sshd, tmp_path: Path) -> None:
    """A bastion reached by ``ProxyCommand ssh ... -W %h:%p`` (it was silently ignored and
    the host dialled directly); a ProxyCommand that cannot start is the host's one line."""
    config = tmp_path / "ssh_config"
    bastion = (f"ssh -q -i {sshd.client_key} -o UserKnownHostsFile={sshd.known_hosts} "
               f"-o StrictHostKeyChecking=yes -o BatchMode=yes -p {sshd.port} "
               f"{sshd.user}@127.0.0.1 -W %h:%p")
    # HostName is not this sshd's address: only the ProxyCommand's %h/%p reach it
    box = (f"Host box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
           f"  IdentityFile {sshd.client_key}\n")
    config.write_text(f"{box}  ProxyCommand {bastion}\n")
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    box:\n      omni_build_packages: []\n")
    log = sshd.workdir / "sshd.log"
    time.sleep(0.2)
    before = log.read_text().count("Accepted publickey")
    result = audit(sshd, inv, "box", ssh_config=config)
    assert result.code == 0, result.stderr
    time.sleep(0.2)
    assert log.read_text().count("Accepted publickey") - before == 2  # the bastion, then box
    config.write_text(f"{box}  ProxyCommand /nonexistent/proxy %h %p\n")
    broken = audit(sshd, inv, "box", ssh_config=config)
    assert broken.code == 3 and "box: unreachable: " in broken.stderr, broken.stderr
    assert "Traceback" not in broken.stderr


def test_become_runs_the_collector_through_sudo(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {"ansible_become": True}})
    out = tmp_path / "bundle"
    collected = run_cli("collect", "-i", str(inv), "--out", str(out), "--known-hosts",
                        str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"))
    assert collected.code == 0, collected.stderr
    manifest = json.loads((out / "loop" / "manifest.json").read_text())
    assert manifest["collector"]["euid"] == 0
    assert manifest["transport"] == "ssh"


@pytest.mark.parametrize("value", ["not-a-port", 70000])
def test_bad_port_in_inventory_is_an_inventory_error(sshd: Sshd, tmp_path: Path, value) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {"ansible_port": value}})
    result = audit(sshd, inv)
    assert result.code == 2
    assert "ansible_port" in result.stderr and "loop" in result.stderr


@pytest.fixture(scope="module")
def plain_user() -> str:
    """An unprivileged account on this VM (the tests run as root on a throwaway machine)."""
    import subprocess

    name = "omniaudit"
    if subprocess.run(["id", name], capture_output=True, check=False).returncode != 0:
        subprocess.run(["useradd", "-m", "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "-p", "*", name], check=True)  # no password, but not locked
    return name


def test_denied_probe_is_unavailable_and_its_check_skipped(sshd: Sshd, tmp_path: Path,
                                                            plain_user: str, docker_image: str) -> None:
    # The Docker socket is root-only: the unprivileged user's `docker ps` is refused.
    inv = sshd.inventory(tmp_path / "inv", {"loop": {"ansible_user": plain_user}},
                         group_vars={"omni_zen5_tunables_containers": ["memgraph"]})
    result = audit(sshd, inv)
    assert result.code == 0, result.stderr
    host = json.loads(result.stdout)["hosts"][0]
    docker = host["probes"]["docker.containers"]
    assert docker["outcome"] == "unavailable" and "permission denied" in docker["reason"]


def test_become_without_passwordless_sudo_is_one_clear_line(sshd: Sshd, tmp_path: Path,
                                                            plain_user: str) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {"ansible_user": plain_user,
                                                     "ansible_become": True}})
    result = audit(sshd, inv)
    assert result.code == 3
    host = json.loads(result.stdout)["hosts"][0]
    assert host["error"].startswith("become needs passwordless sudo")
    assert "Traceback" not in result.stderr


def test_a_malformed_known_hosts_line_is_skipped_with_a_warning(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}})
    known = tmp_path / "known_hosts"
    known.write_text("# a comment\nbroken ssh-ed25519 AAAA!!not-base64\n"
                     + sshd.known_hosts.read_text())
    result = audit(sshd, inv, known_hosts=known)
    assert result.code == 0, result.stderr
    assert f"warning: {known}:2: malformed known_hosts line skipped" in result.stderr
    assert "Traceback" not in result.stderr and "InvalidHostKey" not in result.stderr.split(
        "(")[0]


def test_accept_new_writes_a_line_of_its_own_after_a_file_without_final_newline(
        sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}})
    known = tmp_path / "known_hosts"
    other = keygen(tmp_path / "other_key").split()
    known.write_text(f"other.example {other[0]} {other[1]}")  # no final newline
    result = audit(sshd, inv, "--accept-new-host-key", known_hosts=known)
    assert result.code == 0, result.stderr
    lines = known.read_text().splitlines()
    assert len(lines) == 2 and lines[1].split()[:2] == [f"[127.0.0.1]:{sshd.port}",
                                                          sshd.host_pub.split()[0]]
    again = audit(sshd, inv, known_hosts=known)
    assert again.code == 0 and "warning" not in again.stderr


def test_a_port_that_never_speaks_ssh_is_one_line_without_traceback(sshd: Sshd,
                                                                    tmp_path: Path) -> None:
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)  # accepts (the kernel completes the handshake), never says a word
    port = silent.getsockname()[1]
    try:
        inv = sshd.inventory(tmp_path / "inv", {"mute": {"ansible_port": port}})
        result = run_cli("audit", "-i", str(inv), "--no-store", "--known-hosts",
                         str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"),
                         "--connect-timeout", "1")
    finally:
        silent.close()
    assert result.code == 3
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"omni-host: mute: unreachable: no SSH banner from 127.0.0.1:{port} "
                     "within 1s (is an SSH server listening there?)"]
    assert "Traceback" not in result.stderr + result.stdout


def test_a_missing_interpreter_is_named(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {
        "loop": {"ansible_python_interpreter": "/opt/no-such/bin/python3"}})
    result = audit(sshd, inv)
    assert result.code == 3
    assert ("loop: unreachable: /opt/no-such/bin/python3 is not installed on the host"
            in result.stderr)


def test_paramiko_comes_without_invoke_unless_the_config_may_match_exec(sshd: Sshd,
                                                                         tmp_path: Path) -> None:
    """paramiko imports invoke (60 ms) only to run `Match exec`. A config without such a line
    audits without it; a config with one gets it, and the Match exec decides the port."""
    import subprocess
    import sys

    inv = tmp_path / "inv"
    inv.mkdir()
    # everything from ssh_config; the one value pins what this machine's packages would decide
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    box:\n      omni_build_packages: []\n")
    common = f"  HostName 127.0.0.1\n  User {sshd.user}\n  IdentityFile {sshd.client_key}\n"
    configs = {
        "plain": f"Host box\n{common}  Port {sshd.port}\n",
        "exec": f"Host box\n{common}\nMatch exec \"test -d /\"\n  Port {sshd.port}\n"}
    imported = {}
    for name, text in configs.items():
        config = tmp_path / name
        config.write_text(text)
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "omni_host.cli", "audit", "-i", str(inv),
             "box", "--no-store", "--format", "json", "--known-hosts", str(sshd.known_hosts),
             "--ssh-config", str(config)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]  # audited, nothing failed
        modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                   if line.startswith("import time:")}
        assert "paramiko.transport" in modules
        # (a blocked import is listed too, as "invoke" alone: its submodules show it loaded)
        imported[name] = "invoke.context" in modules
    assert imported == {"plain": False, "exec": True}


@pytest.mark.parametrize(("function", "ours"), [("import_ssh", "True"),
                                               ("import_paramiko", "False")])
def test_paramiko_imported_without_importlib_metadata_has_its_true_version(
        function: str, ours: str) -> None:
    """The stand-in that answers paramiko's version question during its import gives what
    importlib.metadata gives, and leaves the real module to everyone after; paramiko alone
    (the benchmark's floor) brings no transport of ours."""
    import subprocess
    import sys

    program = (
        "import sys\n"
        f"from omni_host.collect.transport.loading import {function}\n"
        f"{function}(None)\n"
        "print('importlib.metadata' in sys.modules)\n"
        "print('omni_host.collect.transport.ssh' in sys.modules)\n"
        "import importlib.metadata, paramiko\n"
        "print(paramiko.__version__ == importlib.metadata.version('paramiko'))\n"
        "print(hasattr(importlib.metadata, 'distributions'))\n"
        "print('invoke' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          check=True)
    assert proc.stdout.split() == ["False", ours, "True", "True", "False"]


@pytest.mark.parametrize(("dist_infos", "expected"), [
    ({"paramiko-5.1.0.dist-info": "Metadata-Version: 2.1\nName: paramiko\nVersion: 5.1.0\n\n"
                                  "Version: 9 (body, not a header)\n"}, "5.1.0"),
    ({"paramiko-5.1.0.dist-info": "Name: paramiko\n\nVersion: 9\n"}, None),  # no header
    ({"paramiko-5.1.0.dist-info": "Name: paramiko\n", "paramiko-4.0.dist-info": ""}, None),
    ({}, None),
])
def test_dist_version_reads_only_an_unambiguous_header(tmp_path: Path, dist_infos: dict,
                                                       expected: str | None) -> None:
    from omni_host.collect.transport.loading import dist_version

    (tmp_path / "paramiko").mkdir()
    for name, text in dist_infos.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "METADATA").write_text(text)
    assert dist_version("paramiko", tmp_path / "paramiko") == expected


def test_the_connection_is_prompt_and_a_started_session_is_the_one_run(sshd: Sshd) -> None:
    """The transport's TCP socket has Nagle off (and, on Linux, acknowledges at once); a
    command started ahead is the session ``run`` uses, another command gets its own."""
    import socket

    from omni_host.collect.transport.base import SshOptions
    from omni_host.collect.transport.loading import import_ssh
    from omni_host.plan.connection import SshEndpoint

    import_ssh(None)
    from omni_host.collect.transport.ssh import SshTransport

    options = SshOptions(known_hosts=sshd.known_hosts, ssh_config=None)
    transport = SshTransport("loop", SshEndpoint("127.0.0.1", sshd.port, sshd.user,
                                                 str(sshd.client_key)), options)
    before = sessions(sshd)
    try:
        transport.start(("cat",), sudo=False)
        sock = transport._clients[-1].get_transport().sock  # noqa: SLF001
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert type(sock).__name__ == "Prompt"
        assert transport.run(("cat",), stdin="ahead\n", timeout_s=10, sudo=False).stdout == "ahead\n"
        assert sessions(sshd) - before == 1
        transport.start(("cat",), sudo=False)
        other = transport.run(("echo", "other"), stdin="", timeout_s=10, sudo=False)
        assert other.stdout == "other\n"
        assert sessions(sshd) - before == 3  # the started cat was closed, unused
    finally:
        transport.close()


def test_an_invalid_policy_sends_nothing_to_the_session_opened_ahead(sshd: Sshd,
                                                                    tmp_path: Path) -> None:
    """A one-host audit starts the host's interpreter before its policy is validated; an
    invalid policy is the usual one-line error, and that interpreter is sent no program."""
    box = tmp_path / "host"
    box.mkdir()
    recorder = box / "python3"  # an interpreter that records the program it is sent
    recorder.write_text(f"#!/bin/sh\necho \"$@\" > {box}/argv.$$\ncat > {box}/program.$$\n"
                        f"touch {box}/ended.$$\n")
    recorder.chmod(0o755)
    inv = sshd.inventory(tmp_path / "inv", {"loop": {
        "ansible_python_interpreter": str(recorder), "omni_swap_path": "relative/swapfile"}})
    result = audit(sshd, inv, "loop")
    assert result.code == 2, result.stderr
    # (ansible-core, reading the inventory in this process, may warn about its own stdout)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("[WARNING]")]
    assert len(lines) == 1 and "host loop: omni_swap_path" in lines[0]
    deadline = time.monotonic() + 10
    while not list(box.glob("ended.*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    programs = list(box.glob("program.*"))
    assert len(programs) == 1  # the interpreter was started ahead...
    assert programs[0].read_bytes() == b""  # ...and ended with no program: nothing ran
    (argv,) = box.glob("argv.*")
    assert argv.read_text() == "-I -S -\n"  # isolated, without the host's site hooks


def test_an_invalid_policy_is_reported_without_waiting_for_a_slow_host(sshd: Sshd,
                                                                      tmp_path: Path) -> None:
    """The handshake runs alone for at most a second: a host that never answers does not hold
    back planning's error until the connect timeout (30 s here)."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)  # accepts, never says a word
    try:
        inv = sshd.inventory(tmp_path / "inv", {"mute": {
            "ansible_port": silent.getsockname()[1], "omni_swap_path": "relative/swapfile"}})
        result = run_cli("audit", "-i", str(inv), "--no-store", "--known-hosts",
                         str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"),
                         "--connect-timeout", "30")
    finally:
        silent.close()
    assert result.code == 2, result.stderr
    assert "host mute: omni_swap_path" in result.stderr
    assert result.seconds < 15  # planning's answer, not the 30 s connect timeout's


def test_a_command_that_ends_before_reading_its_stdin_keeps_its_words(sshd: Sshd) -> None:
    """sudo -n refusing ends the session before the collector is sent: its message and exit
    status are still what the run reports, not "Socket is closed" (CI saw that race)."""
    from omni_host.collect.transport.base import SshOptions
    from omni_host.collect.transport.loading import import_ssh
    from omni_host.plan.connection import SshEndpoint

    import_ssh(None)
    from omni_host.collect.transport.ssh import SshTransport

    options = SshOptions(known_hosts=sshd.known_hosts, ssh_config=None)
    transport = SshTransport("loop", SshEndpoint("127.0.0.1", sshd.port, sshd.user,
                                                 str(sshd.client_key)), options)
    argv = ("sh", "-c", "echo 'sudo: a password is required' >&2; exit 1")
    try:
        transport.start(argv, sudo=False)
        chan = transport._started[1]  # noqa: SLF001
        deadline = time.monotonic() + 10
        while not chan.closed and time.monotonic() < deadline:
            time.sleep(0.02)
        assert chan.closed  # the race CI lost, made certain
        run = transport.run(argv, stdin="x" * 100_000, timeout_s=10, sudo=False)
        assert (run.exit_code, run.stderr) == (1, "sudo: a password is required\n")
    finally:
        transport.close()


def test_the_fast_path_gives_the_verdicts_of_the_plain_one(sshd: Sshd, tmp_path: Path) -> None:
    """One host is audited through the start-up fast path (its session opened ahead, while the
    policy and the checks load: app/ahead.py, collect/ahead.py); the same host in a fleet goes
    the plain way (the pool). Same verdicts."""
    from omni_host.app.ahead import session_ahead
    from omni_host.collect.transport.base import SshOptions
    from omni_host.collect.transport.loading import import_ssh
    from omni_host.plan.inventory import load_inventory

    inv = sshd.inventory(tmp_path / "inv", {"one": {}, "two": {}},
                         group_vars={"omni_numa_nps": 1, "omni_swap_size_mib": 1})
    options = SshOptions(known_hosts=sshd.known_hosts, ssh_config=None)
    import_ssh(None)
    ahead = session_ahead(load_inventory(inv), "one", options)
    assert ahead is not None  # one host: its session opens ahead
    ahead.cancel()
    assert session_ahead(load_inventory(inv), "all", options) is None  # a fleet: the pool
    fast = audit(sshd, inv, "one")
    plain = audit(sshd, inv, "all")
    changing = {"gpu.xid", "docker.healthchecks"}  # uptime; containers of other tests
    one = {k: v for k, v in results(fast.stdout)["one"].items() if k not in changing}
    assert one == {k: v for k, v in results(plain.stdout)["one"].items() if k not in changing}
    # judged, whatever this machine's swap is: absent (fail), enough (pass), or a user's swap
    # file in heavy use (warn: seen beside two llama-servers and a busy loop)
    assert one["swap.capacity"] in ("pass", "warn", "fail") and len(one) > 15
