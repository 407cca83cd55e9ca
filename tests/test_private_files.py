"""Stored evidence is private to its owner (issue 61): ``remediate --apply`` made the store root
0755 and ``--output`` files were 0644 (a report holds the host's evidence: its processes, its
paths, its policy). The Prometheus metrics stay readable: node_exporter reads them as its own
user, and they hold no evidence."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from omni_host.cli.common import write_output
from omni_host.remediate.flow import artifacts_dir


@pytest.fixture(autouse=True)
def _open_umask():
    """The mode asked for is what is made, whatever the caller's umask lets through."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_an_output_file_is_its_owners_alone_and_the_metrics_are_readable(tmp_path: Path) -> None:
    write_output('{"hosts": []}\n', tmp_path / "report.json")
    write_output("omni_host_up 1\n", tmp_path / "omni.prom", readable=True)
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "omni.prom").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "report.json").read_text() == '{"hosts": []}\n'


def test_a_store_root_made_by_remediate_is_its_owners_alone(tmp_path: Path) -> None:
    root = tmp_path / "fresh" / "reports"
    made = artifacts_dir(root)
    assert root.stat().st_mode & 0o777 == 0o700
    assert made.parent == root and made.stat().st_mode & 0o777 == 0o700
