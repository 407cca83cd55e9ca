"""Remediation for real: ansible-runner against the loopback sshd, on this throwaway VM.

swap: audit fails -> preview changes nothing -> apply creates and activates the file -> the
audit passes -> a second run changes nothing -> clean up. tunables: a real Compose service
without GLIBC_TUNABLES fails, the playbook recreates it with them, the audit passes.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import PLAYBOOKS, Sshd, free_port, run_cli
from helpers import assert_valid_report

from omni_host.collect.runner import run_playbook
from omni_host.model import CheckResult, Remediation, Severity, Status
from omni_host.remediate.flow import Step, outcomes
from omni_host.remediate.plan import PlaybookRun, make_plan
from omni_host.reports import FixVerdict, HostReport

pytestmark = pytest.mark.system  # real ansible-runner runs

PY = {"ansible_python_interpreter": "/usr/bin/python3"}
PLANTED = "sk-planted-9f3b2c7e1d"  # a secret in the operator's Compose file


def active_swaps() -> list[str]:
    return [line.split()[0] for line in Path("/proc/swaps").read_text().splitlines()[1:]]


@pytest.fixture
def swap_target():
    """A swap file path of its own, and the host restored afterwards."""
    base = Path(f"/var/tmp/omni-test-{uuid.uuid4().hex[:8]}")
    path = base / "swapfile"
    fstab = Path("/etc/fstab")
    saved = fstab.read_text() if fstab.exists() else None
    yield path
    if str(path) in active_swaps():
        subprocess.run(["swapoff", str(path)], check=True)
    shutil.rmtree(base, ignore_errors=True)
    if saved is not None:
        fstab.write_text(saved)


def cli(sshd: Sshd, *args: str, report_dir: Path):
    return run_cli(*args, "--known-hosts", str(sshd.known_hosts), "--ssh-config",
                   str(sshd.workdir / "none"), "--report-dir", str(report_dir))


def swap_status(sshd: Sshd, inv: Path, report_dir: Path) -> str:
    result = cli(sshd, "audit", "-i", str(inv), "--format", "json", report_dir=report_dir)
    results = json.loads(result.stdout)["hosts"][0]["results"]
    return next(r["status"] for r in results if r["id"] == "swap.capacity")


@pytest.mark.parametrize("fmt", ["yaml", "ini"])
def test_swap_preview_apply_prove_and_idempotent(sshd: Sshd, tmp_path: Path, swap_target: Path,
                                                 report_dir: Path, fmt: str) -> None:
    fstab_before = Path("/etc/fstab").read_text()
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": 64, "omni_swap_path": str(swap_target)}, fmt=fmt)
    assert swap_status(sshd, inv, report_dir) == "fail"
    stored = sorted(p.name for p in report_dir.iterdir())

    preview = cli(sshd, "remediate", "-i", str(inv), report_dir=report_dir)
    assert preview.code == 0, preview.stdout + preview.stderr
    # a preview changes nothing and stores nothing: report diff keeps comparing real audits
    assert sorted(p.name for p in report_dir.iterdir()) == stored
    assert "pre-remediation" not in preview.stderr
    assert "PLAN swap.yml: loop (swap.capacity)" in preview.stdout
    assert "swap.yml on loop: 3 task(s) would change" in preview.stdout
    assert f"+{swap_target} none swap sw 0 0" in preview.stdout  # the fstab diff
    assert not swap_target.exists() and str(swap_target) not in active_swaps()
    assert Path("/etc/fstab").read_text() == fstab_before

    refused = cli(sshd, "remediate", "-i", str(inv), "--apply", report_dir=report_dir)
    assert refused.code == 2
    assert "add --yes" in refused.stderr and not swap_target.exists()

    applied = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
    assert applied.code == 0, applied.stdout + applied.stderr
    assert str(swap_target) in active_swaps()
    assert oct(swap_target.stat().st_mode & 0o777) == "0o600"
    assert f"{swap_target} none swap sw 0 0" in Path("/etc/fstab").read_text()
    assert "FIXED          loop: swap.capacity (fail -> pass)" in applied.stdout
    docs = {p: json.loads((p / "report.json").read_text()) for p in report_dir.iterdir()
            if p.is_dir() and not p.name.startswith(".")}
    for d in docs.values():
        assert_valid_report(d)
    ((stored, doc),) = [(p, d) for p, d in docs.items() if d["remediation"]]
    record = doc["remediation"]
    pre = json.loads((report_dir / doc["pre_state"] / "report.json").read_text())
    assert pre["source"] == "pre-remediation"  # the failure was observed in this very run
    assert {r["id"]: r["status"] for r in pre["hosts"][0]["results"]}["swap.capacity"] == "fail"
    assert record[0]["outcome"] == "fixed" and "Allocate the swap file (fallocate)" in \
        record[0]["changed_tasks"]
    assert list((stored / "ansible").glob("apply-swap/artifacts/*/job_events"))  # kept
    # finished as an audit is: its Cold Case against the stored audits names the fix (the
    # remediation's reports had no Cold Case and no waivers before)
    items = doc["hosts"][0]["cold_case"]["items"]
    assert [(i["item"], i["was"], i["now"]) for i in items if i["item"] == "swap.capacity"] == \
        [("swap.capacity", "fail", "pass")]
    assert pre["hosts"][0]["cold_case"] is not None
    assert swap_status(sshd, inv, report_dir) == "pass"

    again = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
    assert again.code == 0 and "Nothing to remediate with a playbook." in again.stdout
    for check_mode in (False, True):  # a second apply, then check mode after apply
        second = run_playbook(playbook=PLAYBOOKS / "swap.yml", inventory=inv, hosts=("loop",),
                              check_mode=check_mode, artifacts_dir=tmp_path / f"art{check_mode}",
                              known_hosts=sshd.known_hosts, extravars={})
        assert second.status == "successful" and second.changed("loop") == []


def test_swap_in_an_existing_1777_directory_keeps_its_mode_and_the_preview_shows_every_change(
        sshd: Sshd, tmp_path: Path, swap_target: Path, report_dir: Path) -> None:
    """The directory is the operator's (1777, like /var/tmp): only the swap file is the play's.
    The file exists, formatted but world-readable and off: the preview names the plan and the
    mode change, the apply makes exactly those, and check mode afterwards changes nothing."""
    swap_target.parent.mkdir()
    swap_target.parent.chmod(0o1777)
    subprocess.run(["fallocate", "-l", str(64 * 1048576), str(swap_target)], check=True)
    subprocess.run(["mkswap", str(swap_target)], check=True, capture_output=True)
    swap_target.chmod(0o644)
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": 64, "omni_swap_path": str(swap_target)})

    preview = cli(sshd, "remediate", "-i", str(inv), report_dir=report_dir)
    assert preview.code == 0, preview.stdout + preview.stderr
    assert f"CHANGED: Swap plan for {swap_target}: swapon" in preview.stdout  # the task message
    assert f"{swap_target}: mode 0644 -> 0600" in preview.stdout  # a non-text diff, shown
    assert str(swap_target.parent) + ":" not in preview.stdout  # nothing about the directory
    assert oct(swap_target.stat().st_mode & 0o777) == "0o644"  # the preview changed nothing

    applied = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
    assert applied.code == 0, applied.stdout + applied.stderr
    assert oct(swap_target.parent.stat().st_mode & 0o7777) == "0o1777"
    assert swap_target.parent.stat().st_uid == 0
    assert oct(swap_target.stat().st_mode & 0o777) == "0o600"
    assert str(swap_target) in active_swaps()
    after = run_playbook(playbook=PLAYBOOKS / "swap.yml", inventory=inv, hosts=("loop",),
                         check_mode=True, artifacts_dir=tmp_path / "art",
                         known_hosts=sshd.known_hosts, extravars={})
    assert after.status == "successful" and after.changed("loop") == []


@pytest.fixture
def system_swap_target(request: pytest.FixtureRequest):
    """A swap path in a system directory; should a play ever accept it, the host is restored."""
    target = Path(request.param) / f"omni-test-{uuid.uuid4().hex[:8]}"
    fstab = Path("/etc/fstab")
    saved = fstab.read_text() if fstab.exists() else None
    yield target
    if str(target) in active_swaps():
        subprocess.run(["swapoff", str(target)], check=True)
    target.unlink(missing_ok=True)
    if saved is not None:
        fstab.write_text(saved)


@pytest.mark.parametrize("system_swap_target", ["/etc", "/tmp", "/usr"], indirect=True)
def test_a_swap_file_in_a_system_directory_is_refused(sshd: Sshd, tmp_path: Path,
                                                      report_dir: Path,
                                                      system_swap_target: Path) -> None:
    target = system_swap_target
    directory = str(target.parent)
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": 64, "omni_swap_path": str(target)})
    result = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
    assert result.code == 1, result.stdout + result.stderr
    assert f"is in {directory}, a system directory this play must not change" in result.stdout
    assert not target.exists()


def test_site_check_mode_runs_clean(sshd: Sshd, tmp_path: Path, swap_target: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": 64, "omni_swap_path": str(swap_target),
        "omni_zen5_tunables_containers": ["memgraph"]})
    outcome = run_playbook(playbook=PLAYBOOKS / "site.yml", inventory=inv,
                           hosts=("loop",), check_mode=True, artifacts_dir=tmp_path / "art",
                           known_hosts=sshd.known_hosts, extravars={})
    assert outcome.status == "successful", [t for t in outcome.tasks if t.status == "failed"]
    assert outcome.failure("loop") is None
    assert not swap_target.exists()


def test_driver_playbook_is_refused_without_allow_reboot(sshd: Sshd, tmp_path: Path,
                                                         report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_gpu_driver_min": "580.95.05"})
    result = cli(sshd, "remediate", "-i", str(inv), "--check", "gpu.driver-version",
                 report_dir=report_dir)
    assert result.code == 2
    assert "nvidia-driver.yml needs a reboot; refused without --allow-reboot" in result.stderr


def test_invalid_policy_is_an_error_before_any_host_is_touched(sshd: Sshd, tmp_path: Path,
                                                               report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={"omni_swap_size_mib": -5})
    result = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
    assert result.code == 2
    assert "omni_swap_size_mib: must be >= 0, got -5" in result.stderr
    assert not report_dir.exists()


def test_task_failure_is_named_and_the_finding_stays_failed(sshd: Sshd, tmp_path: Path,
                                                           report_dir: Path) -> None:
    # A directory where the swap file should be: the playbook refuses to touch it.
    target = tmp_path / "swap-is-a-dir"
    target.mkdir()
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": 64, "omni_swap_path": str(target)})
    result = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
    assert result.code == 1
    assert "swap.yml on loop: FAILED at 'Refuse a swap path that is not a regular file'" in \
        result.stdout
    assert "is not a regular file: not touching it" in result.stdout
    assert target.is_dir()


def test_unreachable_host_is_reported_and_never_fixed(sshd: Sshd, tmp_path: Path) -> None:
    # A real ansible-runner run against a host whose port refuses connections.
    inv = sshd.inventory(tmp_path / "inv", {"gone": {**PY, "ansible_port": free_port()}})
    outcome = run_playbook(playbook=PLAYBOOKS / "swap.yml", inventory=inv,
                           hosts=("gone",), check_mode=False, artifacts_dir=tmp_path / "art",
                           known_hosts=sshd.known_hosts,
                           extravars={"omni_swap_size_mib": 64, "omni_swap_path": "/var/tmp/x"})
    failure = outcome.failure("gone")
    assert failure is not None and failure.status == "unreachable"
    finding = CheckResult("swap.capacity", "swap", Status.FAIL, Severity.HIGH, ("S-009",),
                          "no swap", remediation=Remediation("playbook", "swap.yml", ()))
    plan = make_plan([HostReport("gone", None, "ssh", True, None, 0.0, (finding,))],
                     available=frozenset({"swap.yml"}))
    step = Step(PlaybookRun("swap.yml", ("gone",), ("swap.capacity",)), outcome)
    after = [HostReport("gone", None, "ssh", False, "connection refused", 0.0)]
    (record,) = outcomes(plan, [step], after)
    assert record.outcome is FixVerdict.ERROR and "unreachable" in record.detail


@pytest.fixture
def compose_project(docker_image: str, tmp_path: Path):
    if not shutil.which("docker-compose") and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False).returncode:
        pytest.fail("no docker compose (run tests/setup.sh: docker-compose)")
    project = tmp_path / "stack"
    project.mkdir()
    compose = project / "docker-compose.yml"
    compose.write_text(
        "# the operator's stack\nversion: '3.8'\nservices:\n  memgraph:\n"
        f"    image: {docker_image}\n    command: [sh, -c, 'sleep 600']\n"
        "    environment:   # kept as the operator wrote it\n      - MG_LOG_LEVEL=INFO\n"
        f"      - API_KEY={PLANTED}\n")
    compose.chmod(0o640)
    base = ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]
    # The project name is the directory's, as when the operator runs compose in it.
    cmd = [*base, "-f", str(compose)]
    subprocess.run([*cmd, "up", "-d"], check=True, capture_output=True, cwd=project)
    yield compose
    subprocess.run([*cmd, "down", "-t", "0"], capture_output=True, check=False, cwd=project)


def test_tunables_loop_with_a_real_compose_service(sshd: Sshd, tmp_path: Path,
                                                   compose_project: Path, report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_zen5_tunables_containers": ["memgraph"], "omni_tunables_everywhere": True,
        "omni_compose_file": str(compose_project)})
    audit = cli(sshd, "audit", "-i", str(inv), "--format", "json", report_dir=report_dir)
    tun = next(r for r in json.loads(audit.stdout)["hosts"][0]["results"]
               if r["id"] == "containers.glibc-tunables")
    assert tun["status"] == "fail" and "memgraph: no GLIBC_TUNABLES" in tun["summary"]

    original, stat = compose_project.read_bytes(), compose_project.stat()
    override = compose_project.parent / "docker-compose.override.yml"
    preview = cli(sshd, "remediate", "-i", str(inv), report_dir=report_dir)
    assert preview.code == 0, preview.stdout + preview.stderr
    assert "CHANGED: Write the override file: GLIBC_TUNABLES" in preview.stdout, preview.stdout
    assert "+      GLIBC_TUNABLES: glibc.cpu.hwcaps=-AVX512F" in preview.stdout  # its diff
    # the containers it will recreate are named before --apply (issue 47)
    assert ("CHANGED: Compose services to recreate (GLIBC_TUNABLES): their containers are "
            "recreated (docker compose up -d --force-recreate --no-deps): memgraph") \
        in preview.stdout, preview.stdout
    assert not override.exists()

    applied = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
    assert applied.code == 0, applied.stdout + applied.stderr
    assert "FIXED          loop: containers.glibc-tunables (fail -> pass)" in applied.stdout
    # The operator's file: not one byte, not its mode, not its owner changed; no backup needed.
    assert compose_project.read_bytes() == original
    after = compose_project.stat()
    assert (after.st_mode, after.st_uid, after.st_gid) == (stat.st_mode, stat.st_uid, stat.st_gid)
    assert sorted(p.name for p in compose_project.parent.iterdir()) == [
        "docker-compose.override.yml", "docker-compose.yml"]
    assert "GLIBC_TUNABLES: glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512CD,-AVX512DQ" \
        in override.read_text()
    # The secret in the operator's file reached no output and nothing stored (ansible-runner's
    # artifacts included).
    for text in (preview.stdout, preview.stderr, applied.stdout, applied.stderr):
        assert PLANTED not in text
    leaks = [p for p in report_dir.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()]
    assert leaks == []
    assert list(report_dir.rglob("job_events/*.json"))  # the artifacts were searched
    for check_mode in (False, True):  # a second apply, then check mode after apply
        again = run_playbook(playbook=PLAYBOOKS / "glibc-tunables.yml", inventory=inv,
                             hosts=("loop",), check_mode=check_mode,
                             artifacts_dir=tmp_path / f"art{check_mode}",
                             known_hosts=sshd.known_hosts, extravars={})
        assert again.status == "successful" and again.changed("loop") == []


def test_tunables_fix_the_stack_the_operator_started_under_its_own_project_name(
        sshd: Sshd, tmp_path: Path, docker_image: str, report_dir: Path) -> None:
    """The stack runs as `docker-compose -p opsstack`: the fix recreates that project's
    container (found from its labels), and no second copy under the directory's name appears
    (it did: two stacks fighting for the GPUs, the check passing on the copy)."""
    project = tmp_path / "stack"
    project.mkdir()
    compose = project / "docker-compose.yml"
    compose.write_text(f"version: '3.8'\nservices:\n  memgraph:\n    image: {docker_image}\n"
                       "    command: [sh, -c, 'sleep 600']\n")
    base = ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]
    name = f"ops{uuid.uuid4().hex[:6]}"
    ops = [*base, "-p", name, "-f", str(compose)]

    def containers(project_name: str) -> list[str]:
        return subprocess.run(["docker", "ps", "-aq", "--filter",
                               f"label=com.docker.compose.project={project_name}"],
                              capture_output=True, text=True, check=True).stdout.split()

    subprocess.run([*ops, "up", "-d"], check=True, capture_output=True, cwd=tmp_path)
    try:
        (before,) = containers(name)
        inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
            "omni_zen5_tunables_containers": ["memgraph"], "omni_tunables_everywhere": True,
            "omni_compose_file": str(compose)})
        applied = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
        assert applied.code == 0, applied.stdout + applied.stderr
        assert "FIXED          loop: containers.glibc-tunables (fail -> pass)" in applied.stdout
        assert containers("stack") == []  # no second copy under the directory's name
        (after,) = containers(name)
        assert after != before  # the operator's service, recreated in its own project
        env = subprocess.run(["docker", "inspect", "--format", "{{json .Config.Env}}", after],
                             capture_output=True, text=True, check=True).stdout
        assert "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F" in env
    finally:
        subprocess.run([*ops, "down", "-t", "0"], capture_output=True, check=False, cwd=tmp_path)
        subprocess.run([*base, "-p", "stack", "-f", str(compose), "down", "-t", "0"],
                       capture_output=True, check=False, cwd=tmp_path)


def test_tunables_refuse_an_override_file_the_operator_wrote(sshd: Sshd, tmp_path: Path,
                                                             compose_project: Path,
                                                             report_dir: Path) -> None:
    override = compose_project.parent / "docker-compose.override.yml"
    override.write_text("# mine\nservices: {}\n")
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_zen5_tunables_containers": ["memgraph"], "omni_tunables_everywhere": True,
        "omni_compose_file": str(compose_project)})
    result = cli(sshd, "remediate", "-i", str(inv), "--apply", "--yes", report_dir=report_dir)
    assert result.code == 1, result.stdout + result.stderr
    assert "exists and was not written by omni-host" in result.stdout
    assert override.read_text() == "# mine\nservices: {}\n"


def test_tunables_leave_a_compose_file_that_does_not_parse(sshd: Sshd, tmp_path: Path,
                                                          report_dir: Path) -> None:
    compose = tmp_path / "docker-compose.yml"
    compose.write_text(f"services: [unclosed\n  API_KEY: {PLANTED}\n")
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_zen5_tunables_containers": ["memgraph"], "omni_tunables_everywhere": True,
        "omni_compose_file": str(compose)})
    outcome = run_playbook(playbook=PLAYBOOKS / "glibc-tunables.yml", inventory=inv,
                           hosts=("loop",), check_mode=False, artifacts_dir=tmp_path / "art",
                           known_hosts=sshd.known_hosts, extravars={})
    failure = outcome.failure("loop")
    assert failure is not None
    assert failure.message == f"{compose} does not parse as a YAML mapping: left untouched"
    assert compose.read_text().startswith("services: [unclosed")
    assert not (tmp_path / "docker-compose.override.yml").exists()
    assert not [p for p in (tmp_path / "art").rglob("*") if p.is_file()
                and PLANTED.encode() in p.read_bytes()]


def test_bootstrap_ends_with_a_stored_baseline(sshd: Sshd, tmp_path: Path, swap_target: Path,
                                               report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": 64, "omni_swap_path": str(swap_target),
        "omni_build_packages": ["numactl"]})
    preview = cli(sshd, "bootstrap", "-i", str(inv), "loop", report_dir=report_dir)
    assert preview.code == 0 and "site.yml on loop:" in preview.stdout
    assert not swap_target.exists()
    result = cli(sshd, "bootstrap", "-i", str(inv), "loop", "--apply", "--yes",
                 report_dir=report_dir)
    assert result.code == 0, result.stdout + result.stderr
    assert "baseline audit stored in" in result.stderr
    (stored,) = [p for p in report_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    report = json.loads((stored / "report.json").read_text())
    assert report["baseline"] is True and report["source"] == "bootstrap"
    assert_valid_report(report)
    statuses = {r["id"]: r["status"] for r in report["hosts"][0]["results"]}
    assert statuses["swap.capacity"] == "pass"
    assert str(swap_target) in active_swaps()


def test_a_preview_with_an_unreachable_host_does_not_exit_0(sshd: Sshd, tmp_path: Path,
                                                             swap_target: Path,
                                                             report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY, "gone": {**PY, "ansible_port": free_port()}},
                         group_vars={"omni_swap_size_mib": 64, "omni_swap_path": str(swap_target)})
    preview = cli(sshd, "remediate", "-i", str(inv), report_dir=report_dir)
    assert "gone: unreachable" in preview.stderr
    assert "swap.yml on loop: 3 task(s) would change" in preview.stdout  # loop still previewed
    assert preview.code == 3
    assert not swap_target.exists()


def test_a_vaulted_policy_reaches_the_playbooks(sshd: Sshd, tmp_path: Path, swap_target: Path,
                                                report_dir: Path) -> None:
    """The swap path vaulted in group_vars: the audit decrypts it, and now so do the
    playbooks (--vault-password-file goes to ansible-playbook; every preview failed with
    "no vault secrets found" before), and the play's words about it are scrubbed on screen."""
    import sys

    password = Path(__file__).parent / "inventories" / "vault" / "vault-pass.txt"
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY})
    vaulted = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string",
         "--vault-password-file", str(password), str(swap_target), "--name", "omni_swap_path"],
        capture_output=True, text=True, check=True).stdout
    (inv / "group_vars").mkdir(exist_ok=True)
    (inv / "group_vars" / "lab.yml").write_text("omni_swap_size_mib: 64\n" + vaulted)
    preview = cli(sshd, "remediate", "-i", str(inv), "--vault-password-file", str(password),
                  report_dir=report_dir)
    assert preview.code == 0, preview.stdout + preview.stderr
    assert "swap.yml on loop: 3 task(s) would change" in preview.stdout
    assert str(swap_target) not in preview.stdout + preview.stderr  # the secret is scrubbed
    # applied: the fix works with the vaulted path, and nothing the store keeps holds it in
    # clear (the play named it in task titles and results: ansible-runner's stdout and events)
    applied = cli(sshd, "remediate", "-i", str(inv), "--vault-password-file", str(password),
                  "--apply", "--yes", report_dir=report_dir)
    assert applied.code == 0, applied.stdout + applied.stderr
    assert str(swap_target) in active_swaps()
    stored = [p for p in report_dir.rglob("*") if p.is_file()]
    events = [p for p in stored if "job_events" in p.parts]
    assert events and any("ansible" in p.parts for p in stored)  # the artifacts are kept
    leaked = [str(p) for p in stored if str(swap_target).encode() in p.read_bytes()]
    assert not leaked, leaked[:5]
    # a password typed at a prompt cannot reach ansible-playbook through ansible-runner
    import argparse

    from omni_host.cli.remediate import _vault_files
    from omni_host.errors import UsageError

    with pytest.raises(UsageError, match="need the vault password in a file"):
        _vault_files(argparse.Namespace(ask_vault_pass=True, vault_password_file=[]))
    assert _vault_files(argparse.Namespace(ask_vault_pass=False,
                                           vault_password_file=[password])) == (password,)


def test_a_waived_finding_is_not_fixed_unless_named() -> None:
    """A waiver says the operator accepted the finding as it is: remediation leaves it (and
    says so) unless --check names it."""
    from omni_host.model import AppliedWaiver

    waiver = AppliedWaiver("swap.capacity", "gpu-*", "new NVMe next week", "ops-lead",
                           "2027-03-31", 3)
    fix = Remediation("playbook", "swap.yml", ())
    swap = CheckResult("swap.capacity", "swap", Status.FAIL, Severity.HIGH, ("S-009",),
                       "no swap", remediation=fix)
    hosts = [HostReport("gpu-01", None, "ssh", True, None, 0.0,
                        (dataclasses.replace(swap, waiver=waiver),)),
             HostReport("gpu-02", None, "ssh", True, None, 0.0, (swap,))]
    plan = make_plan(hosts, available=frozenset({"swap.yml"}))
    assert plan.runs == (PlaybookRun("swap.yml", ("gpu-02",), ("swap.capacity",)),)
    assert plan.waived == ("gpu-01: swap.capacity is waived by ops-lead until 2027-03-31: not "
                           "fixed (--check swap.capacity fixes it anyway)",)
    named = make_plan(hosts, only=frozenset({"swap.capacity"}), available=frozenset({"swap.yml"}))
    assert named.runs == (PlaybookRun("swap.yml", ("gpu-01", "gpu-02"), ("swap.capacity",)),)
    assert named.waived == ()


def test_sigterm_during_an_apply_says_where_the_play_was_cut(sshd: Sshd, tmp_path: Path,
                                                             swap_target: Path,
                                                             report_dir: Path) -> None:
    """SIGTERM during `remediate --apply`: ansible-runner cancelled the play, and omni-host
    then re-audited, printed `STILL FAILING box: swap.capacity (fail -> fail)`, stored that and
    exited 1, as if the fix had run. Now: exit 143, the tasks done named, no re-audit."""
    import os
    import signal
    import sys

    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": 64, "omni_swap_path": str(swap_target)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_host", "remediate", "-i", str(inv), "--apply", "--yes",
         "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(sshd.workdir / "none"),
         "--report-dir", str(report_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "CHANGED: Allocate the swap file" in line:
            proc.send_signal(signal.SIGTERM)
            break
    rest, stderr = proc.communicate(timeout=120)
    out = "".join(seen) + rest
    assert proc.returncode == 143, out + stderr
    assert "swap.yml stopped by a signal (ansible-runner canceled it)" in stderr
    assert "done: loop: Allocate the swap file (fallocate) (changed)" in out
    # the task it was in (if one had begun) is named, its effect unknown; the audit that
    # checks it is the next step, with the options this run needed (issue 43)
    flying = [line for line in out.splitlines() if "in flight: " in line]
    assert all(line.endswith("its effect is unknown (it may have run in part or whole)")
               and "Allocate the swap file" not in line for line in flying)
    assert stderr.splitlines()[-1] == (
        f"omni-host: next: check what it did with omni-host audit -i {inv} --known-hosts "
        f"{sshd.known_hosts} --ssh-config {sshd.workdir / 'none'} --report-dir {report_dir}, "
        "before applying again")
    assert "STILL FAILING" not in out and "FIXED" not in out
    stored = [json.loads((p / "report.json").read_text())["source"]
              for p in report_dir.iterdir() if (p / "report.json").exists()]
    assert stored == ["pre-remediation"]  # the state it started from; no claim of a re-audit


def test_sigterm_during_the_preview_says_nothing_was_changed(sshd: Sshd, tmp_path: Path,
                                                             swap_target: Path,
                                                             report_dir: Path) -> None:
    """SIGTERM while `--apply` is still previewing: check mode changed nothing, and the run
    says so (it listed the check-mode tasks as `(changed)` and said the host was left as they
    left it, issue 47)."""
    import os
    import signal
    import sys

    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": 64, "omni_swap_path": str(swap_target)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_host", "remediate", "-i", str(inv), "--apply", "--yes",
         "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(sshd.workdir / "none"),
         "--report-dir", str(report_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "CHANGED: Swap plan" in line:
            proc.send_signal(signal.SIGTERM)
            break
    rest, stderr = proc.communicate(timeout=120)
    out = "".join(seen) + rest
    assert proc.returncode == 143, out + stderr
    assert "Applying:" not in out, out
    assert ("swap.yml's preview (check mode) stopped by a signal: nothing was changed, nothing "
            "applied") in stderr, stderr
    assert "previewed: loop: Swap plan for" in out and "(would change)" in out, out
    assert "left as its tasks left them" not in stderr and "(changed)" not in out.split(
        "previewed:", 1)[1]
    assert not swap_target.exists()
    assert str(swap_target) not in active_swaps()


def test_a_swap_file_larger_than_the_free_disk_fails_its_preview(sshd: Sshd, tmp_path: Path,
                                                                 swap_target: Path,
                                                                 report_dir: Path) -> None:
    """The plan that cannot fit is said in the preview (the reference box's 200 GiB swap file
    on a disk with 76 GiB free was previewed without a word), the preview exits 1, and it never
    invites --apply."""
    free_mib = shutil.disk_usage(swap_target.parent.parent).free // 2**20
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY}, group_vars={
        "omni_swap_size_mib": free_mib + 4096, "omni_swap_path": str(swap_target)})
    preview = cli(sshd, "remediate", "-i", str(inv), report_dir=report_dir)
    assert preview.code == 1, preview.stdout + preview.stderr
    assert (f"FAILED at 'Refuse a swap file larger than the free space': a {free_mib + 4096} MiB "
            f"swap file does not fit at {swap_target}") in preview.stdout, preview.stdout
    assert "Run again with --apply" not in preview.stdout
    assert "The preview failed on loop: --apply would not touch it until it passes." \
        in preview.stdout, preview.stdout
    assert not swap_target.exists()


def test_playbooks_run_with_the_audits_interpreter_unless_the_inventory_names_one(
        sshd: Sshd, tmp_path: Path, swap_target: Path) -> None:
    """The audit runs its collector with python3 from the host's PATH; the playbooks ran with
    whatever Ansible's interpreter discovery picked (a pyenv shim of a version not installed:
    the preview failed where the audit had worked). Now the playbooks use the audit's python3
    (no discovery), and an inventory's ansible_python_interpreter still wins."""
    for name, hv in (("plain", {}), ("named", PY)):
        inv = sshd.inventory(tmp_path / name, {"loop": hv}, group_vars={
            "omni_swap_size_mib": 64, "omni_swap_path": str(swap_target)})
        outcome = run_playbook(playbook=PLAYBOOKS / "swap.yml", inventory=inv, hosts=("loop",),
                               check_mode=True, artifacts_dir=tmp_path / f"art-{name}",
                               known_hosts=sshd.known_hosts, extravars={})
        assert outcome.status == "successful", outcome.tasks
        events = "".join(p.read_text() for p in (tmp_path / f"art-{name}").rglob("*.json")
                         if "job_events" in p.parts)
        assert events and "discovered_interpreter_python" not in events, name


@pytest.fixture
def thp_never():
    """THP set to never for a test, and the host restored afterwards: THP and NUMA balancing
    back, the knobs playbook's two files removed."""
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    numa = Path("/proc/sys/kernel/numa_balancing")
    text = thp.read_text()
    before, balancing = text[text.index("[") + 1:text.index("]")], numa.read_text().strip()
    files = [Path("/etc/tmpfiles.d/omni-host-knobs.conf"),
             Path("/etc/sysctl.d/90-omni-host-knobs.conf")]
    assert not any(f.exists() for f in files), "a knobs playbook's file is left from elsewhere"
    thp.write_text("never")
    yield thp
    thp.write_text(before)
    numa.write_text(balancing)
    for f in files:
        f.unlink(missing_ok=True)


def test_the_knobs_playbook_sets_thp_previews_it_and_the_audit_proves_it(
        sshd: Sshd, tmp_path: Path, thp_never: Path, report_dir: Path) -> None:
    """kernel.thp warns on THP never; its fix (kernel-knobs.yml) previews the value it would
    change and the two files it would write, then sets madvise now and for the next boot, and
    the re-audit proves it (issue 48)."""
    inv = sshd.inventory(tmp_path / "inv", {"loop": PY})
    before = cli(sshd, "audit", "-i", str(inv), "--format", "json", report_dir=report_dir)
    thp = next(r for r in json.loads(before.stdout)["hosts"][0]["results"]
               if r["id"] == "kernel.thp")
    assert thp["status"] == "warn" and "(never)" in thp["summary"]
    assert thp["remediation"]["playbook"] == "kernel-knobs.yml"
    preview = cli(sshd, "remediate", "-i", str(inv), "--check", "kernel.thp",
                  report_dir=report_dir)
    assert preview.code == 0, preview.stdout + preview.stderr
    assert "CHANGED: Knob plan" in preview.stdout, preview.stdout
    assert "/sys/kernel/mm/transparent_hugepage/enabled: never -> madvise" in preview.stdout
    assert "+w /sys/kernel/mm/transparent_hugepage/enabled - - - - madvise" in preview.stdout
    assert "never" in thp_never.read_text().split("[")[1]  # the preview changed nothing
    applied = cli(sshd, "remediate", "-i", str(inv), "--check", "kernel.thp", "--apply",
                  "--yes", report_dir=report_dir)
    assert applied.code == 0, applied.stdout + applied.stderr
    assert "[madvise]" in thp_never.read_text()
    assert "FIXED          loop: kernel.thp (warn -> pass)" in applied.stdout, applied.stdout
    assert "madvise" in Path("/etc/tmpfiles.d/omni-host-knobs.conf").read_text()
    assert "kernel.numa_balancing = 0" in Path("/etc/sysctl.d/90-omni-host-knobs.conf").read_text()
    again = run_playbook(playbook=PLAYBOOKS / "kernel-knobs.yml", inventory=inv, hosts=("loop",),
                         check_mode=True, artifacts_dir=tmp_path / "again",
                         known_hosts=sshd.known_hosts, extravars={})
    assert again.status == "successful" and again.changed("loop") == []  # idempotent
