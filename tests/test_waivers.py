"""Waivers: validated with the line of each error; applied, expired and stale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import isolate_home, run_cli
from test_local import fake_tool

from omni_host.errors import InventoryError
from omni_host.plan.waivers import load_waivers

CHECKS = {"swap.capacity", "gpu.driver-version"}
GOOD = """version: 1
waivers:
  - check: swap.capacity
    hosts: "local*"
    justification: this dev VM never loads a model
    approver: ops-lead
    expires: {expires}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "waivers.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace("swap.capacity", "swap.size").format(expires="2099-01-01"),
     r"waivers\.yml:3: unknown check id 'swap\.size'"),
    (GOOD.format(expires="next spring"), r"waivers\.yml:3: expires 'next spring' is not a date"),
    (GOOD.replace("    justification: this dev VM never loads a model\n", "").format(
        expires="2099-01-01"), r"waivers\.yml:3: waiver lacks justification"),
    ("waivers: []\n", "starts with 'version: 1'"),
    ("version: 1\nwaivers:\n  - check: [\n", r"waivers\.yml:\d+: invalid YAML"),
])
def test_bad_waivers_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message):
        load_waivers(write(tmp_path, text), CHECKS)


def test_second_entry_error_names_its_own_line(tmp_path: Path) -> None:
    text = GOOD.format(expires="2099-01-01") + (
        "  - check: gpu.driver-version\n    approver: x\n    expires: 2099-01-01\n")
    with pytest.raises(InventoryError, match=r"waivers\.yml:8: waiver lacks justification"):
        load_waivers(write(tmp_path, text), CHECKS)


def swap(stdout: str) -> dict:
    return next(r for r in json.loads(stdout)["hosts"][0]["results"] if r["id"] == "swap.capacity")


def local_inventory(tmp_path: Path) -> Path:
    """This machine, expected to have 4 GiB of swap (it has none): swap.capacity fails."""
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    localbox:\n      ansible_connection: local\n"
                                   "  vars:\n    omni_numa_nps: 1\n    omni_swap_size_mib: 4096\n"
                                   "    omni_build_packages: []\n")  # only swap is judged
    return inv


@pytest.fixture(scope="module")
def localbox(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    """One live collection of this machine as `localbox`, audited again from its bundle by
    the tests below: a waiver is applied the same way to a live or a bundled host."""
    root = tmp_path_factory.mktemp("localbox")
    bundle = root / "localbox.tar.gz"
    with pytest.MonkeyPatch.context() as mp:
        isolate_home(mp, root / "home", shared_cache)
        assert run_cli("collect", "-i", str(local_inventory(root)), "--out", str(bundle)).code == 0
    return bundle


def test_waived_failure_is_shown_and_does_not_fail(tmp_path: Path, localbox: Path) -> None:
    waivers = write(tmp_path, GOOD.format(expires="2099-01-01"))
    inv = local_inventory(tmp_path)
    result = run_cli("audit", "-i", str(inv), "--format", "json", "--no-store",
                     "--waivers", str(waivers))  # live
    assert result.code == 0, result.stdout
    r = swap(result.stdout)
    assert r["status"] == "fail" and r["effective_status"] == "waived"  # the check still ran
    assert r["waiver"]["approver"] == "ops-lead"
    assert json.loads(result.stdout)["summary"]["waived"] == 1
    without = run_cli("audit", "--bundle", str(localbox), "--format", "json", "--no-store")
    assert without.code == 1
    table = run_cli("audit", "--bundle", str(localbox), "--no-store",
                    env={"OMNI_HOST_WAIVERS": str(waivers), "COLUMNS": "200"})
    assert table.code == 0 and "WAIVED" in table.stdout and "waived by ops-lead" in table.stdout


def test_expired_waiver_is_flagged_and_not_applied(tmp_path: Path, localbox: Path) -> None:
    waivers = write(tmp_path, GOOD.format(expires="2020-01-01"))
    result = run_cli("audit", "--bundle", str(localbox), "--format", "json", "--no-store",
                     "--waivers", str(waivers))
    assert result.code == 1
    assert swap(result.stdout)["effective_status"] == "fail"
    assert "swap.capacity (waivers line 3): EXPIRED on 2020-01-01, not applied" in result.stderr


def test_stale_waiver_is_flagged(tmp_path: Path, localbox: Path) -> None:
    text = GOOD.replace("swap.capacity", "numa.nps1").format(expires="2099-01-01")
    waivers = write(tmp_path, text)
    result = run_cli("audit", "--bundle", str(localbox), "--format", "json", "--no-store",
                     "--waivers", str(waivers))
    assert "numa.nps1 (waivers line 3): STALE: the check is pass now" in result.stderr
    assert "EXPIRED" not in result.stderr  # stale, not expired: 2099 is ahead


def test_an_impossible_unquoted_date_is_one_line_before_any_host_is_audited(tmp_path: Path) -> None:
    waivers = tmp_path / "waivers.yml"
    waivers.write_text("version: 1\nwaivers:\n  - check: swap.capacity\n    justification: x\n"
                       "    approver: ops\n    expires: 2027-13-01\n")
    ran = tmp_path / "numactl-ran"
    env = fake_tool(tmp_path / "bin", "numactl", f"touch {ran}")
    result = run_cli("audit", "-i", str(local_inventory(tmp_path)), "--waivers", str(waivers),
                     "--no-store", env=env)
    assert result.code == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert f"{waivers}: not a valid date" in result.stderr
    assert not ran.exists()  # refused before the fleet's audit, not after it


def test_recheck_keeps_waivers_and_exits_as_an_audit(two_audits: Path, tmp_path: Path) -> None:
    """The stored audit whose swap.capacity failed, rechecked: with the waiver it is waived
    and the recheck exits 0 (as the audit would); without it, it fails and exits 1."""
    import shutil

    store = tmp_path / "store"
    shutil.copytree(two_audits, store)
    waivers = write(tmp_path, GOOD.format(expires="2099-01-01").replace('"local*"', '"thisbox"'))
    common = ["report", "recheck", "latest", "--report-dir", str(store), "--format", "json",
              "--no-store"]
    waived = run_cli(*common, "--waivers", str(waivers))
    doc = json.loads(waived.stdout)
    swap = next(r for r in doc["hosts"][0]["results"] if r["id"] == "swap.capacity")
    assert (swap["status"], swap["effective_status"]) == ("fail", "waived")
    assert waived.code == 0, waived.stderr
    plain = run_cli(*common)
    assert plain.code == 1
    swap = next(r for r in json.loads(plain.stdout)["hosts"][0]["results"]
                if r["id"] == "swap.capacity")
    assert swap["effective_status"] == "fail"


def test_two_identical_audits_diff_to_nothing(two_audits: Path, tmp_path: Path) -> None:
    """The stored audit whose swap.capacity failed, rechecked twice under a policy it passes:
    the diff of the two identical rechecks says nothing changed. (It used to call swap.capacity
    "resurrected" in every diff after it had once failed.)"""
    import shutil

    store = tmp_path / "store"
    shutil.copytree(two_audits, store)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    thisbox:\n      ansible_connection: local\n"
                   "      omni_build_packages: []\n      omni_swap_size_mib: 0\n")
    rechecks = [run_cli("report", "recheck", "latest", "-i", str(inv), "--report-dir",
                        str(store), "--format", "json") for _ in range(2)]
    verdicts = [{r["id"]: r["status"] for r in json.loads(c.stdout)["hosts"][0]["results"]}
                for c in rechecks]
    assert verdicts[0] == verdicts[1] and verdicts[0]["swap.capacity"] == "pass"
    diff = run_cli("report", "diff", "--report-dir", str(store), "--format", "json")
    (host,) = json.loads(diff.stdout)
    changed = {k: v for k, v in host.items() if k not in ("host", "previous", "latest")}
    assert all(not v for v in changed.values()), changed
    text = run_cli("report", "diff", "--report-dir", str(store)).stdout
    assert text.splitlines()[1] == "  no change in verdicts, state or policy"


BOMB = ("version: 1\nwaivers:\n  - &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"  - &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
                  f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
                  f"*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(9)))


@pytest.mark.parametrize("content, message", [
    # a list is not a glob: it was read as a character class and waived other hosts
    (GOOD.format(expires="2099-01-01").replace('"local*"', "[thisbox, otherbox]"),
     ":3: hosts is one glob pattern (a string), got list: write one waiver per pattern"),
    (BOMB, ":3: YAML aliases (*name) are not accepted in a waivers file"),  # the anchor's line
    (b"version: 1\nwaivers: [\xff\xfe]\n", ": not UTF-8 text (byte 21)"),
    (b"# " + b"x" * (1024 * 1024 + 10) + b"\n", ": larger than 1024 KiB: not a waivers file"),
])
def test_a_hostile_waivers_file_is_one_line(tmp_path: Path, content, message: str) -> None:
    import time

    path = tmp_path / "waivers.yml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    start = time.monotonic()
    with pytest.raises(InventoryError) as caught:
        load_waivers(path, CHECKS)
    assert str(caught.value) == f"{path}{message}"
    assert time.monotonic() - start < 2  # the bomb is refused unexpanded
