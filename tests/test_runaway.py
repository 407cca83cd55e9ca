"""A host whose answer never ends, or is far larger than the collector's, costs the run
neither its memory nor its deadline: one short reason naming the host and the cap (issue 27).
The host's "python3" is a real script (ansible_python_interpreter) that floods or trickles,
reached through the loopback sshd and through the local transport."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Sshd

FLOOD = "#!/bin/sh\ncat > /dev/null\nexec yes 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'\n"
TRICKLE = "#!/bin/sh\ncat > /dev/null\nwhile :; do echo still-here; sleep 0.05; done\n"
# Runs the CLI in a fresh interpreter and prints its exit code, seconds, peak RSS (MiB) and
# the last line it wrote to stderr. The peak is the process's own (VmHWM: its memory's
# high-water mark since exec), not getrusage's ru_maxrss: that one keeps the parent's peak
# across fork and exec, and read 301 MiB for a trickling host once the suite's own process had
# grown past 300 MiB (a 410 MiB parent: ru_maxrss 410, VmHWM 8).
MEASURE = """
import contextlib, io, sys, time
from omni_host.cli import main
start = time.monotonic()
with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
lines = [l for l in err.getvalue().splitlines() if l.strip()]
with open("/proc/self/status") as status:
    peak_kib = next(int(l.split()[1]) for l in status if l.startswith("VmHWM:"))
print(code, round(time.monotonic() - start, 1), peak_kib // 1024, lines[-1] if lines else "")
"""


def script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "python3"
    path.write_text(text)
    path.chmod(0o755)
    return path


def measured(*args: str) -> tuple[int, float, int, str]:
    proc = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ), check=True)
    code, seconds, rss, message = proc.stdout.split(" ", 3)
    return int(code), float(seconds), int(rss), message.strip()


def test_a_flooding_host_over_ssh_is_cut_at_the_cap(sshd: Sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {
        "ansible_python_interpreter": str(script(tmp_path, FLOOD))}})
    code, seconds, rss, message = measured(
        "audit", "-i", str(inv), "--no-store", "--known-hosts", str(sshd.known_hosts),
        "--ssh-config", str(tmp_path / "none"))
    assert code == 3
    assert message.startswith("omni-host: loop: unreachable: the host's output passed 64 MiB")
    assert len(message) < 300
    assert rss < 300, rss  # the cap, not the flood (1 GB cost 1.1 GB before)
    assert seconds < 60


def test_a_trickling_host_meets_its_deadline(sshd: Sshd, tmp_path: Path) -> None:
    """Data that keeps coming, far below the cap, never holds off --host-timeout."""
    inv = sshd.inventory(tmp_path / "inv", {"loop": {
        "ansible_python_interpreter": str(script(tmp_path, TRICKLE))}})
    code, seconds, _, message = measured(
        "audit", "-i", str(inv), "--no-store", "--host-timeout", "3", "--known-hosts",
        str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none"))
    assert code == 3
    assert "loop: unreachable:" in message
    assert seconds < 10, seconds


@pytest.mark.parametrize("text, words", [
    (FLOOD, "local: the host's output passed 64 MiB"),
    # the host deadline (5 s) comes before the collector's own (19 s with 2 s probes)
    (TRICKLE, "no answer within the host deadline of 5s")])
def test_the_local_transport_is_bounded_too(tmp_path: Path, text: str, words: str) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"box ansible_connection=local ansible_python_interpreter="
                   f"{script(tmp_path, text)} omni_build_packages=[]\n")
    code, seconds, rss, message = measured("audit", "-i", str(inv), "--no-store",
                                           "--host-timeout", "5", "--probe-timeout", "2")
    assert code == 3
    assert message.startswith(f"omni-host: box: unreachable: {words}"), message
    assert rss < 300 and seconds < 10


def test_two_host_names_never_share_a_bundle(tmp_path: Path) -> None:
    """"lab one" and "lab_one" are two hosts to Ansible: two bundles, in a directory and in an
    archive, each read back under its own name (one was lost before)."""
    from conftest import run_cli

    from omni_host.collect.bundle import read_bundles

    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars:\n    ansible_connection: local\n    omni_build_packages: []\n"
                   "  hosts:\n    lab one:\n    lab_one:\n")
    for out in (tmp_path / "dir", tmp_path / "fleet.tar.gz"):
        result = run_cli("collect", "-i", str(inv), "all", "--out", str(out))
        assert result.code == 0, result.stderr
        assert sorted(b.host for b in read_bundles(out)) == ["lab one", "lab_one"]
    assert len(list((tmp_path / "dir").iterdir())) == 2


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/omni-init-escaped"])
def test_init_never_writes_outside_the_inventory(tmp_path: Path, name: str) -> None:
    from conftest import run_cli

    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text(f'all:\n  hosts:\n    "{name}":\n'
                                   "      ansible_connection: local\n")
    result = run_cli("init", "-i", str(inv), name)
    assert result.code == 2
    assert f"init: host name {name!r} is not a file name in {inv / 'host_vars'}" in result.stderr
    assert not (tmp_path / "escaped.yml").exists() and not Path(f"{name}.yml").exists()
    assert not (inv / "host_vars").exists()


HOSTILE = "evil\x1b]0;pwned\x07\x1bcname\nFAIL forged line\u202etxt"  # ESC c: reset


def test_a_hostile_host_name_stays_one_escaped_line_and_junit_stays_xml(tmp_path: Path) -> None:
    """A name with an OSC title sequence, a screen clear, a newline and a bidi override (all
    accepted by Ansible in a YAML inventory): the terminal, report list and stderr show it
    escaped, and the JUnit file parses (junitparser, the consumer CI uses)."""
    import json

    from conftest import run_cli
    from junitparser import JUnitXml

    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {"hosts": {HOSTILE: {
        "ansible_connection": "local", "omni_build_packages": []}}}}))
    store = tmp_path / "store"
    table = run_cli("audit", "-i", str(inv), "--report-dir", str(store))
    listing = run_cli("report", "list", "--report-dir", str(store))
    junit = run_cli("report", "show", "latest", "--report-dir", str(store), "--format", "junit")
    for text in (table.stdout, table.stderr, listing.stdout):
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
        assert not any(line.startswith("FAIL forged") for line in text.splitlines())
    assert "evil\\x1b]0;pwned\\x07\\x1bcname\\x0aFAIL forged line\\u202etxt" in table.stdout
    path = tmp_path / "report.xml"
    path.write_text(junit.stdout)
    suites = list(JUnitXml.fromfile(str(path)))
    assert suites[0].name == "evil\\x1b]0;pwned\\x07\\x1bcname\nFAIL forged line\u202etxt"


def test_a_bundle_collected_at_nan_is_refused(tmp_path: Path) -> None:
    import json

    from conftest import run_cli
    from helpers import gpu_bundle

    from omni_host.collect.bundle import write_bundle_dir

    root = write_bundle_dir(gpu_bundle("h100-x1"), tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["collected_at"] = float("nan")
    (root / "manifest.json").write_text(json.dumps(manifest))  # Python writes NaN
    result = run_cli("audit", "--bundle", str(root), "--format", "json")
    assert result.code == 2
    assert result.stderr.splitlines()[-1] == (f"omni-host: {root}: manifest's collected_at is "
                                              "not a time")


def test_a_newline_in_a_policy_path_is_refused_naming_it() -> None:
    from omni_host.errors import InventoryError
    from omni_host.plan.policy import policy_from_vars

    with pytest.raises(InventoryError, match=r"omni_disk_free\[1\].path: a path holds a "
                                             r"control character: '/data\\nx'"):
        policy_from_vars({"omni_disk_free": [{"path": "/", "min_free_gib": 1},
                                             {"path": "/data\nx", "min_free_gib": 1}]}, "inv")


def test_a_store_another_account_could_write_is_not_read(two_audits: Path, tmp_path: Path) -> None:
    """A planted audit in a store others can write would become the "latest" that diff,
    baselines and the Cold Case compare with."""
    import shutil

    from conftest import run_cli

    store = tmp_path / "store"
    shutil.copytree(two_audits, store)
    assert len(run_cli("report", "list", "--report-dir", str(store)).stdout.splitlines()) == 2
    newest = sorted(p for p in store.iterdir() if p.is_dir())[-1]
    newest.chmod(0o777)  # one audit planted (or left) writable by everyone
    listing = run_cli("report", "list", "--report-dir", str(store))
    assert len(listing.stdout.splitlines()) == 1
    assert f"{newest}: writable by others: skipped" in listing.stderr
    store.chmod(0o777)
    assert run_cli("report", "list", "--report-dir", str(store)).stdout == "no stored audit\n"


def test_every_untrusted_file_is_read_within_its_cap(tmp_path: Path, two_audits: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A raw collector output past a bundle's cap, an -e @file or --limit @file past 1 MiB, a
    stored report past its cap: each one line naming the file, never read whole."""
    from omni_host.collect import bundle
    from omni_host.errors import BundleError, InventoryError
    from omni_host.plan.hosts import selected_names
    from omni_host.plan.inventory import load_inventory, parse_extra_vars
    from omni_host.report import history

    huge = tmp_path / "big.out"
    with huge.open("wb") as fh:  # sparse: 64 MiB + 1 of zeros cost no disk
        fh.truncate(bundle.MAX_BUNDLE_BYTES + 1)
    with pytest.raises(BundleError, match=r"big.out: not a collector output \(larger than"):
        bundle.read_bundles(huge)
    big_vars = tmp_path / "vars.yml"
    big_vars.write_text("omni_numa_nps: 1\n" + "#" * (1024 * 1024) + "\n")
    with pytest.raises(InventoryError, match=r"-e @.*vars.yml: larger than 1,048,576 bytes"):
        parse_extra_vars([f"@{big_vars}"])
    inv = load_inventory(Path(__file__).parent / "inventories" / "yaml")
    with pytest.raises(InventoryError, match=r"--limit @.*vars.yml: larger than"):
        selected_names(inv, "all", f"@{big_vars}")
    full = history.load_history(two_audits)
    assert len(full.audits) == 2 and not full.warnings
    newest = max(p.stat().st_size for p in two_audits.glob("*/report.json"))
    monkeypatch.setattr(history, "MAX_REPORT_BYTES", newest - 1)
    capped = history.load_history(two_audits)
    assert len(capped.audits) < 2
    assert any("larger than" in w and "skipped" in w for w in capped.warnings), capped.warnings


def test_an_audit_into_a_store_others_can_write_is_refused_as_the_bench_is(tmp_path: Path) -> None:
    """It stored there without a word, where a planted audit becomes the "latest" (issue 43);
    with --no-store it audits and keeps nothing."""
    from conftest import run_cli

    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o777)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    box:\n      ansible_connection: local\n"
                   "      omni_build_packages: []\n")
    refused = run_cli("audit", "-i", str(inv), "--report-dir", str(store))
    assert refused.code == 2 and list(store.iterdir()) == []
    assert refused.stderr.splitlines()[-1].startswith(f"omni-host: audit refused: {store}: ")
    assert "(--report-dir names another store, --no-store keeps none)" in refused.stderr
    kept_none = run_cli("audit", "-i", str(inv), "--report-dir", str(store), "--no-store")
    assert kept_none.code in (0, 1) and "box" in kept_none.stdout and list(store.iterdir()) == []


def test_a_verdict_that_cannot_be_stored_is_still_told_and_written(tmp_path: Path) -> None:
    """A store that cannot be written (here: a file where the store's folder would be) lost
    the whole verdict: not printed, not written to --output. Now both, then one line, exit 2."""
    import json

    from conftest import run_cli

    blocked = tmp_path / "store"
    blocked.write_text("not a folder\n")
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    box:\n      ansible_connection: local\n"
                   "      omni_build_packages: []\n")
    out = tmp_path / "out.json"
    result = run_cli("audit", "-i", str(inv), "--report-dir", str(blocked), "--format", "json",
                     "--output", str(out))
    assert result.code == 2
    assert json.loads(out.read_text())["hosts"][0]["host"] == "box"  # the verdict, written
    assert result.stderr.splitlines()[-1].startswith(f"omni-host: cannot store the report in {blocked}")
    assert result.stderr.splitlines()[-1].endswith(": the verdict above is not kept")
