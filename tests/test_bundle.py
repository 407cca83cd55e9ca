"""Bundles: written and read back as directories and archives; bad bundles are refused
with one line naming the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import run_cli
from helpers import BUNDLES, gpu_bundle

from omni_host.collect.bundle import read_bundles, write_archive


def test_directory_and_archive_round_trip(tmp_path: Path) -> None:
    bundle = gpu_bundle("h200-x2")
    root = bundle.write_dir(tmp_path / "dir")
    (from_dir,) = read_bundles(root)
    archive = write_archive([bundle, gpu_bundle("h100-x1")], tmp_path / "two.tar.gz")
    from_tar = read_bundles(archive)
    assert [b.host for b in from_tar] == ["h100-x1", "h200-x2"]
    for copy in (from_dir, from_tar[1]):
        assert copy.results == bundle.results
        assert copy.meta == bundle.meta


def test_gpu_bundles_audit_offline_with_their_verdicts() -> None:
    result = run_cli("audit", "--bundle", str(BUNDLES), "--format", "json")
    doc = json.loads(result.stdout)
    verdicts = {h["host"]: {r["id"]: r["status"] for r in h["results"]} for h in doc["hosts"]}
    assert set(verdicts) == {"h100-x1", "h200-x2"}
    for host in verdicts.values():  # the reference policy: right driver, wrong GPUs, no swap
        assert host["gpu.driver-version"] == "pass"
        assert host["gpu.topology"] == "fail"
        assert host["swap.capacity"] == "fail"
    assert result.code == 1
    assert doc["source"] == "bundle"


def test_truncated_archive_is_one_clear_line(tmp_path: Path) -> None:
    data = (BUNDLES / "h100-x1.tar.gz").read_bytes()
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(data[: len(data) // 2])
    result = run_cli("audit", "--bundle", str(broken))
    assert result.code == 2
    assert result.stderr.startswith(f"omni-host: {broken}: unreadable archive")
    assert "Traceback" not in result.stderr


def test_other_schema_version_is_refused(tmp_path: Path) -> None:
    root = gpu_bundle("h100-x1").write_dir(tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["schema_version"] = 99
    (root / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("audit", "--bundle", str(root))
    assert result.code == 2
    assert "bundle schema 99 is not supported" in result.stderr


def test_missing_raw_output_is_an_incomplete_bundle(tmp_path: Path) -> None:
    root = gpu_bundle("h100-x1").write_dir(tmp_path)
    (root / "probes" / "mem.swaps.stdout").unlink()
    result = run_cli("audit", "--bundle", str(root))
    assert result.code == 2
    assert "incomplete bundle" in result.stderr


def test_bundle_host_not_in_inventory(tmp_path: Path) -> None:
    shutil.copy(BUNDLES / "h100-x1.tar.gz", tmp_path)
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    other:\n")
    result = run_cli("audit", "--bundle", str(tmp_path / "h100-x1.tar.gz"), "-i",
                     str(tmp_path / "hosts.yml"))
    assert result.code == 2
    assert "bundle host 'h100-x1' is not in" in result.stderr
