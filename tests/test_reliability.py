"""Reliability round four (issue 34), the items resolved so far: each a test that fails on the
code before it (a traceback, a silent exit 0, an option let through)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import GPU_BUNDLES, run_cli

DEEP = 5000  # levels: enough for YAML's recursive composer to hit the interpreter's limit


def _nested() -> str:
    return "[" * DEEP + "]" * DEEP


@pytest.mark.parametrize("how", ["file", "inline"])
def test_deeply_nested_extra_vars_are_one_line(tmp_path: Path, how: str) -> None:
    if how == "file":
        path = tmp_path / "vars.yml"
        path.write_text(f"omni_bench: {_nested()}\n")
        arg = f"@{path}"
    else:
        arg = '{"omni_bench": ' + _nested() + "}"
    result = run_cli("audit", "--no-store", "-e", arg)
    assert result.code == 2
    line = result.stderr.strip().splitlines()[-1]
    assert "nested too deeply to be omni_* values" in line and "Traceback" not in result.stderr


def test_a_deeply_nested_waivers_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "waivers.yml"
    path.write_text(f"version: 1\nwaivers: {_nested()}\n")
    result = run_cli("audit", "--no-store", "--waivers", str(path))
    assert result.code == 2
    # (the in-process runner's StringIO draws two warnings from Ansible's import: not ours)
    assert result.stderr.strip().splitlines()[-1] == \
        f"omni-host: {path}: nested too deeply to be a waivers file"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("when", [1e300, -1e12])
def test_a_bundle_from_no_calendar_is_refused_not_a_traceback(tmp_path: Path, when: float) -> None:
    """`--format junit` on a bundle with collected_at 1e300 or -1e12: OverflowError and
    ValueError tracebacks."""
    import tarfile

    with tarfile.open(GPU_BUNDLES / "h100-x1.tar.gz") as tar:
        tar.extractall(tmp_path / "b", filter="data")
    (manifest,) = (tmp_path / "b").rglob("manifest.json")
    doc = json.loads(manifest.read_text())
    doc["collected_at"] = when
    manifest.write_text(json.dumps(doc))
    result = run_cli("audit", "--bundle", str(manifest.parent), "--format", "junit")
    assert "Traceback" not in result.stderr and result.code == 2
    assert "manifest's collected_at is not a time" in result.stderr


def test_a_stored_report_from_no_calendar_still_renders(tmp_path: Path, two_audits: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(two_audits, store)
    newest = sorted(store.glob("*/report.json"))[-1]
    doc = json.loads(newest.read_text())
    doc["started_at"] = 1e300
    doc["hosts"][0]["collected_at"] = -1e12
    newest.write_text(json.dumps(doc))
    shown = run_cli("report", "show", newest.parent.name, "--format", "junit", "--report-dir",
                    str(store))
    assert shown.code == 0, shown.stderr
    assert 'timestamp="1970-01-01T00:00:00"' in shown.stdout


def test_report_diff_of_an_empty_or_refused_store_says_so(tmp_path: Path) -> None:
    """It printed nothing and exited 0."""
    empty = run_cli("report", "diff", "--report-dir", str(tmp_path / "none"))
    assert empty.code == 2 and "holds no stored audit: nothing to compare" in empty.stderr
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    refused = run_cli("report", "diff", "--report-dir", str(shared))
    assert refused.code == 2
    assert "writable by others: the report store is not read: nothing to compare" in refused.stderr
