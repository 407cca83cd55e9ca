"""The Strategic layer on real GPU machines' facts, and the quarterly schedule's real units."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import public_capture, run_cli
from helpers import gpu_bundle

from omni_host import codec
from omni_host.evaluate.facts import facts_from_bundle
from omni_host.evaluate.sentinel import fact_summary, strategic


def engines(bundle) -> dict[str, dict]:  # noqa: ANN001
    return {e.engine: codec.to_dict(e) for e in strategic(fact_summary(facts_from_bundle(bundle)))}


def test_strategic_on_two_nvlinked_h200() -> None:
    e = engines(gpu_bundle("h200-x2"))
    assert e["vLLM"]["status"] == "re-evaluate"            # no Blackwell GPU here
    assert e["NVIDIA Dynamo"]["status"] == "re-evaluate"   # symmetric VRAM
    assert e["ik_llama.cpp"]["status"] == "blocked-upstream"  # NVLink + symmetric; MoE upstream
    assert e["SGLang"]["status"] == "blocked"              # RAM+swap below 642 GiB
    assert "RAM+swap" in e["SGLang"]["reasons"][0]
    assert e["ExLlamaV3"]["status"] == "blocked-upstream"


def test_strategic_on_a_real_blackwell_capture() -> None:
    bundle = gpu_bundle("h100-x1")
    results = dict(bundle.results)
    results["gpu.nvidia-smi"] = dataclasses.replace(results["gpu.nvidia-smi"], stdout=public_capture(
        "nvidia-smi/telegraf_rtx-pro-6000-maxq-blackwell_590.44.01_q-x.xml"))
    e = engines(dataclasses.replace(bundle, results=results))
    assert e["vLLM"]["status"] == "blocked"
    assert "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition" in e["vLLM"]["reasons"][0]
    assert e["KTransformers"]["status"] == "blocked"


def test_fact_summary_of_a_gpu_machine() -> None:
    summary = fact_summary(facts_from_bundle(gpu_bundle("h200-x2")))
    assert summary.numa_nodes == 1 and summary.nvlink is True
    assert summary.driver_version == "580.159.04"
    assert [g.vram_mib for g in summary.gpus] == [143771, 143771]
    assert summary.swap_total_mib == 0


@pytest.mark.system  # systemd-analyze verify
@pytest.mark.parametrize(("flag", "files"), [
    ("--system", ["etc/systemd/system/omni-host-audit.service",
                  "etc/systemd/system/omni-host-audit.timer"]),
    ("--cron", ["etc/cron.d/omni-host-audit"]),
])
def test_schedule_install_status_remove(tmp_path: Path, flag: str, files: list[str]) -> None:
    root = tmp_path / "root"
    args = ["--root", str(root), flag]
    installed = run_cli("schedule", "install", "--quarterly", *args, "--", "-i",
                        "/etc/omni-host/inventory", "all")
    assert installed.code == 0, installed.stderr
    for rel in files:
        assert (root / rel).is_file()
    text = "".join((root / rel).read_text() for rel in files)
    assert "audit -i /etc/omni-host/inventory all" in text
    if flag == "--system":
        assert "OnCalendar=quarterly" in text and "Persistent=true" in text
        assert "RandomizedDelaySec=" in text and "NO_COLOR=1" in text
        if not shutil.which("systemd-analyze"):
            pytest.fail("systemd-analyze is missing (run tests/setup.sh)")
        verify = subprocess.run(["systemd-analyze", "verify", *(str(root / f) for f in files)],
                                capture_output=True, text=True, check=False)
        assert verify.returncode == 0, verify.stderr
    else:
        assert "0 0 1 1,4,7,10 *" in text
    again = run_cli("schedule", "install", "--quarterly", *args)
    assert again.code == 2 and "already installed" in again.stderr
    status = run_cli("schedule", "status", *args)
    assert "installed: " in status.stdout
    removed = run_cli("schedule", "remove", *args)
    assert removed.code == 0 and not any((root / rel).exists() for rel in files)


@pytest.mark.parametrize("flag", ["--system", "--cron"])
def test_schedule_refuses_an_argument_with_a_newline_and_writes_nothing(tmp_path: Path,
                                                                         flag: str) -> None:
    root = tmp_path / "root"
    result = run_cli("schedule", "install", "--quarterly", "--root", str(root), flag, "--",
                     "-i", "/etc/inv\n* * * * * root rm -rf /", "all")
    assert result.code == 2 and "control character" in result.stderr
    assert not root.exists() or not any(p.is_file() for p in root.rglob("*"))


def test_cron_escapes_percent_so_no_second_command_is_injected(tmp_path: Path) -> None:
    root = tmp_path / "root"
    result = run_cli("schedule", "install", "--quarterly", "--root", str(root), "--cron", "--",
                     "-i", "/etc/inv%date", "all")
    assert result.code == 0, result.stderr
    line = (root / "etc/cron.d/omni-host-audit").read_text().splitlines()[-1]
    assert "/etc/inv\\%date" in line and line.count("%") == line.count("\\%")


@pytest.mark.system  # systemd-analyze verify
def test_systemd_escapes_specifiers_and_a_failed_verify_leaves_nothing(tmp_path: Path) -> None:
    from omni_host.app import schedule

    target = schedule.ScheduleTarget("systemd-system", tmp_path / "root")
    exe = shutil.which("omni-host") or str(Path(sys.executable).parent / "omni-host")
    command = schedule.audit_command(exe, ["-i", "/etc/inv%h$HOME", "all"])
    paths, ok, message = schedule.install(target, command, force=False, run_as="root")
    assert ok, message  # systemd-analyze accepts the escaped ExecStart
    assert "ExecStart=" in paths[0].read_text() and "/etc/inv%%h$$HOME" in paths[0].read_text()
    schedule.remove(target)
    broken = schedule.audit_command("/nonexistent/omni-host", ["all"])
    paths, ok, message = schedule.install(target, broken, force=False, run_as="root")
    assert not ok and message
    assert not any(p.exists() for p in paths)  # nothing broken left on disk
