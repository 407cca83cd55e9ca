"""The local audit as a user runs it, with real tools standing in for broken ones: a probe
command that hangs, one that prints garbage, one that is missing; real containers; the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli


def fake_tool(bindir: Path, name: str, script: str) -> dict[str, str]:
    bindir.mkdir(exist_ok=True)
    tool = bindir / name
    tool.write_text("#!/bin/sh\n" + script + "\n")
    tool.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def statuses(stdout: str) -> dict[str, dict]:
    return {r["id"]: r for r in json.loads(stdout)["hosts"][0]["results"]}


def test_readme_audit_of_this_machine(report_dir: Path) -> None:
    result = run_cli("audit", "--report-dir", str(report_dir))
    assert result.code == 1  # the reference policy wants GPUs and 200 GiB of swap
    assert "numa.nps1" in result.stdout and "swap.capacity" in result.stdout
    assert "report stored in" in result.stderr
    (stored,) = report_dir.iterdir()
    report = json.loads((stored / "report.json").read_text())
    assert report["hosts"][0]["host"] == "localhost"
    assert (stored / "bundles" / "localhost" / "manifest.json").is_file()


def test_hanging_probe_times_out_and_the_fallback_answers(tmp_path: Path) -> None:
    env = fake_tool(tmp_path / "bin", "numactl", "sleep 60")
    result = run_cli("audit", "--format", "json", "--no-store", "--probe-timeout", "0.3", env=env)
    assert result.code == 1
    assert result.seconds < 15  # the hung numactl was killed at its deadline
    host = json.loads(result.stdout)["hosts"][0]
    assert host["probes"]["numa.numactl"] == {"outcome": "unavailable",
                                              "reason": "timed out after 0.3s"}
    nps1 = statuses(result.stdout)["numa.nps1"]
    assert nps1["status"] == "pass" and "from sysfs" in nps1["summary"]
    # the summary says why numactl gave nothing: it timed out, it is installed
    assert "numactl timed out after 0.3s" in nps1["summary"], nps1["summary"]
    assert "not installed" not in nps1["summary"]


def test_hanging_probe_without_fallback_skips_its_check(tmp_path: Path) -> None:
    env = fake_tool(tmp_path / "bin", "dpkg-query", "sleep 60")
    result = run_cli("audit", "--format", "json", "--no-store", "--probe-timeout", "0.3", env=env)
    deps = statuses(result.stdout)["packages.build-deps"]  # the built-in policy names packages
    assert deps["status"] == "skip"
    assert deps["summary"] == ("not evaluated: dpkg-query -W <omni_build_packages>: "
                               "timed out after 0.3s")
    assert statuses(result.stdout)["numa.nps1"]["status"] == "pass"  # the rest completed


def test_garbage_output_is_unparseable_with_an_excerpt(tmp_path: Path) -> None:
    env = fake_tool(tmp_path / "bin", "numactl", "printf 'libnuma: Warning: /sys not mounted\\n\\001\\002'")
    result = run_cli("audit", "--format", "json", "--no-store", env=env)
    nps1 = statuses(result.stdout)["numa.nps1"]
    assert nps1["status"] == "error"
    assert "unparseable output" in nps1["summary"]
    assert nps1["evidence"][0]["lines"][0].startswith("libnuma: Warning: /sys not mounted")
    assert "Traceback" not in result.stderr


def test_missing_tool_is_reported_not_a_crash() -> None:
    # This VM really has no nvidia-smi and no NVIDIA driver: the NVML fallback is not even
    # started (a Python start on the host for nothing), and says why.
    result = run_cli("audit", "--format", "json", "--no-store")
    host = json.loads(result.stdout)["hosts"][0]
    assert host["probes"]["gpu.nvidia-smi"] == {"outcome": "unavailable", "reason": "not installed"}
    assert host["probes"]["gpu.pynvml"] == {
        "outcome": "unavailable",
        "reason": "no NVIDIA kernel driver loaded (no /proc/driver/nvidia/version)"}
    assert statuses(result.stdout)["gpu.driver-version"]["status"] == "fail"


def test_markdown_report(two_audits: Path) -> None:
    result = run_cli("report", "show", "latest", "--format", "markdown", "--report-dir",
                     str(two_audits))
    assert result.stdout.startswith("# omni-host audit")
    assert "| fail | `swap.capacity` | high | S-009, S-012, F-001, F-022 |" in result.stdout
    assert "### fail: swap.capacity" in result.stdout
    assert "Evidence (`cat /proc/swaps`)" in result.stdout


def test_real_containers_are_inspected_and_secrets_never_stored(docker_image: str,
                                                              report_dir: Path) -> None:
    name = "omni-test-memgraph"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run(["docker", "run", "-d", "--name", name, "-e", "MG_PASSWORD=hunter2-secret",
                    "-e", "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F", docker_image,
                    "sh", "-c", "sleep 300", "--api-key", "tok-secret-42"], check=True, capture_output=True)
    try:
        result = run_cli("audit", "--format", "json", "--report-dir", str(report_dir))
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    host = json.loads(result.stdout)["hosts"][0]
    assert host["probes"]["docker.containers"]["outcome"] == "observed"
    bundle = next(report_dir.rglob("docker.containers.stdout")).read_text()
    assert f'"/{name}"' in bundle and "<redacted>" in bundle
    stored = "".join(p.read_text() for p in report_dir.rglob("*") if p.is_file())
    assert "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F" in stored  # the evidence is kept
    assert "hunter2-secret" not in stored and "tok-secret-42" not in stored
    assert "hunter2-secret" not in result.stdout + result.stderr


SECRETS = ("tok-health-77", "tok-output-99", "lbl-secret-55", "url-secret-66", "sh-secret-88",
           "env-secret-44")


def test_secrets_of_every_kind_in_a_real_container_are_never_stored_or_shown(
        docker_image: str, tmp_path: Path) -> None:
    """A healthcheck with a bearer token (and one that prints a token), secret labels, a URL
    with a password, an --api-key inside a `sh -c` string, a secret env value: audited in every
    format, stored, collected; none of them anywhere."""
    name = "omni-test-secrets"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run([
        "docker", "run", "-d", "--name", name, "-e", "HF_TOKEN=env-secret-44",
        "--label", "db.password=lbl-secret-55", "--label", "backend=postgres://app:url-secret-66@db/x",
        "--health-interval", "1s",
        "--health-cmd", "echo tok-output-$((90 + 9)); wget -q --header 'Authorization: Bearer tok-health-77' "
                        "http://127.0.0.1:1/ || true",
        docker_image, "sh", "-c", "sleep 300; serve --api-key sh-secret-88"], check=True,
        capture_output=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # readiness: the healthcheck has run and logged
            logged = subprocess.run(["docker", "inspect", "-f", "{{len .State.Health.Log}}", name],
                                    capture_output=True, text=True, check=False).stdout.strip()
            if logged not in ("", "0"):
                break
            time.sleep(0.2)
        raw = subprocess.run(["docker", "inspect", name], capture_output=True, text=True,
                             check=True).stdout
        assert all(secret in raw for secret in SECRETS)  # they are really there to find
        store = tmp_path / "store"
        outputs = [run_cli("audit", "--format", fmt, "--report-dir", str(store))
                   for fmt in ("json", "markdown", "html", "junit", "prometheus", "table")]
        collected = run_cli("collect", "--out", str(tmp_path / "fleet.tar.gz"))
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    assert collected.code == 0, collected.stderr
    host = json.loads(outputs[0].stdout)["hosts"][0]
    assert host["probes"]["docker.containers"]["outcome"] == "observed"
    shown = "".join(r.stdout + r.stderr for r in [*outputs, collected])
    stored = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
    import tarfile

    with tarfile.open(tmp_path / "fleet.tar.gz") as tar:
        archived = b"".join(tar.extractfile(m).read() for m in tar if m.isfile())  # type: ignore[union-attr]
    assert f'"/{name}"'.encode() in stored and b"<redacted>" in stored and b"<redacted>" in archived
    for secret in SECRETS:
        assert secret not in shown, secret
        assert secret.encode() not in stored, secret
        assert secret.encode() not in archived, secret


@pytest.fixture
def tiny_mount(tmp_path: Path):
    """A real filesystem of 64 KiB (tmpfs): fills up like a real full disk."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True, check=False).returncode != 0:
        pytest.fail("cannot mount a tmpfs (the tests run as root on a throwaway VM)")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_full_report_dir_leaves_no_partial_report(tiny_mount: Path) -> None:
    (tiny_mount / "filler").write_bytes(b"x" * 60 * 1024)
    store = tiny_mount / "reports"
    result = run_cli("audit", "--report-dir", str(store))
    assert result.code == 2
    assert f"cannot store the report in {store}: No space left on device" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(store.iterdir()) == []  # the temporary directory was removed


def test_read_only_report_dir(tiny_mount: Path) -> None:
    (tiny_mount / "reports").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_mount)], check=True)
    result = run_cli("audit", "--report-dir", str(tiny_mount / "reports"))
    assert result.code == 2
    assert "Read-only file system" in result.stderr
    assert list((tiny_mount / "reports").iterdir()) == []


@pytest.mark.parametrize("cpus", ["0 -1", "0-400000000"])
def test_an_impossible_cpu_list_costs_the_check_not_the_host(tmp_path: Path, cpus: str) -> None:
    """numactl printing 'node 0 cpus: 0 -1' once killed the worker thread: the host waited out
    its deadline and was reported unreachable, its evidence lost."""
    env = fake_tool(tmp_path / "bin", "numactl",
                    f"printf 'available: 1 nodes (0)\\nnode 0 cpus: {cpus}\\n'")
    result = run_cli("audit", "--format", "json", "--no-store", timeout=60, env=env)
    host = json.loads(result.stdout)["hosts"][0]
    assert host["reachable"] is True
    nps1 = statuses(result.stdout)["numa.nps1"]
    assert nps1["status"] == "error" and "unparseable output" in nps1["summary"]
    assert result.seconds < 30


def test_a_probe_that_leaves_a_daemon_holding_its_output_is_contained(tmp_path: Path) -> None:
    """numactl that starts a setsid'd child (out of its process group) which keeps stdout
    open: the probe's answer is kept, the child is killed, the host is not lost."""
    env = fake_tool(tmp_path / "bin", "numactl",
                    "setsid sleep 317 &\nprintf 'available: 1 nodes (0)\\nnode 0 cpus: 0 1\\n"
                    "node 0 size: 100 MB\\n'")
    result = run_cli("audit", "--format", "json", "--report-dir", str(tmp_path / "store"),
                     env=env, timeout=60)
    host = json.loads(result.stdout)["hosts"][0]
    assert host["reachable"] is True and result.seconds < 20
    (manifest,) = (tmp_path / "store").rglob("manifest.json")
    (record,) = [r for r in json.loads(manifest.read_text())["probes"] if r["id"] == "numa.numactl"]
    assert record["reason"] == "left a background process holding its output: killed"
    assert statuses(result.stdout)["numa.nps1"]["status"] == "pass"  # its output was kept
    left = subprocess.run(["pgrep", "-f", "sleep 317"], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == "", "the daemonized child outlived the audit"


def test_the_collector_leaves_nothing_when_its_controller_is_killed(tmp_path: Path) -> None:
    """The controller dies (SIGKILL: no goodbye) while a probe runs: the collector notices it
    was orphaned, kills its probes and exits."""
    import signal

    env = fake_tool(tmp_path / "bin", "numactl", "exec sleep 318")
    proc = subprocess.Popen([sys.executable, "-m", "omni_host.cli", "audit", "--no-store"],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while subprocess.run(["pgrep", "-f", "sleep 318"], capture_output=True,
                         check=False).returncode != 0:
        assert time.monotonic() < deadline, "the probe never started"
        time.sleep(0.1)  # readiness: wait for the probe itself, not a fixed time
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", "sleep 318"], capture_output=True,
                         check=False).returncode == 0:
        assert time.monotonic() < deadline, "the probe outlived its controller"
        time.sleep(0.1)


@pytest.mark.parametrize("script", ["exec 1>&- 2>&-; sleep 0.1; exit 7", "echo ok; exit 7"])
def test_a_probe_that_closes_its_output_before_exiting_keeps_its_exit_status(script: str) -> None:
    """Its pipes close before it exits: it is waited for, never killed (-9) as a leftover."""
    from omni_host.remote.collector import _env, run_probe

    record = run_probe({"id": "t", "argv": ["sh", "-c", script], "timeout_s": 5}, _env())
    assert (record["status"], record["exit_code"], record["reason"]) == ("ran", 7, "")


def test_a_file_probe_is_read_in_process_and_fails_as_cat_would(tmp_path: Path) -> None:
    """``cat FILE`` probes start no process on the host; what cannot be read says what cat
    says, so the probe's reason reads the same as before."""
    from omni_host.model import CommandResult
    from omni_host.probes.catalog import PROBES_BY_ID, evaluate
    from omni_host.remote.collector import _env, run_probe

    present = tmp_path / "fstab"
    present.write_text("UUID=1 / ext4 defaults 0 1\n")
    probe = PROBES_BY_ID["fs.fstab"]
    absent = tmp_path / "absent"
    for path, code, stderr in ((present, 0, ""),
                               (absent, 1, f"cat: {absent}: No such file or directory\n"),
                               (tmp_path, 1, f"cat: {tmp_path}: Is a directory\n")):
        entry = {**probe.plan_entry(), "argv": ["cat", str(path)]}
        record = run_probe(entry, _env())
        assert (record["status"], record["exit_code"], record["stderr"]) == ("ran", code, stderr)
    assert run_probe({**probe.plan_entry(), "argv": ["cat", str(present)]}, _env())["stdout"] \
        == present.read_text()
    rec = run_probe({**probe.plan_entry(), "argv": ["cat", str(tmp_path / "absent")]}, _env())
    missing = CommandResult(rec["id"], tuple(rec["argv"]), rec["status"], rec["exit_code"],
                            rec["stdout"], rec["stderr"], rec["duration_s"], rec["reason"])
    assert evaluate(probe, missing).reason == \
        f"exit 1: cat: {tmp_path / 'absent'}: No such file or directory"


def test_the_collector_runs_apart_from_the_host_pythons_start_up(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """The collector's interpreter runs no ``.pth`` hook of the host's packages, and neither
    PYTHONPATH nor the working directory can stand in for a standard module it imports; the
    helpers it starts (pynvml, psutil, py-cpuinfo) still find the host's packages."""
    from omni_host.collect.run import collect
    from omni_host.collect.transport.local import LocalTransport
    from omni_host.probes.catalog import Probe

    venv = tmp_path / "venv"  # a host Python with its own site-packages
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    marks = tmp_path / "marks"
    (site / "zz_hook.pth").write_text(
        f"import sys; open({str(marks)!r}, 'a').write('hook in %s\\n' % sys.argv[0])\n")
    (site / "helper_mod.py").write_text("WHO = 'helper_mod from site-packages'\n")
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "json.py").write_text(f"open({str(marks)!r}, 'a').write('json.py shadowed\\n')\n")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    monkeypatch.chdir(shadow)
    helper = Probe("test.helper", ("{python}", "-c", "import helper_mod; print(helper_mod.WHO)"),
                   parse=str)
    bundle = collect("h", LocalTransport(), probes=(helper,), python=str(venv / "bin" / "python"))
    result = bundle.results["test.helper"]
    assert (result.status, result.exit_code, result.stdout) == (
        "ran", 0, "helper_mod from site-packages\n")
    # (site may read a venv's site-packages twice, through lib and its lib64 link)
    assert set(marks.read_text().splitlines()) == {"hook in -c"}  # the helper's; "-": collector's


@pytest.mark.parametrize("helper", sorted(
    (Path(__file__).parent.parent / "omni_host" / "remote").glob("*.py")), ids=lambda p: p.name)
def test_the_host_side_programs_are_python_3_6(helper: Path) -> None:
    """What runs on the audited host (the collector and its helpers) says "Python 3.6" (an
    EL8 host's /usr/bin/python3): its grammar is checked as 3.6's (no walrus, no positional-only
    parameters, no f-string '=')."""
    import ast

    ast.parse(helper.read_text(), str(helper), feature_version=(3, 6))
