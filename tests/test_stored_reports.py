"""Every report an earlier omni-host wrote that the fixtures keep (the lent machines' captures:
JSON views and stores, 2026-11-24 to 11-28) still loads as the typed report, its benches read
into the typed outcome (issue 45), and a host's consecutive reports diff. Expected values come
from each report's own stored text, never from what the code makes of it."""

from __future__ import annotations

import itertools
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from omni_host import codec
from omni_host.model import BENCH_CHECK, Status
from omni_host.report.history import diff_hosts
from omni_host.reports import Report

FIXTURES = Path(__file__).parent / "fixtures"


def _stored() -> Iterator[tuple[str, dict]]:
    """(where, report document) of every report in the fixtures, loose or in an archive."""
    for path in sorted(FIXTURES.rglob("*")):
        if path.suffix == ".json":
            try:
                doc = json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue  # a hostile fixture (tests/fixtures/hostile), not a report
            if isinstance(doc, dict) and "schema_version" in doc and "hosts" in doc:
                yield str(path.relative_to(FIXTURES)), doc
        elif path.name.endswith(".tar.gz"):
            with tarfile.open(path) as tar:
                for member in sorted(tar.getmembers(), key=lambda m: m.name):
                    if member.name.endswith("report.json"):
                        found = tar.extractfile(member)
                        assert found is not None
                        yield f"{path.relative_to(FIXTURES)}:{member.name}", json.load(found)


STORED = list(_stored())


def test_the_fixtures_hold_reports_of_several_kinds() -> None:
    sources = {doc["source"] for _, doc in STORED}
    assert len(STORED) >= 50 and {"live", "bench"} <= sources, sources


@pytest.mark.parametrize(("where", "doc"), STORED, ids=[w for w, _ in STORED])
def test_a_stored_report_loads_and_its_bench_reads_typed(where: str, doc: dict) -> None:
    report = Report.from_dict(doc)
    for stored, host in zip(doc["hosts"], report.hosts, strict=True):
        perf = next((r for r in stored.get("results", []) if r["id"] == BENCH_CHECK), None)
        if perf is None or perf["status"] == Status.ERROR.value:
            assert host.bench is None and host.bench_unread is None
            continue
        details = perf["details"]
        bench = host.bench
        assert bench is not None, host.bench_unread
        assert list(bench.tests) == list(details["tests"])
        for name, test in details["tests"].items():
            assert list(bench.tests[name].samples_ts) == test["samples_ts"]
            assert bench.tests[name].rate == test.get("center_ts", test["mean_ts"])
        assert {n: v.status.value for n, v in bench.verdicts.items()} == \
            {n: v["status"] for n, v in (details.get("verdicts") or {}).items()}
        assert {n: c.fraction for n, c in bench.ceiling.items()} == \
            {n: c["fraction"] for n, c in details["ceiling"].items()}
        assert bench.recorded_baseline is details["recorded_baseline"]
        assert list(bench.changed) == details.get("changed", [])
        # its JSON form is the stored one, less nothing (fields it lacked are written empty)
        _holds(codec.to_dict(bench), details, "details")


def _holds(again: object, stored: object, at: str) -> None:
    """``again`` (the typed outcome written back) holds every value of ``stored`` the type
    knows, and nothing more than empty fields."""
    if isinstance(stored, dict) and isinstance(again, dict):
        assert set(stored) <= set(again), f"{at}: {set(stored) - set(again)} dropped"
        for key, value in again.items():
            if key in stored:
                _holds(value, stored[key], f"{at}.{key}")
            else:
                assert value in (None, [], {}), f"{at}.{key}: {value!r} made up"
        return
    assert again == stored, f"{at}: {again!r} != {stored!r}"


def _by_host() -> dict[str, list]:
    """Each archive's host -> its reports' host entries, oldest first (a store's ids sort by time)."""
    out: dict[str, list] = {}
    for where, doc in STORED:
        archive = where.split(":", 1)[0]
        for host in Report.from_dict(doc).hosts:
            if host.reachable:
                out.setdefault(f"{archive}:{host.host}", []).append(host)
    return out


def test_consecutive_stored_reports_of_a_host_diff() -> None:
    """A host's reports in one archive, each against the one before: the diff names the bench
    changes the newer one stored, and a tokens/s change only where the two measured one test."""
    pairs = 0
    for hosts in _by_host().values():
        for old, new in itertools.pairwise(hosts):
            diff = diff_hosts(old, new)
            pairs += 1
            assert diff.bench_changed == (new.bench.changed if new.bench else ())
            for name, change in diff.tokens_per_s.items():
                if not name.startswith("served by"):
                    assert old.bench is not None and new.bench is not None
                    assert (change.before, change.after) == \
                        (old.bench.tests[name].rate, new.bench.tests[name].rate)
    assert pairs >= 30
