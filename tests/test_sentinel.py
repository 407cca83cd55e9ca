"""The Strategic layer on real GPU machines' facts, and the quarterly schedule's real units."""

from __future__ import annotations

import dataclasses
import getpass
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import public_capture, run_cli
from helpers import collected_under, gpu_bundle, model_helper, with_probe, write_gguf

from omni_host import codec
from omni_host.evaluate.audit import evaluate_bundle
from omni_host.evaluate.facts import facts_from_bundle
from omni_host.evaluate.sentinel import fact_summary, strategic
from omni_host.model import ColdCase, EngineStatus, Source, Status
from omni_host.plan.policy import policy_from_vars, reference_vars
from omni_host.report.history import History, StoredAudit, cold_case
from omni_host.reports import make_report


def engines(bundle) -> dict[str, dict]:  # noqa: ANN001
    return {e.engine: codec.to_dict(e) for e in strategic(fact_summary(facts_from_bundle(bundle)))}


def test_strategic_on_two_nvlinked_h200_with_no_models_in_its_policy() -> None:
    e = engines(gpu_bundle("h200-x2"))
    assert e["vLLM"]["status"] == "re-evaluate"            # no Blackwell GPU here
    assert "no Blackwell GPU" in e["vLLM"]["cleared"][0]
    assert e["NVIDIA Dynamo"]["status"] == "re-evaluate"   # symmetric VRAM
    assert e["KTransformers"]["status"] == "blocked-upstream"
    # What the host serves decides these; a policy without omni_models cannot: unknown, and why.
    for engine in ("SGLang", "ExLlamaV3", "ik_llama.cpp"):
        assert e[engine]["status"] == "unknown", engine
        assert any("no omni_models in this host's policy" in r for r in e[engine]["reasons"])


def judged(bundle, **policy_vars) -> dict[str, dict]:  # noqa: ANN001
    policy = policy_from_vars(policy_vars, "test policy")
    report = evaluate_bundle(collected_under(bundle, policy), policy)
    return {e.engine: codec.to_dict(e) for e in report.strategic}


def test_strategic_differs_between_hosts_with_different_policies(tmp_path: Path) -> None:
    """Two hosts with the same hardware (the real H200 pair: 2 x 141 GiB, NVLink, 252 GiB RAM)
    and different policies: one serves a 4 TiB DeepSeek (MoE, MLA), one a small Llama. The
    model files are real GGUF files examined by the real model helper."""
    deepseek = write_gguf(tmp_path / "DeepSeek-R1.gguf", "deepseek2", size=4 * 1024 ** 4)
    llama = write_gguf(tmp_path / "llama.gguf", "llama")
    h200 = gpu_bundle("h200-x2")
    a = judged(with_probe(h200, "model.files", model_helper("--models", str(deepseek))),
               omni_models=[{"path": str(deepseek), "loader": "gguf"}])
    b = judged(with_probe(h200, "model.files", model_helper("--models", str(llama))),
               omni_models=[{"path": str(llama), "loader": "gguf"}])
    assert {k: v["status"] for k, v in a.items()} != {k: v["status"] for k, v in b.items()}
    assert a["SGLang"]["status"] == "blocked"
    assert f"{deepseek} 4,096 GiB > RAM+swap" in a["SGLang"]["reasons"][0]
    assert a["ExLlamaV3"]["status"] == "blocked"
    assert f"{deepseek}: deepseek2" in a["ExLlamaV3"]["reasons"][0]
    assert a["ik_llama.cpp"]["status"] == "blocked"  # MoE, although NVLink and symmetric
    for engine in ("SGLang", "ExLlamaV3", "ik_llama.cpp"):
        assert b[engine]["status"] == "re-evaluate", (engine, b[engine])
        assert b[engine]["reasons"] == []
    from omni_host.measure.rules import size_text  # a few bytes: it read "0 GiB"

    assert f"largest model {size_text(llama.stat().st_size)} <= RAM+swap" in \
        b["SGLang"]["cleared"][0]
    assert "0 GiB" not in b["SGLang"]["cleared"][0]
    assert "models: llama" in b["ExLlamaV3"]["cleared"][0]
    assert "NVLink present" in " ".join(b["ik_llama.cpp"]["cleared"])


def test_strategic_says_unknown_when_a_model_could_not_be_examined(tmp_path: Path) -> None:
    missing = tmp_path / "gone.gguf"
    e = judged(with_probe(gpu_bundle("h200-x2"), "model.files", model_helper("--models", str(missing))),
               omni_models=[{"path": str(missing), "loader": "gguf"}])
    assert e["SGLang"]["status"] == "unknown"
    assert f"size of {missing} not examined" in e["SGLang"]["reasons"][0]
    assert e["ExLlamaV3"]["status"] == "unknown"


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
    inventory = lab_inventory(tmp_path / "etc-omni-host")
    # the textfile-collector line of docs/reports.md
    installed = run_cli("schedule", "install", "--quarterly", *args, "--", "-i",
                        str(inventory), "all", "--format", "prometheus", "--output",
                        "/var/lib/prometheus/node-exporter/omni_host.prom")
    assert installed.code == 0, installed.stderr
    for rel in files:
        assert (root / rel).is_file()
    text = "".join((root / rel).read_text() for rel in files)
    assert (f"audit -i {inventory} all --format prometheus --output "
            "/var/lib/prometheus/node-exporter/omni_host.prom") in text
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
        assert f"MAILTO={getpass.getuser()}" in text  # a failing run's one line is mailed
    again = run_cli("schedule", "install", "--quarterly", *args, "--", "-i", str(inventory))
    assert again.code == 2 and "already installed" in again.stderr
    status = run_cli("schedule", "status", *args)
    assert "installed: " in status.stdout
    assert re.search(r"^next run: \d{4}-(01|04|07|10)-01 00:00", status.stdout, re.M), status.stdout
    if flag == "--cron":
        assert "last run: none logged yet" in status.stdout
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


def lab_inventory(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "hosts.yml").write_text("all:\n  hosts:\n    box:\n      ansible_connection: local\n"
                                    "      omni_numa_nps: 1\n      omni_build_packages: []\n")
    return path


def test_cron_escapes_percent_so_no_second_command_is_injected(tmp_path: Path) -> None:
    root = tmp_path / "root"
    inventory = lab_inventory(tmp_path / "inv%date")
    result = run_cli("schedule", "install", "--quarterly", "--root", str(root), "--cron", "--",
                     "-i", str(inventory), "all")
    assert result.code == 0, result.stderr
    line = (root / "etc/cron.d/omni-host-audit").read_text().splitlines()[-1]
    assert "/inv\\%date" in line and line.count("%") == line.count("\\%")


@pytest.mark.parametrize(("audit_args", "message"), [
    (["-i", "/nonexistent/inventory", "all"], "the audit it would run fails now"),
    (["-i", "relative/inventory", "all"], "give the absolute path"),
    (["--no-such-flag"], "not valid"),
])
def test_schedule_refuses_an_audit_that_could_only_fail(tmp_path: Path, audit_args: list[str],
                                                        message: str) -> None:
    root = tmp_path / "root"
    result = run_cli("schedule", "install", "--quarterly", "--root", str(root), "--cron", "--",
                     *audit_args)
    assert result.code == 2 and message in result.stderr, result.stderr
    assert not (root / "etc/cron.d/omni-host-audit").exists()


def test_a_cron_run_logs_its_output_and_status_reads_it(tmp_path: Path) -> None:
    """The installed cron line, run by a shell as cron would: the audit's output lands in the
    log, a non-zero exit prints the one line cron mails, and status shows the run."""
    root = tmp_path / "root"
    inventory = lab_inventory(tmp_path / "inv")
    installed = run_cli("schedule", "install", "--quarterly", "--root", str(root), "--cron", "--",
                        "-i", str(inventory), "all", "-e", "omni_swap_size_mib=10000000",
                        "--no-store")
    assert installed.code == 0, installed.stderr
    line = (root / "etc/cron.d/omni-host-audit").read_text().splitlines()[-1]
    command = line.split(" ", 6)[6].replace("\\%", "%")  # after the 5 times and the user
    ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False,
                         timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert "omni-host scheduled audit exited with a non-zero code" in ran.stdout
    assert ran.stdout.rstrip().endswith(" 1")  # the failing swap check: exit 1
    log = next(root.rglob("schedule.log"))
    assert "swap.capacity" in log.read_text()
    # the run's own count (a user's containers may fail docker checks beside the swap one)
    failing = re.findall(r"unreachable: \d+ pass, (\d+) fail", log.read_text())[-1]
    assert int(failing) >= 1
    status = run_cli("schedule", "status", "--root", str(root), "--cron")
    assert "last run: " in status.stdout
    assert f"{failing} fail" in status.stdout.split("last run: ")[1], status.stdout


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


def _stored(*hosts) -> History:  # noqa: ANN002 (HostReport)
    doc = make_report(list(hosts), started_at=1795300000.0, source=Source.LIVE, inventory=None).to_dict()
    return History([StoredAudit("20261122T000000000Z-aaaaaa", Path("/nonexistent"), doc)])


def _with(host, check_status: dict[str, str] = {}, engines: dict[str, str] = {}):  # noqa: ANN001, ANN202, B006
    results = tuple(dataclasses.replace(r, status=Status(check_status[r.id]))
                    if r.id in check_status else r for r in host.results)
    strategic_ = tuple(dataclasses.replace(e, status=EngineStatus(engines[e.engine]))
                       if e.engine in engines else e for e in host.strategic)
    return dataclasses.replace(host, results=results, strategic=strategic_)


def test_cold_case_is_empty_when_nothing_changed() -> None:
    host = evaluate_bundle(gpu_bundle("h200-x2"), policy_from_vars(reference_vars(), "ref"))
    assert any(e.blocked for e in host.strategic)  # blocked both times: not a change
    assert any(r.status is Status.FAIL for r in host.results)  # failing both times: not a change
    cold = cold_case(_stored(host).for_host(host.host), host)
    assert cold == ColdCase("20261122T000000000Z-aaaaaa")


def test_cold_case_lists_only_state_changes() -> None:
    host = evaluate_bundle(gpu_bundle("h200-x2"), policy_from_vars({}, "t"))
    assert {r.id: r.status for r in host.results}["numa.nps1"] is Status.PASS
    before = _with(host, {"numa.nps1": "fail"}, {"vLLM": "blocked"})
    now = _with(host, {"cpu.avx512": "fail"}, {"NVIDIA Dynamo": "blocked"})
    cold = cold_case(_stored(before).for_host(now.host), now)
    assert [(i.item, i.was, i.now, i.change) for i in cold.items] == [
        ("numa.nps1", "fail", "pass", "resolved"),
        ("cpu.avx512", "pass", "fail", "newly failing"),
        ("vLLM", "blocked", "re-evaluate", "resurrected"),
        ("NVIDIA Dynamo", "re-evaluate", "blocked", "newly blocked")]
    assert cold.resurrected == ("numa.nps1",) and cold.resurrected_engines == ("vLLM",)
    assert cold_case(History([]).for_host(now.host), now) == ColdCase(None)
