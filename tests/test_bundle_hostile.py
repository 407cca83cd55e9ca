"""Bundles are untrusted input: a manifest that points outside the bundle, a symlink, a
manifest of the wrong JSON type, a decompression bomb. Each is one line naming the bundle and
exit 2; nothing outside the bundle is read; memory stays bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, run_cli
from helpers import gpu_bundle

from omni_host.collect.bundle import write_bundle_dir

BOMB = FIXTURES / "hostile" / "bomb-1gib-zeros.tar.gz"


def real_bundle(tmp_path: Path) -> Path:
    return write_bundle_dir(gpu_bundle("h100-x1"), tmp_path / "b")


def rewrite_manifest(root: Path, change) -> None:  # noqa: ANN001
    manifest = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps(change(manifest)))


def refused(path: Path, *words: str) -> str:
    result = run_cli("audit", "--bundle", str(path), "--format", "json")
    assert result.code == 2, result.stdout[-500:] + result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    for word in words:
        assert word in result.stderr
    return result.stderr


@pytest.mark.parametrize("target", ["/etc/shadow", "../../../../etc/passwd",
                                    "probes/../../outside.stdout"])
def test_a_manifest_naming_a_file_outside_the_bundle_is_refused(tmp_path: Path, target: str) -> None:
    root = real_bundle(tmp_path)
    (tmp_path / "outside.stdout").write_text("SECRET-OUTSIDE\n")

    def point(m: dict) -> dict:
        m["probes"][0]["stdout"] = target
        return m
    rewrite_manifest(root, point)
    err = refused(root, "outside the bundle", str(root))
    assert "root:" not in err and "SECRET-OUTSIDE" not in err


def test_a_symlink_inside_the_bundle_is_refused(tmp_path: Path) -> None:
    root = real_bundle(tmp_path)
    stdout = root / "probes" / "system.kernel.stdout"
    stdout.unlink()
    stdout.symlink_to("/etc/passwd")
    refused(root, "points outside the bundle")


@pytest.mark.parametrize("doc", [[], "x", 5, None, {"kind": "omni-host-bundle"},
                                 {"kind": "omni-host-bundle", "schema_version": 1,
                                  "host": {"a": 1}, "probes": []}])
def test_manifests_of_the_wrong_shape_are_one_line(tmp_path: Path, doc: object) -> None:
    root = real_bundle(tmp_path)
    (root / "manifest.json").write_text(json.dumps(doc))
    refused(root, str(root))


@pytest.mark.parametrize(("policy", "words"), [
    ({"values": 5, "origins": {}}, "needs 'values' and 'origins' mappings"),
    ({"origins": {}}, "needs 'values' and 'origins' mappings"),
    ({"values": {"omni_swap_size_mib": 1}, "origins": []}, "needs 'values' and 'origins' mappings"),
    ({"values": {"ansible_password": "x"}, "origins": {}}, "'ansible_password', not an omni_*"),
    ({"values": {"omni_swap_size_mib": 1}, "origins": {"omni_swap_size_mib": 3}},
     "origins must be text"),
])
def test_a_damaged_recorded_policy_is_refused_not_replaced(tmp_path: Path, policy: dict,
                                                           words: str) -> None:
    """Judging a bundle under the reference policy because its own record is damaged would be
    a verdict the evidence does not support: the bundle is refused, naming what is wrong."""
    root = real_bundle(tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["policy"] = policy
    (root / "manifest.json").write_text(json.dumps(manifest))
    refused(root, words)


# The peak is the process's own (VmHWM since exec): getrusage's ru_maxrss keeps the parent's
# (the suite's) peak across fork and exec (tests/test_runaway.py).
_MEASURE = """
import sys, time, io, contextlib
from omni_host.cli import main
start = time.monotonic()
with contextlib.redirect_stderr(io.StringIO()) as err:
    code = main(["audit", "--bundle", sys.argv[1], "--no-store"])
with open("/proc/self/status") as status:
    peak_kib = next(int(l.split()[1]) for l in status if l.startswith("VmHWM:"))
print(code, time.monotonic() - start, peak_kib // 1024, err.getvalue().strip())
"""


def test_a_decompression_bomb_is_refused_fast_with_bounded_memory() -> None:
    assert BOMB.stat().st_size < 2 * 1024 * 1024  # 1 MB that inflates to 1 GiB
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(BOMB)], capture_output=True,
                          text=True, check=True, env=dict(os.environ))
    code, seconds, rss_mib, message = proc.stdout.split(" ", 3)
    assert int(code) == 2
    assert "would inflate to 1073741824 bytes" in message
    assert float(seconds) < 1.0
    assert int(rss_mib) < 200
