"""`omni-host bench --knob NAME=VALUE` (issue 48), for real: the CPU llama-bench over the
loopback sshd (this machine, as root), interleaved A/B pairs, the knob written by the bench
helper and restored on the host whatever happens: after the run, after SIGINT and SIGTERM of
omni-host, and after the connection is killed (the host side's restorer, a process of its own
session, writes the value back). Two arms that are the same value never give a
recommendation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Sshd, run_cli, until_unlocked
from helpers import kept
from test_bench import _inventory

pytestmark = pytest.mark.system

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
ARGS = ["-p", "16", "-n", "8", "-t", "1"]  # a short test: each run a second or so here


def _thp() -> str:
    text = THP.read_text()
    return text[text.index("[") + 1:text.index("]")]


@pytest.fixture
def loop(sshd: Sshd, llama, tmp_path: Path):
    binary, model = llama
    inv = _inventory(sshd, tmp_path / "inv", binary, model, args=ARGS, repetitions=2)
    return inv, tmp_path / "store"


def _knob(sshd: Sshd, inv: Path, store: Path, knob: str, pairs: int = 4) -> dict:
    done = until_unlocked(lambda: run_cli(
        "bench", "-i", str(inv), "loop", "--knob", knob, "--pairs", str(pairs), "--report-dir",
        str(store), "--format", "json", "--known-hosts", str(sshd.known_hosts), "--ssh-config",
        str(store.parent / "none"), timeout=600))
    assert done.stdout.strip(), done.stderr
    return next(r for r in json.loads(done.stdout)["hosts"][0]["results"]
                if r["id"] == "perf.knob")


def test_thp_is_measured_and_restored(sshd: Sshd, loop) -> None:
    inv, store = loop
    before = _thp()
    other = "never" if before != "never" else "madvise"
    result = _knob(sshd, inv, store, f"thp={other}")
    assert _thp() == before  # restored
    details = result["details"]
    assert details["before"] == {str(THP): before}
    assert details["restored"] == {str(THP): "ok"}
    assert result["summary"].startswith(f"thp={other} against thp {before}: ")
    judged = kept(4, details.get("disturbed_pairs") or {})
    for test in ("pp16", "tg8"):  # each test: its pairs, its effect, its uncertainty
        found = details["tests"][test]
        assert found["pairs"] == judged and len(found["ratios"]) == judged
        assert isinstance(found["measurable"], bool) and found["uncertainty"] >= 0
    # the runs interleaved, the order alternating: now, knob, knob, now, ...
    arms = [line.split(" (pair")[0] for line in result["evidence"][0]["lines"]]
    assert arms == ["now", other, other, "now", "now", other, other, "now"], arms
    # the ledger: the host's next audit quotes what the knob measured here
    audit = run_cli("audit", "-i", str(inv), "loop", "--report-dir", str(store), "--format",
                    "json", "--known-hosts", str(sshd.known_hosts), "--ssh-config",
                    str(store.parent / "none"))
    thp = next(r for r in json.loads(audit.stdout)["hosts"][0]["results"]
               if r["id"] == "kernel.thp")
    assert f"; measured here (bench {thp['details']['ledger']['bench']}): " \
        f"{result['summary']}" in thp["summary"], thp["summary"]


def test_threads_are_measured_without_touching_the_host(sshd: Sshd, loop) -> None:
    """One thread against two on this 2-vCPU VM: a difference the A/B tells, and says."""
    inv, store = loop
    result = _knob(sshd, inv, store, "threads=2")
    assert result["details"]["before"] == {} and result["details"]["restored"] == {}
    assert result["summary"].startswith("threads=2 against threads 1: ")
    tg = result["details"]["tests"]["tg8"]
    assert tg["pairs"] == kept(4, result["details"].get("disturbed_pairs") or {})
    if tg["measurable"]:  # beside other work it may not be: then the summary says so
        assert result["status"] == ("warn" if tg["effect"] > 0 else "pass")
    else:
        assert "tg8 no measurable difference" in result["summary"]


def test_two_arms_of_the_same_value_never_recommend(sshd: Sshd, loop) -> None:
    """10 A/Bs whose arms are the same (-t 1 against threads=1), at the default 6 pairs:
    0 recommendations."""
    inv, store = loop
    found = [_knob(sshd, inv, store, "threads=1", pairs=6) for _ in range(10)]
    recommended = [r["summary"] for r in found if r["details"].get("recommend")]
    assert recommended == [], recommended
    assert all(r["status"] == "pass" for r in found)


def _interrupted(sshd: Sshd, inv: Path, store: Path, stop) -> subprocess.Popen:  # noqa: ANN001
    """omni-host bench --knob thp=... started, ``stop(proc)`` called once the helper has
    written the knob (the first knob arm is running)."""
    before = _thp()
    other = "never" if before != "never" else "madvise"
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_host", "bench", "-i", str(inv), "loop", "--knob",
         f"thp={other}", "--pairs", "20", "--report-dir", str(store), "--known-hosts",
         str(sshd.known_hosts), "--ssh-config", str(store.parent / "none")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while _thp() != other:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    stop(proc)
    return proc


def _restored(before: str, within_s: float = 15) -> None:
    deadline = time.monotonic() + within_s
    while _thp() != before:
        assert time.monotonic() < deadline, f"THP left at {_thp()}, was {before}"
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_omni_host_leaves_the_knob_restored(sshd: Sshd, loop, sig) -> None:
    inv, store = loop
    before = _thp()
    proc = _interrupted(sshd, inv, store, lambda p: os.killpg(p.pid, sig))
    proc.communicate(timeout=120)
    _restored(before)


def test_a_killed_connection_leaves_the_knob_restored(sshd: Sshd, loop) -> None:
    """omni-host killed outright (SIGKILL: nothing of it runs again) drops its SSH connection:
    the host's collector and helper are ended by their session's end, and the restorer puts
    the knob back."""
    inv, store = loop
    before = _thp()
    proc = _interrupted(sshd, inv, store, lambda p: os.killpg(p.pid, signal.SIGKILL))
    proc.communicate(timeout=60)
    _restored(before, within_s=30)
    # and the next bench is not refused by a stale lock or a helper left running
    result = _knob(sshd, inv, store, "threads=1", pairs=1)
    assert result["status"] == "pass", result["summary"]


# -- a container's locked-memory limit (ulimit -l): set on llama-bench as the container sets it
def test_memlock_sizes_and_arms() -> None:
    from omni_host.errors import UsageError
    from omni_host.plan.knobs import arms, limit_bytes, parse_knob

    assert [limit_bytes(v) for v in ("8M", "64k", "unlimited", "4096", "8X", "")] == \
        [8 << 20, 64 << 10, -1, 4096, None, None]
    knob, value = parse_knob("memlock=8M")
    now, limited = arms(knob, value, ("-p", "16", "-lm", "mmap", "-t", "1"))
    assert now.args == limited.args == ("-p", "16", "-t", "1", "-lm", "mlock")
    assert (now.limits, limited.limits, now.writes, limited.writes) == ((), (("memlock", 8 << 20),),
                                                                         (), ())
    with pytest.raises(UsageError, match="not a size"):
        parse_knob("memlock=lots")


def test_a_containers_memlock_is_measured_on_llama_bench(sshd: Sshd, loop) -> None:
    """memlock=64K against the session's own limit, the model loaded as --mlock does: the
    kernel held 64 KiB for each of the knob's runs (/proc/PID/limits), none for the others;
    nothing on the host to restore."""
    inv, store = loop
    result = _knob(sshd, inv, store, "memlock=64K")
    details = result["details"]
    assert set(details["before"]) == {"memlock"} and details["restored"] == {}
    assert result["summary"].startswith(f"memlock=64K against memlock {details['before']['memlock']}: ")
    lines = result["evidence"][0]["lines"]
    assert result["evidence"][0]["command"].startswith("llama-bench, A/B: memlock ")
    assert sum("(memlock held at 65536)" in line for line in lines) == 4
    assert all(("held at" in line) == line.startswith("64K") for line in lines)
    assert details["tests"]["tg8"]["pairs"] == kept(4, details.get("disturbed_pairs") or {})


def test_the_same_memlock_twice_never_recommends(sshd: Sshd, loop) -> None:
    """10 A/Bs whose arms hold the same limit (the session's own, set again on the knob's
    arm): 0 recommendations."""
    inv, store = loop
    same = _knob(sshd, inv, store, "memlock=64K", pairs=1)["details"]["before"]["memlock"]
    found = [_knob(sshd, inv, store, f"memlock={same}") for _ in range(10)]
    recommended = [r["summary"] for r in found if r["details"].get("recommend")]
    assert recommended == [], recommended
    assert all(r["status"] == "pass" for r in found), [r["summary"] for r in found]


def test_memlock_on_the_lent_h100() -> None:
    """The lent H100's reports (fixtures): 8 MiB held for each of the knob's runs and no
    measurable difference with the model on the GPU; 10 A/Bs of the same limit in both arms:
    0 recommendations."""
    import tarfile

    folder = Path(__file__).parent / "fixtures" / "captures" / "knobs" / "memlock-h100"

    def knob_result(doc: dict) -> dict:
        return next(r for r in doc["hosts"][0]["results"] if r["id"] == "perf.knob")

    eight = knob_result(json.loads((folder / "memlock-8M.json").read_text()))
    assert eight["summary"].startswith("memlock=8M against memlock unlimited: pp512 no measurable")
    lines = eight["evidence"][0]["lines"]
    assert sum(line.endswith("(memlock held at 8388608)") for line in lines) == 6
    with tarfile.open(folder / "memlock-same.tar.gz") as tar:
        same = [knob_result(json.load(tar.extractfile(m)))  # type: ignore[arg-type]
                for m in tar.getmembers() if m.name.endswith(".json")]
    assert len(same) == 10
    assert [r["details"].get("recommend") for r in same] == [None] * 10
    assert {r["status"] for r in same} == {"pass"}


@pytest.mark.parametrize(("knob", "words"), [
    ("bogus=1", "--knob 'bogus=1': give NAME=VALUE, NAME one of"),
    ("memlock=lots", "--knob memlock: 'lots' is not a size (8M, 64K, unlimited)"),
])
def test_a_knob_that_is_not_one_is_refused_by_name_before_any_host(knob: str, words: str,
                                                                    tmp_path: Path) -> None:
    """The bench parses --knob where it resolves its hosts: a knob that is not one is refused
    by name, exit 2, before any host is reached or the store is made."""
    store = tmp_path / "store"
    result = run_cli("bench", "--knob", knob, "--report-dir", str(store), timeout=30)
    assert result.code == 2, result.stderr
    assert words in result.stderr
    assert not store.exists()


ZONE_RECLAIM = Path("/proc/sys/vm/zone_reclaim_mode")


def test_a_knob_added_as_one_row_is_measured_and_restored(sshd: Sshd, loop) -> None:
    """Issue 64: zone-reclaim is one row of plan/knobs.py and nothing else; ``bench --knob``
    writes its file for one arm, interleaved, and restores it."""
    inv, store = loop
    before = ZONE_RECLAIM.read_text().strip()
    other = "1" if before == "0" else "0"
    result = _knob(sshd, inv, store, f"zone-reclaim={other}", pairs=2)
    assert ZONE_RECLAIM.read_text().strip() == before  # restored
    assert result["details"]["before"] == {str(ZONE_RECLAIM): before}
    assert result["details"]["restored"] == {str(ZONE_RECLAIM): "ok"}
    assert result["summary"].startswith(f"zone-reclaim={other} against zone-reclaim {before}: ")
    arms = [line.split(" (pair")[0] for line in result["evidence"][0]["lines"]]
    assert arms == ["now", other, other, "now"], arms
