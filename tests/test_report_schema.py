"""The typed report and its published JSON Schema (omni_host/report/report.schema.json): the
file is what the types say, real reports fit it (judged by the jsonschema library, not by our
own code) and read back into the same report, and documents that do not fit are refused by
both, naming the field."""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest
from conftest import run_cli
from helpers import assert_valid_report
from test_views import fixed_report

from omni_host.codec import FormatError
from omni_host.report.history import load_history
from omni_host.report.schema import SCHEMA_FILE, schema_text
from omni_host.reports import Report


@functools.cache
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_published_schema_is_what_the_types_say() -> None:
    if os.environ.get("OMNI_UPDATE_GOLDEN"):
        SCHEMA_FILE.write_text(schema_text(), encoding="utf-8")
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), \
        "the report types changed: regenerate with OMNI_UPDATE_GOLDEN=1 and review the diff"


def test_the_cli_publishes_the_schema() -> None:
    result = run_cli("report", "schema")
    assert result.code == 0
    assert json.loads(result.stdout)["$id"] == "urn:omni-host:report:1"


def test_a_fleet_report_with_waivers_history_and_an_unreachable_host_fits() -> None:
    doc = fixed_report()[0].to_dict()
    assert_valid_report(doc)
    report = Report.from_dict(doc)
    (waived,) = [r for h in report.hosts for r in h.results if r.waiver is not None]
    assert waived.waiver.approver == "ops-lead" and waived.effective_status == "waived"
    assert report.hosts[0].cold_case is not None and report.hosts[0].cold_case.previous
    assert report.hosts[2].reachable is False and report.hosts[2].facts is None


def test_stored_live_audits_fit(two_audits: Path) -> None:
    stored = sorted(two_audits.glob("*/report.json"))
    assert len(stored) == 2
    for path in stored:
        doc = json.loads(path.read_text())
        assert_valid_report(doc)
        assert doc["id"] == path.parent.name


@pytest.mark.parametrize(("path", "value", "where"), [
    (("hosts", 0, "results", 0, "status"), "bogus", "status"),
    (("hosts", 0, "probes", "numa.numactl", "outcome"), "seen", "outcome"),
    (("hosts", 0, "duration_s"), "fast", "duration_s"),
    (("hosts", 0, "strategic", 0, "status"), "maybe", "status"),
    (("hosts", 0, "extra_field"), 1, "extra_field"),
])
def test_a_document_that_does_not_fit_is_refused_by_both(path: tuple, value: object,
                                                         where: str) -> None:
    doc = fixed_report()[0].to_dict()
    bad = copy.deepcopy(doc)
    node = bad
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = list(validator().iter_errors(bad))
    assert errors, f"the schema accepts {path}={value!r}"
    with pytest.raises(FormatError, match=where):
        Report.from_dict(bad)


def test_a_tampered_stored_report_is_skipped_naming_the_file_and_field(two_audits: Path,
                                                                       tmp_path: Path) -> None:
    tmp_path = Path(shutil.copytree(two_audits, tmp_path / "reports"))
    older, newer = sorted(tmp_path.glob("*/report.json"))
    doc = json.loads(newer.read_text())
    doc["hosts"][0]["results"][0]["status"] = "great"
    newer.write_text(json.dumps(doc))
    history = load_history(tmp_path)
    assert [a.path for a in history.audits] == [older.parent]
    (warning,) = history.warnings
    assert str(newer) in warning and "hosts[0].results[0].status" in warning


def test_every_view_knows_every_verdict() -> None:
    """A finding counts as one Verdict (its status, or waived): the summary counts each, and
    every view's colours, glyphs, order and codes name each one, no more."""
    from omni_host.model import Verdict
    from omni_host.report.formats import COLORS, HTML_ORDER, STATUS_CODES
    from omni_host.report.text import GLYPHS, ORDER, STYLES

    verdicts = {v.value for v in Verdict}
    assert verdicts == {"pass", "fail", "warn", "skip", "error", "waived"}
    for table in (STYLES, GLYPHS, ORDER, COLORS, HTML_ORDER, STATUS_CODES):
        assert set(table) == verdicts, table
    summary = fixed_report()[0].summary()
    assert verdicts <= set(summary) and summary["waived"] >= 1  # the fixed report waives one
