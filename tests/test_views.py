"""Golden files for every report format, on one fixed report: two real GPU machines (one
judged under the reference policy, one under its own with a waiver), an unreachable host, and a
history with an earlier audit (Cold Case, HTML timelines). Any change to a view (a column
dropped, a field renamed) fails here; regenerate deliberately with OMNI_UPDATE_GOLDEN=1 and read
the diff."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
from pathlib import Path

import pytest
from helpers import gpu_bundle

from omni_host.evaluate.audit import evaluate_bundle
from omni_host.model import Source
from omni_host.plan.policy import policy_from_vars, reference_vars
from omni_host.plan.waivers import Waiver, apply_waivers
from omni_host.report.history import History, StoredAudit, cold_case
from omni_host.report.views import VIEWS, ViewContext, context, render
from omni_host.reports import HostReport, Report

GOLDEN = Path(__file__).resolve().parent / "golden"
STARTED = 1795300000.0  # 2026-11-22 19:46:40 UTC, fixed
H200_POLICY = {"omni_gpus": [{"model": "H200", "vram_gib": 140}] * 2, "omni_swap_size_mib": 1024}


def fixed_report() -> tuple[Report, ViewContext]:
    h100 = evaluate_bundle(gpu_bundle("h100-x1"), policy_from_vars(reference_vars(), "ref"),
                           address="ops@h100.lab:22")
    h200 = evaluate_bundle(gpu_bundle("h200-x2"), policy_from_vars(H200_POLICY, "h200"),
                           address="ops@h200.lab:22")
    gone = HostReport("gone", "ops@gone.lab:22", "ssh", False,
                      "cannot connect to gone.lab:22: Connection refused", 10.0)
    waiver = Waiver("swap.capacity", "h200-*", "lab box: models never exceed RAM", "ops-lead",
                    dt.date(2027, 3, 31), 3)
    hosts, notes = apply_waivers([h100, h200, gone], (waiver,), dt.date(2026, 11, 22))
    earlier = Report(STARTED - 86400 * 90, STARTED - 86400 * 90 + 2, Source.LIVE, "inventory/",
                     (dataclasses.replace(h100, results=tuple(
                         dataclasses.replace(r, status=r.status.__class__("fail"))
                         if r.id == "numa.nps1" else r for r in h100.results)),))
    history = History([StoredAudit("20260824T194640000Z-aaaaaa", Path("/nonexistent"),
                                   earlier.to_dict())])
    hosts = [dataclasses.replace(h, cold_case=cold_case(history.for_host(h.host), h),
                                 duration_s=1.5) if h.reachable else h for h in hosts]
    report = Report(STARTED, STARTED + 3, Source.LIVE, "inventory/", tuple(hosts),
                    waiver_notes=tuple(notes))
    return report, context("html", report, lambda: history)


EXTENSIONS = {"table": "txt", "json": "json", "markdown": "md", "html": "html",
              "junit": "xml", "prometheus": "prom"}


def test_every_view_has_a_golden_file() -> None:
    assert set(VIEWS) == set(EXTENSIONS)


@pytest.mark.parametrize("fmt", sorted(EXTENSIONS))
def test_view_matches_its_golden_file(fmt: str) -> None:
    report, ctx = fixed_report()
    text = render(fmt, report, ctx)
    path = GOLDEN / f"report.{EXTENSIONS[fmt]}"
    if os.environ.get("OMNI_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no golden file {path}: run with OMNI_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8"), f"{fmt} changed: diff against {path}"


def test_the_fixed_report_holds_what_the_goldens_must_show() -> None:
    """The golden files pin a report with failures, a waiver, an unreachable host and history:
    if the fixture lost one of them, the goldens would silently test less."""
    report, _ = fixed_report()
    doc = report.to_dict()
    statuses = [r["effective_status"] for h in doc["hosts"] for r in h["results"]]
    assert {"fail", "pass", "skip", "waived"} <= set(statuses)
    assert [h["reachable"] for h in doc["hosts"]] == [True, True, False]
    assert doc["hosts"][0]["cold_case"]["previous"] == "20260824T194640000Z-aaaaaa"
    assert json.loads(render("json", report, ViewContext()))["summary"]["unreachable"] == 1


_READY = """
import sys
sys.path.insert(0, {tests!r})
from test_views import fixed_report
from omni_host.report.views import ready, render
report, ctx = fixed_report()
ready({fmt!r})
before = set(sys.modules)
render({fmt!r}, report, ctx)
print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('rich', 'omni_host')))
"""


@pytest.mark.parametrize("fmt", sorted(EXTENSIONS))
def test_a_view_made_ready_imports_nothing_more_to_render(fmt: str) -> None:
    """A bench readies its view while the host works (issue 44: rich alone was 15 ms of its
    fixed cost here, after llama-bench); what rendering then imports of ours or rich's is
    what ``ready`` missed."""
    import subprocess
    import sys

    code = _READY.format(tests=str(Path(__file__).resolve().parent), fmt=fmt)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("fmt", ["table", "markdown", "html", "json"])
def test_a_host_slower_than_its_twins_is_said_in_every_view(fmt: str) -> None:
    """The fleet bench's twins note (measure.twins) reaches the terminal, Markdown, HTML and
    JSON views, escaped as every host-written text is."""
    report, ctx = fixed_report()
    note = "gpu02 runs slower than its 2 twins (gpu01, gpu03: ...): tg128 7.7% <below>"
    text = render(fmt, dataclasses.replace(report, twins=(note,)), ctx)
    said = {"table": "Twins: gpu02 runs slower than its 2 twins",
            "markdown": "**Twins:** gpu02 runs slower than its 2 twins",
            "html": "Twins: gpu02 runs slower than its 2 twins (gpu01, gpu03: ...): tg128 7.7% "
                    "&lt;below&gt;",
            "json": json.dumps(note)}[fmt]
    assert said in text, text[-2000:]
