"""The fixes' loop, for real, one per role: against the loopback sshd through ansible-runner,
with real containers through Debian's docker.io and docker-compose.

For each: the audit fails the check; the preview (check mode) changes nothing on the host
(its files and containers compared before and after); apply fixes it and the re-audit passes
(`FIXED`); a second apply reports 0 changed; check mode after apply reports 0 changed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, PLAYBOOKS, Sshd, run_cli

from omni_host.collect.runner import run_playbook

pytestmark = pytest.mark.system  # real ansible-runner runs

PY = {"ansible_python_interpreter": "/usr/bin/python3"}
CAPTURES = FIXTURES / "captures"


def cli(sshd: Sshd, *args: str, report_dir: Path):
    return run_cli(*args, "--known-hosts", str(sshd.known_hosts), "--ssh-config",
                   str(sshd.workdir / "none"), "--report-dir", str(report_dir))


def status(sshd: Sshd, inv: Path, report_dir: Path, check: str) -> tuple[str, str]:
    audit = cli(sshd, "audit", "-i", str(inv), "--format", "json", report_dir=report_dir)
    result = next(r for r in json.loads(audit.stdout)["hosts"][0]["results"] if r["id"] == check)
    return result["status"], result["summary"]


def prove(sshd: Sshd, inv: Path, report_dir: Path, tmp_path: Path, *, check: str,
          playbook: str, host_state: Callable[[], object]) -> tuple[str, str]:
    """The whole loop for one check; returns the preview's and the apply's output."""
    assert status(sshd, inv, report_dir, check)[0] == "fail"
    before = host_state()
    preview = cli(sshd, "remediate", "-i", str(inv), "--check", check, report_dir=report_dir)
    assert preview.code == 0, preview.stdout + preview.stderr
    assert f"PLAN {playbook}: loop ({check})" in preview.stdout
    assert f"{playbook} on loop: " in preview.stdout and "would change" in preview.stdout
    assert host_state() == before, "the preview changed the host"

    applied = cli(sshd, "remediate", "-i", str(inv), "--check", check, "--apply", "--yes",
                  report_dir=report_dir)
    assert applied.code == 0, applied.stdout + applied.stderr
    assert f"FIXED          loop: {check} (fail -> pass)" in applied.stdout
    assert host_state() != before
    assert status(sshd, inv, report_dir, check)[0] == "pass"

    for check_mode in (False, True):  # a second apply, then check mode after apply
        again = run_playbook(playbook=PLAYBOOKS / playbook, inventory=inv, hosts=("loop",),
                             check_mode=check_mode, artifacts_dir=tmp_path / f"art{check_mode}",
                             known_hosts=sshd.known_hosts, extravars={})
        assert again.status == "successful", again.failure("loop")
        assert again.changed("loop") == [], (check_mode, again.changed("loop"))
    return preview.stdout, applied.stdout


def compose_base() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True,
                      check=False).returncode == 0:
        return ["docker", "compose"]
    pytest.fail("no docker compose (run tests/setup.sh: docker-compose)")


def inspect(*names: str) -> list[dict]:
    out = subprocess.run(["docker", "inspect", *names], capture_output=True, text=True,
                         check=True).stdout
    return [{"id": c["Id"], "name": c["Name"], "restart": c["HostConfig"]["RestartPolicy"],
             "networks": sorted(c["NetworkSettings"]["Networks"])} for c in json.loads(out)]


class Stack:
    """An operator's Compose project in its own directory: an inference service that asks for
    a GPU by the container toolkit's convention (none is needed to run it) and a gateway."""

    def __init__(self, root: Path, image: str, extra: str = "") -> None:
        self.dir = root / f"stack{uuid.uuid4().hex[:6]}"
        self.dir.mkdir()
        self.file = self.dir / "docker-compose.yml"
        self.file.write_text(
            "# the operator's stack\nversion: '3.8'\nservices:\n"
            f"  llm:\n    image: {image}\n    command: [sh, -c, 'sleep 600']\n"
            "    environment:\n      - NVIDIA_VISIBLE_DEVICES=all\n" + extra +
            f"  gateway:\n    image: {image}\n    command: [sh, -c, 'sleep 600']\n")
        self.file.chmod(0o640)
        self.cmd = [*compose_base(), "-f", str(self.file)]

    def up(self) -> None:
        subprocess.run([*self.cmd, "up", "-d"], check=True, capture_output=True, cwd=self.dir)

    def containers(self) -> list[str]:
        out = subprocess.run([*self.cmd, "ps", "-q"], capture_output=True, text=True,
                             check=True, cwd=self.dir).stdout
        return sorted(out.split())

    def state(self) -> object:
        files = {p.name: (p.read_bytes(), p.stat().st_mode) for p in sorted(self.dir.iterdir())}
        return files, inspect(*self.containers())

    def down(self) -> None:
        override = [*self.cmd, "-f", str(self.dir / "docker-compose.override.yml")] \
            if (self.dir / "docker-compose.override.yml").exists() else self.cmd
        subprocess.run([*override, "down", "-t", "0"], capture_output=True, check=False,
                       cwd=self.dir)


@pytest.fixture
def stack(docker_image: str, tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    made: list[Stack] = []

    def make(extra: str = "", up: bool = True) -> Stack:
        made.append(Stack(tmp_path, docker_image, extra))
        if up:
            made[-1].up()
        return made[-1]

    yield make
    for s in made:
        s.down()


@pytest.fixture
def plain_container(docker_image: str) -> Iterator[str]:
    """A container started without Compose (docker run), restart policy none."""
    name = f"omni-test-plain-{uuid.uuid4().hex[:6]}"
    subprocess.run(["docker", "run", "-d", "--name", name, "-e", "NVIDIA_VISIBLE_DEVICES=all",
                    docker_image, "sh", "-c", "sleep 600"], check=True, capture_output=True)
    yield name
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def test_restart_policy_then_isolation_on_one_stack(sshd: Sshd, tmp_path: Path, stack,
                                                   plain_container: str,
                                                   report_dir: Path) -> None:
    """Two fixes, one override file: the second keeps the first's keys. The Compose service
    gets `restart:` through the override, the plain container `docker update --restart`."""
    s = stack()
    original, stat = s.file.read_bytes(), s.file.stat()
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_compose_file": str(s.file), "omni_gateway_containers": ["gateway"]})
    assert "will not come back after a reboot: " in status(
        sshd, inv, report_dir, "docker.restart-policy")[1]

    def restart_state() -> object:
        return s.state(), inspect(plain_container)

    # The plain container counts as an inference container only when named.
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_compose_file": str(s.file), "omni_gateway_containers": ["gateway"],
        "omni_inference_containers": ["llm", plain_container]})
    preview, _ = prove(sshd, inv, report_dir, tmp_path, check="docker.restart-policy",
                       playbook="restart-policy.yml", host_state=restart_state)
    assert "CHANGED: Write the override file: restart unless-stopped" in preview
    assert "+    restart: unless-stopped" in preview, preview  # the override's diff
    assert f"{plain_container}: docker update --restart unless-stopped" in preview
    assert inspect(plain_container)[0]["restart"]["Name"] == "unless-stopped"
    override = s.dir / "docker-compose.override.yml"
    assert "restart: unless-stopped" in override.read_text()

    # Isolation is the Compose file's business: the plain container goes, and the inference
    # containers are the default, the GPU ones (llm).
    subprocess.run(["docker", "rm", "-f", plain_container], check=True, capture_output=True)
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_compose_file": str(s.file), "omni_gateway_containers": ["gateway"]})
    preview, _ = prove(sshd, inv, report_dir, tmp_path, check="docker.isolation",
                       playbook="isolation.yml", host_state=s.state)
    assert "CHANGED: Write the override file: internal network omni_internal" in preview
    assert "+    internal: true" in preview
    doc = override.read_text()
    assert "restart: unless-stopped" in doc and "internal: true" in doc  # both fixes' keys
    by_name = {c["name"].split("_")[-2]: c for c in inspect(*s.containers())}
    project = s.dir.name
    assert by_name["llm"]["networks"] == [f"{project}_omni_internal"]
    assert by_name["gateway"]["networks"] == [f"{project}_default", f"{project}_omni_internal"]
    assert status(sshd, inv, report_dir, "docker.restart-policy")[0] == "pass"  # still
    # The operator's file: not one byte, not its mode, not its owner.
    after = s.file.stat()
    assert s.file.read_bytes() == original
    assert (after.st_mode, after.st_uid, after.st_gid) == (stat.st_mode, stat.st_uid, stat.st_gid)


def test_isolation_refuses_what_an_override_cannot_undo(sshd: Sshd, tmp_path: Path, stack,
                                                       report_dir: Path) -> None:
    s = stack("    ports: ['18080:8080']\n    networks: [front]\n", up=False)
    s.file.write_text(s.file.read_text() + "networks:\n  front: {}\n")
    before = s.file.read_bytes()
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_compose_file": str(s.file), "omni_gateway_containers": ["gateway", "proxy"]})
    outcome = run_playbook(playbook=PLAYBOOKS / "isolation.yml", inventory=inv, hosts=("loop",),
                           check_mode=False, artifacts_dir=tmp_path / "art",
                           known_hosts=sshd.known_hosts, extravars={})
    failure = outcome.failure("loop")
    assert failure is not None
    assert failure.message == (
        f"{s.file}: proxy: not a service of the Compose file; llm: publishes ports, unreachable "
        "from an internal network (serve it through a gateway in omni_gateway_containers and "
        "remove its ports); llm: on network(s) front, which an override cannot remove (take "
        "them out of the file)")
    assert s.file.read_bytes() == before
    assert sorted(p.name for p in s.dir.iterdir()) == ["docker-compose.yml"]


def test_restart_policy_refuses_a_container_that_does_not_exist(sshd: Sshd, tmp_path: Path,
                                                                report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_inference_containers": ["omni-test-nonesuch"]})
    outcome = run_playbook(playbook=PLAYBOOKS / "restart-policy.yml", inventory=inv,
                           hosts=("loop",), check_mode=True, artifacts_dir=tmp_path / "art",
                           known_hosts=sshd.known_hosts, extravars={})
    failure = outcome.failure("loop")
    assert failure is not None and failure.message == "no container omni-test-nonesuch on loop"


FAKE_SMI = """#!/bin/sh
# A stand-in for nvidia-smi on this GPU-less VM: two GPUs whose persistence mode lives in
# {state}. It answers the two calls the persistence role makes, as the real tool prints them.
case "$*" in
  "--query-gpu=pci.bus_id,persistence_mode --format=csv,noheader") cat {state} ;;
  "-i "*" -pm 1")
    sed -i "s/^$2, Disabled$/$2, Enabled/" {state}
    echo "Enabled Legacy persistence mode for GPU $2."; echo "All done." ;;
  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 9 ;;
esac
"""


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path) -> Iterator[Path]:
    """What cannot exist here: an NVIDIA driver. The fake sits on the login PATH for the test
    and is removed afterwards."""
    smi = Path("/usr/local/bin/nvidia-smi")
    if smi.exists():
        pytest.fail(f"{smi} exists on this VM: the fake would replace it")
    state = tmp_path / "pm-state"
    # The lent H100's own answer (Enabled), and a second GPU in the same format with it off.
    real = (CAPTURES / "persistence-h100" / "nvidia-smi_query-pci.bus_id,persistence_mode.txt")
    state.write_text(real.read_text() + "00000000:41:00.0, Disabled\n")
    smi.write_text(FAKE_SMI.format(state=state))
    smi.chmod(0o755)
    yield state
    smi.unlink()


def test_persistence_loop_without_systemd(sshd: Sshd, tmp_path: Path,
                                          fake_nvidia_smi: Path) -> None:
    """No systemd here (PID 1 is not systemd), so the role falls back to `nvidia-smi -pm 1` on
    the GPU that has it off, and says that it lasts until the next reboot. The re-audit needs
    a real driver: on the lent H100 (persistence on) the role's check mode changed nothing
    (fixtures/captures/persistence-h100)."""
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY})
    runs = {}
    for name, check_mode in (("preview", True), ("apply", False), ("again", False),
                             ("after", True)):
        runs[name] = run_playbook(playbook=PLAYBOOKS / "persistence.yml", inventory=inv,
                                  hosts=("loop",), check_mode=check_mode,
                                  artifacts_dir=tmp_path / name, known_hosts=sshd.known_hosts,
                                  extravars={})
        assert runs[name].status == "successful", runs[name].failure("loop")
        if name == "preview":
            assert "Disabled" in fake_nvidia_smi.read_text()  # the preview changed nothing
    plan = "Persistence plan without nvidia-persistenced"
    (task,) = runs["preview"].changed("loop")
    assert task.task == plan
    assert task.message == ("00000000:41:00.0: nvidia-smi -pm 1, until the next reboot (no "
                            "nvidia-persistenced unit under systemd)")
    assert fake_nvidia_smi.read_text() == "00000000:00:06.0, Enabled\n00000000:41:00.0, Enabled\n"
    assert runs["again"].changed("loop") == [] and runs["after"].changed("loop") == []


def test_persistence_refuses_a_host_without_a_driver(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY})
    outcome = run_playbook(playbook=PLAYBOOKS / "persistence.yml", inventory=inv,
                           hosts=("loop",), check_mode=True, artifacts_dir=tmp_path / "art",
                           known_hosts=sshd.known_hosts, extravars={})
    failure = outcome.failure("loop")
    assert failure is not None
    assert failure.message.startswith("nvidia-smi does not answer on loop (rc 2:")
    assert failure.message.endswith("): no driver to keep initialised")


@pytest.fixture
def absent_package() -> Iterator[str]:
    """GNU hello (depends on libc6 only), not installed before the test and purged after."""
    name = "hello"
    if subprocess.run(["dpkg-query", "-W", "-f", "${Status}", name], capture_output=True,
                      text=True, check=False).stdout.endswith(" installed"):
        pytest.fail(f"{name} is installed on this VM: purge it (apt-get purge {name})")
    yield name
    subprocess.run(["apt-get", "purge", "-y", "-qq", name], capture_output=True, check=False)


def test_packages_loop(sshd: Sshd, tmp_path: Path, report_dir: Path, absent_package: str) -> None:
    """The variable the check reads is the one the role installs."""
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_build_packages": ["numactl", absent_package]})
    assert f"missing: {absent_package}" in status(sshd, inv, report_dir,
                                                  "packages.build-deps")[1]

    def installed() -> object:
        return Path("/var/lib/dpkg/status").read_bytes()

    prove(sshd, inv, report_dir, tmp_path, check="packages.build-deps",
          playbook="packages.yml", host_state=installed)
    assert shutil.which(absent_package)
