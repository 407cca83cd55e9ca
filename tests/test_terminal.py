"""The terminal view as an operator reads it at 80 columns: one host with one failure fits in
about 20 lines with the whole finding (evidence, lesson, fix); a fleet starts with its matrix;
--quiet keeps failures and the summary line; -v expands everything. Golden files pin the
one-host and the 8-host views (regenerate with OMNI_UPDATE_GOLDEN=1 and read the diff)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from conftest import run_cli
from helpers import BUNDLES, gpu_bundle

from omni_host.evaluate.audit import evaluate_bundle
from omni_host.evaluate.baseline import observed_vars
from omni_host.evaluate.facts import facts_from_bundle
from omni_host.model import HostReport, Report
from omni_host.plan.policy import policy_from_vars, reference_vars
from omni_host.report.history import History
from omni_host.report.views import context, render

GOLDEN = Path(__file__).resolve().parent / "golden"
STARTED = 1795300000.0


def own_policy_with_swap(name: str) -> dict:
    """The machine's own observed state (what ``omni-host init`` records), and a swap area it
    does not have: exactly one failure."""
    return {**observed_vars(facts_from_bundle(gpu_bundle(name))), "omni_swap_size_mib": 1024}


def one_failure() -> dict:
    host = evaluate_bundle(gpu_bundle("h200-x2"), policy_from_vars(own_policy_with_swap("h200-x2"),
                                                                   "h200"),
                           address="ops@h200.lab:22")
    return Report(STARTED, STARTED + 2, "live", "inventory/", (host,)).to_dict()


def fleet() -> dict:
    """8 hosts: the two real GPU machines under several names and policies, one unreachable."""
    hosts = []
    for i in range(1, 8):
        name = "h100-x1" if i % 2 else "h200-x2"
        values = reference_vars() if i in (3, 6) else own_policy_with_swap(name) if i == 5 \
            else {k: v for k, v in own_policy_with_swap(name).items() if k != "omni_swap_size_mib"}
        bundle = dataclasses.replace(gpu_bundle(name), host=f"gpu-{i:02d}")
        hosts.append(evaluate_bundle(bundle, policy_from_vars(values, f"gpu-{i:02d}"),
                                     address=f"ops@gpu-{i:02d}.lab:22"))
    hosts.append(HostReport("gpu-08", "ops@gpu-08.lab:22", "ssh", False,
                            "cannot connect to gpu-08.lab:22: Connection refused", 10.0))
    return Report(STARTED, STARTED + 4, "live", "inventory/", tuple(hosts)).to_dict()


def terminal(doc: dict, verbosity: int = 0) -> str:
    return render("table", doc, context("table", doc, lambda: History([]), width=80,
                                        verbosity=verbosity))


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("OMNI_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path}: run with OMNI_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8"), f"the terminal view changed: diff against {path}"


def test_one_host_with_one_failure_fits_in_about_20_lines() -> None:
    doc = one_failure()
    assert doc["summary"]["fail"] == 1 and doc["summary"]["error"] == 0
    text = terminal(doc)
    lines = text.splitlines()
    assert len(lines) <= 22, text
    assert max(len(line) for line in lines) <= 80, text
    assert lines[1].startswith("FAIL  swap.capacity"), text  # the failure first
    words = " ".join(text.split())
    assert "$ cat /proc/swaps (no active swap area)" in words  # the evidence that decided it
    assert "a model larger than RAM+swap froze the machine" in words  # the lesson (catalog)
    assert "omni-host remediate -i inventory/ h200-x2 (preview; add --apply" in words  # the fix
    counted = [line for line in lines if line.startswith(("PASS", "SKIP"))]
    assert len(counted) == 2, text  # passes and skips: one counted line each
    assert lines[-1].startswith("1 host(s), 0 unreachable: ")
    golden("report-one-host.txt", text)


def test_a_fleet_starts_with_its_matrix() -> None:
    doc = fleet()
    text = terminal(doc)
    lines = text.splitlines()
    assert lines[0].startswith(f"Fleet: 8 hosts x {len(doc['hosts'][2]['results'])} checks")
    rows = lines[2:10]
    assert [row.split()[0] for row in rows] == [f"gpu-{i:02d}" for i in range(1, 9)]
    assert "UNREACHABLE: cannot connect to gpu-08.lab:22" in rows[7]
    # one glyph per check, in the legend's order; the glyphs read without colour
    checks = [r["id"] for r in doc["hosts"][2]["results"]]
    glyph = {"pass": "\u2713", "fail": "\u2717", "skip": "\u2013", "warn": "!", "error": "E"}
    assert rows[2].split()[1:] == [glyph[r["effective_status"]] for r in doc["hosts"][2]["results"]]
    assert f"1 {checks[0]}" in lines[10]
    assert max(len(line) for line in lines) <= 80
    golden("report-fleet.txt", text)


def test_quiet_keeps_failures_and_the_summary_line() -> None:
    doc = fleet()
    text = terminal(doc, verbosity=-1)
    failing = sum(1 for h in doc["hosts"] for r in h["results"] if r["effective_status"] == "fail")
    assert failing >= 3
    assert text.count("\nFAIL  ") + text.startswith("FAIL  ") == failing, text
    for absent in ("Fleet:", "PASS", "SKIP", "Strategic", "Cold case", "WARN"):
        assert absent not in text, absent
    assert "gpu-08 (ops@gpu-08.lab:22): UNREACHABLE" in text
    assert text.splitlines()[-1].startswith("8 host(s), 1 unreachable")


def test_verbose_expands_every_check_and_engine() -> None:
    doc = one_failure()
    compact, verbose = terminal(doc), terminal(doc, verbosity=1)
    host = doc["hosts"][0]
    for r in host["results"]:
        assert f"{r['id']}: " in verbose or f"  {r['id']}  " in verbose or r["id"] in verbose
        if r["effective_status"] == "skip":
            assert f"  {r['id']}: {r['summary'][:30]}" in verbose.replace("\n      ", " ")
    for engine in host["strategic"]:
        assert f"  {engine['engine']} " in verbose
    assert "Not observed: " in verbose and "Not observed: " not in compact
    assert len(verbose.splitlines()) > len(compact.splitlines())


@pytest.mark.parametrize(("flag", "present", "absent"), [
    ("--quiet", ["FAIL  gpu.topology"], ["PASS ", "Strategic"]),
    ("-v", ["FAIL  gpu.topology", "PASS ", "Not observed: "], []),
])
def test_the_audit_command_takes_quiet_and_verbose(flag: str, present: list[str],
                                                   absent: list[str]) -> None:
    result = run_cli("audit", "--bundle", str(BUNDLES / "h100-x1.tar.gz"), flag,
                     env={"COLUMNS": "80"})
    assert result.code == 1, result.stderr
    for text in present:
        assert text in result.stdout, (text, result.stdout)
    for text in absent:
        assert text not in result.stdout, (text, result.stdout)
