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
from omni_host.evaluate.facts import facts_from_bundle
from omni_host.evaluate.observed import observed_vars
from omni_host.model import Source
from omni_host.plan.policy import policy_from_vars, reference_vars
from omni_host.report.history import History
from omni_host.report.views import context, render
from omni_host.reports import HostReport, Report

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
    return Report(STARTED, STARTED + 2, Source.LIVE, "inventory/", (host,)).to_dict()


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
    return Report(STARTED, STARTED + 4, Source.LIVE, "inventory/", tuple(hosts)).to_dict()


def haswell_vm(name: str = "h200-x2"):
    """A real bundle whose /proc/cpuinfo is a real 2-vCPU Haswell VM's (no AVX-512): the
    cpu.avx512 check warns (info) on it."""
    bundle = gpu_bundle(name)
    cpu = (Path(__file__).resolve().parent / "fixtures" / "public" / "cpu" /
           "proc-cpuinfo_vm-2vcpu-haswell_2-physical-ids_sonar450.txt").read_text()
    results = {**bundle.results,
               "cpu.cpuinfo": dataclasses.replace(bundle.results["cpu.cpuinfo"], stdout=cpu)}
    return dataclasses.replace(bundle, results=results)


def shared_failure_fleet(n: int = 6) -> dict:
    """``n`` hosts, the H100 under several names, each with the same policy and the same one
    failure (the swap it lacks)."""
    values = own_policy_with_swap("h100-x1")
    hosts = [evaluate_bundle(dataclasses.replace(gpu_bundle("h100-x1"), host=f"gpu-{i:02d}"),
                             policy_from_vars(values, f"gpu-{i:02d}"),
                             address=f"ops@gpu-{i:02d}.lab:22") for i in range(1, n + 1)]
    return Report(STARTED, STARTED + 3, Source.LIVE, "inventory/", tuple(hosts)).to_dict()


def terminal(doc: dict, verbosity: int = 0) -> str:
    """The table view of a report in its stored form (read back as a stored one is)."""
    report = Report.from_dict(doc)
    return render("table", report, context("table", report, lambda: History([]), width=80,
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
    assert "preview playbook swap.yml (add --apply to run it, then it re-audits): omni-host " \
        "remediate -i inventory/ h200-x2" in words  # the fix
    counted = [line for line in lines if line.startswith(("PASS", "SKIP"))]
    assert len(counted) == 2, text  # passes and skips: one counted line each
    assert lines[-1].startswith("1 host(s), 0 unreachable: ")
    golden("report-one-host.txt", text)


def test_a_fleet_starts_with_its_matrix_and_says_each_finding_once() -> None:
    doc = fleet()
    text = terminal(doc)
    lines = text.splitlines()
    assert lines[0].startswith(f"Fleet: 8 hosts x {len(doc['hosts'][2]['results'])} checks")
    rows = lines[2:10]
    assert [row.split()[0] for row in rows] == [f"gpu-{i:02d}" for i in range(1, 9)]
    assert "UNREACHABLE: cannot connect to gpu-08.lab:22" in rows[7]
    # one glyph per check, in the legend's order; the glyphs read without colour; a check
    # skipped on every reachable host is named once below the matrix, not given a column
    glyph = {"pass": "\u2713", "fail": "\u2717", "skip": "\u2013", "warn": "!", "error": "E"}
    reachable = [h for h in doc["hosts"] if h["reachable"]]
    judged = {r["id"] for h in reachable for r in h["results"] if r["effective_status"] != "skip"}
    shown = [r for r in doc["hosts"][2]["results"] if r["id"] in judged]
    assert rows[2].split()[1:] == [glyph[r["effective_status"]] for r in shown]
    assert f"1 {shown[0]['id']}" in lines[10]
    silent = [r["id"] for r in doc["hosts"][2]["results"] if r["id"] not in judged]
    assert silent and f"skipped on every host ({len(silent)}):" in text
    assert all(c in " ".join(text.split()) for c in silent)
    assert max(len(line) for line in lines) <= 80
    # the swap failure of three hosts: once, naming them, each distinct summary with its
    # hosts, one fix command for the three
    swap = [h["host"] for h in doc["hosts"] if any(
        r["id"] == "swap.capacity" and r["effective_status"] == "fail" for r in h["results"])]
    assert swap == ["gpu-03", "gpu-05", "gpu-06"]
    assert text.count("FAIL  swap.capacity") == 1, text
    assert "  hosts     gpu-03, gpu-05, gpu-06 (3 of 7)" in lines
    words = " ".join(text.split())
    assert "gpu-05: no active swap, expected 1,024 MiB" in words
    assert "omni-host remediate -i inventory/ gpu-03:gpu-05:gpu-06" in words
    assert "(on gpu-03; each host's: -v)" in words
    # an engine verdict the whole fleet shares: once
    assert text.count("Strategic: ") == 1 and "all 7 hosts" in text
    golden("report-fleet.txt", text)


def test_six_hosts_with_one_shared_failure_fit_in_about_40_lines() -> None:
    doc = shared_failure_fleet(6)
    assert doc["summary"]["fail"] == 6  # one failure on each host
    text = terminal(doc)
    lines = text.splitlines()
    assert len(lines) <= 40, text
    assert max(len(line) for line in lines) <= 80, text
    assert text.count("FAIL  swap.capacity") == 1 and "  hosts     all 6 hosts" in lines, text
    # -v keeps each host's whole view: the evidence per host
    verbose = terminal(doc, verbosity=1)
    assert verbose.count("FAIL  swap.capacity") == 6
    assert verbose.count("$ cat /proc/swaps") == 6


def test_one_host_with_one_failure_and_an_info_warning_fits_in_about_25_lines() -> None:
    bundle = haswell_vm()
    values = {**observed_vars(facts_from_bundle(bundle)), "omni_swap_size_mib": 1024}
    host = evaluate_bundle(bundle, policy_from_vars(values, "h200"), address="ops@h200.lab:22")
    doc = Report(STARTED, STARTED + 2, Source.LIVE, "inventory/", (host,)).to_dict()
    assert (doc["summary"]["fail"], doc["summary"]["warn"]) == (1, 1)
    text = terminal(doc)
    lines = text.splitlines()
    assert len(lines) <= 25, text
    warn = [line for line in lines if line.startswith("WARN  cpu.avx512")]
    assert len(warn) == 1 and "Haswell" in warn[0], text  # the info warning: one line
    assert "evidence" not in text.split("WARN  cpu.avx512")[1], text
    # a host whose missing expectations init cannot record gets no "record it" banner
    unset = doc["hosts"][0]["no_expected_state"]
    from omni_host.plan.policy import INIT_RECORDS

    assert unset and not set(unset.values()) & INIT_RECORDS
    assert "record it" not in text
    assert "set them in the inventory" in " ".join(terminal(doc, verbosity=1).split())


def test_init_records_what_the_banner_promises() -> None:
    """The banner's promise (INIT_RECORDS) holds on the real GPU machines: what init's
    observed_vars writes there is within it (the Zen 5 mask aside), and covers NUMA, the
    driver, the GPUs and the swap."""
    from omni_host.plan.policy import INIT_RECORDS

    written = set()
    for name in ("h100-x1", "h200-x2"):
        written |= set(observed_vars(facts_from_bundle(gpu_bundle(name)),
                                     policy_from_vars(reference_vars(), name)))
    assert written <= INIT_RECORDS | {"omni_zen5_tunables_containers"}, written
    assert {"omni_numa_nps", "omni_gpu_driver_min", "omni_gpus", "omni_swap_size_mib"} <= written


def test_quiet_keeps_failures_and_the_summary_line() -> None:
    doc = fleet()
    text = terminal(doc, verbosity=-1)
    groups = {(r["id"], r["summary"]) for h in doc["hosts"] for r in h["results"]
              if r["effective_status"] == "fail"}
    assert len(groups) >= 3
    assert "FAIL  swap.capacity" in text and "FAIL  gpu.topology" in text
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
