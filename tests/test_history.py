"""The report store over time: list, show, diff, recheck, cold cases; damaged and foreign
reports; concurrent writers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO, Sshd, run_cli


def audit(sshd: Sshd, inv: Path, report_dir: Path, *extra: str):
    return run_cli("audit", "-i", str(inv), "--format", "json", "--report-dir", str(report_dir),
                   "--known-hosts", str(sshd.known_hosts), "--ssh-config",
                   str(sshd.workdir / "none"), *extra)


def report(report_dir: Path, *args: str):
    return run_cli("report", *args, "--report-dir", str(report_dir))


def test_two_audits_with_the_swap_policy_changed_diff_names_it(sshd: Sshd, tmp_path: Path,
                                                               report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}}, group_vars={"omni_swap_size_mib": 0})
    assert audit(sshd, inv, report_dir).code == 0
    sshd.inventory(tmp_path / "inv", {"loop": {}}, group_vars={"omni_swap_size_mib": 204800})
    assert audit(sshd, inv, report_dir).code == 1
    diff = report(report_dir, "diff")
    assert diff.code == 0
    assert "loop: " in diff.stdout and "new failures: swap.capacity" in diff.stdout
    assert "policy changed: omni_swap_size_mib: 0 -> 204800" in diff.stdout  # not drift
    assert "host drifted" not in diff.stdout
    as_json = json.loads(report(report_dir, "diff", "--format", "json").stdout)
    assert as_json[0]["new_failures"] == ["swap.capacity"] and as_json[0]["fixed"] == []
    assert as_json[0]["policy_changed"] == {"omni_swap_size_mib": {"before": 0, "after": 204800}}

    assert as_json[0]["expected_state_changed"] == ["swap.capacity"]

    # and back: the verdict moved with the expected state, not the host: the cold case and
    # the diff say so, and nothing is called resurrected
    sshd.inventory(tmp_path / "inv", {"loop": {}}, group_vars={"omni_swap_size_mib": 0})
    third = audit(sshd, inv, report_dir)
    host = json.loads(third.stdout)["hosts"][0]
    assert host["cold_case"]["resurrected"] == []
    assert host["cold_case"]["items"] == [{"item": "swap.capacity", "was": "fail", "now": "pass",
                                           "change": "expected state changed"}]
    diff = report(report_dir, "diff")
    assert "fixed" not in diff.stdout and "resurrected" not in diff.stdout  # no fix (issue 63)
    assert "verdicts that moved with the expected state, not the host (a pass here is no fix): " \
        "swap.capacity" in diff.stdout
    listing = report(report_dir, "list")
    assert len(listing.stdout.strip().splitlines()) == 3


def test_diff_without_a_previous_audit_says_so(sshd: Sshd, tmp_path: Path, report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}})
    audit(sshd, inv, report_dir)
    result = report(report_dir, "diff")
    assert result.code == 0
    assert "loop: no previous audit of this host to compare with" in result.stdout


def test_changed_facts_are_named(report_dir: Path) -> None:
    # Two audits of the real GPU bundles under one host name: the GPU set and VRAM differ.
    from helpers import gpu_bundle

    from omni_host.evaluate.audit import evaluate_bundle
    from omni_host.model import Source
    from omni_host.plan.policy import policy_from_vars
    from omni_host.report.store import store_report
    from omni_host.reports import make_report

    policy = policy_from_vars({}, "t")
    for name, ts in (("h100-x1", 1.0), ("h200-x2", 2.0)):
        bundle = gpu_bundle(name)
        host = evaluate_bundle(bundle.__class__(**{**bundle.__dict__, "host": "gpubox"}), policy)
        store_report(make_report([host], started_at=1795300000 + ts, source=Source.LIVE,
                                 inventory=None), report_dir)
    d = json.loads(report(report_dir, "diff", "--format", "json").stdout)[0]
    assert d["changed_facts"]["gpus"]["before"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert [g["name"] for g in d["changed_facts"]["gpus"]["after"]] == ["NVIDIA H200"] * 2
    assert "nvlink" in d["changed_facts"]


def test_corrupt_and_newer_reports_are_skipped_with_a_warning(sshd: Sshd, tmp_path: Path,
                                                             report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}})
    audit(sshd, inv, report_dir)
    audit(sshd, inv, report_dir)
    first, second = sorted(report_dir.iterdir())
    text = (first / "report.json").read_text()
    (first / "report.json").write_text(text[: len(text) // 2])  # truncated
    future = report_dir / "29990101T000000Z-abcdef"
    future.mkdir()
    (future / "report.json").write_text(json.dumps({"schema_version": 99, "hosts": []}))
    listing = report(report_dir, "list")
    assert listing.code == 0
    assert f"{first / 'report.json'}: corrupt or truncated report, skipped" in listing.stderr
    assert "report schema 99 is newer than this omni-host reads (1)" in listing.stderr
    assert listing.stdout.startswith(second.name)
    assert report(report_dir, "show", "latest", "--format", "json").code == 0
    assert report(report_dir, "diff").code == 0


def test_two_audits_storing_at_once_are_both_kept(report_dir: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-m", "omni_host.cli", "audit", "--format", "json",
                               "--report-dir", str(report_dir)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, cwd=REPO) for _ in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [1, 1]
    stored = sorted(report_dir.iterdir())
    assert len(stored) == 2
    for d in stored:
        assert json.loads((d / "report.json").read_text())["hosts"][0]["host"] == "localhost"


def test_recheck_re_evaluates_stored_bundles_with_todays_policy(sshd: Sshd, tmp_path: Path,
                                                                report_dir: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}}, group_vars={"omni_swap_size_mib": 0})
    audit(sshd, inv, report_dir)
    sshd.inventory(tmp_path / "inv", {"loop": {}}, group_vars={"omni_swap_size_mib": 1024})
    result = run_cli("report", "recheck", "latest", "-i", str(inv), "--format", "json",
                     "--report-dir", str(report_dir))
    assert result.code == 1, result.stderr  # a check fails: exits as an audit would
    doc = json.loads(result.stdout)
    swap = next(r for r in doc["hosts"][0]["results"] if r["id"] == "swap.capacity")
    assert swap["status"] == "fail" and doc["source"] == "recheck"
    assert "recheck stored in" in result.stderr


def test_an_audit_reads_each_hosts_past_once(tmp_path: Path, monkeypatch) -> None:
    """The host's stored audits are scanned once a run (app.past.past_of), not once per judge
    of the past (the served rate, its baseline, the ledger, the plan, the Cold Case, the last
    bench: six scans before issue 45)."""
    from conftest import run_cli

    from omni_host.report.history import History

    store = tmp_path / "store"
    assert run_cli("audit", "--report-dir", str(store)).code in (0, 1, 4)
    calls: list[str] = []
    real = History.for_host

    def counted(self: History, host: str) -> list:
        calls.append(host)
        return real(self, host)

    monkeypatch.setattr(History, "for_host", counted)
    again = run_cli("audit", "--report-dir", str(store), "--format", "json")
    assert again.code in (0, 1, 4), again.stderr
    assert calls == ["localhost"], calls
    assert '"previous": "' in again.stdout  # the Cold Case compared with the first audit
