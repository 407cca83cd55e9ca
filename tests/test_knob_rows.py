"""Issue 64: a knob is declared once, as a row of ``omni_host/plan/knobs.py``: the host helpers
are handed the table as data and name no knob (the audit's reads, the A/B's files and resource
limits), so a row added there is read by the audit and varied by ``bench --knob`` with no
other change (zone-reclaim was added so; tests/test_knob_ab.py measures it on llama-bench)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from omni_host.plan.knobs import KNOBS, READS, arms, audit_reads, parse_knob
from omni_host.probes.catalog import PROBES
from omni_host.probes.parsers.knobs import parse_knobs
from omni_host.resources import resources_text

ZONE_RECLAIM = Path("/proc/sys/vm/zone_reclaim_mode")


def _audit_knobs():
    probe = next(p for p in PROBES if p.id == "host.knobs")
    argv = [sys.executable if a == "{python}" else a for a in probe.argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return parse_knobs(done.stdout)


def test_the_helpers_name_no_knob() -> None:
    knobs_helper, bench_helper = resources_text("remote/knobs.py"), resources_text("remote/bench.py")
    for knob in KNOBS.values():
        for part in (knob.path, knob.limit.resource if knob.limit else None,
                     knob.limit.row if knob.limit else None):
            if part is not None:
                assert part not in knobs_helper and part not in bench_helper, part
    for path in READS.values():
        assert path not in knobs_helper, path
    assert set(audit_reads()) == {k.name for k in KNOBS.values() if k.path} | set(READS)


def test_a_knob_added_as_one_row_is_read_by_the_audit() -> None:
    """The audit's own probe, as the collector runs it, on this machine: zone-reclaim's value
    is the kernel's, read through the row alone; THP reads as before."""
    knobs = _audit_knobs()
    assert knobs.value("zone-reclaim") == ZONE_RECLAIM.read_text().strip()
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    assert knobs.thp_enabled == thp[thp.index("[") + 1:thp.index("]")]
    assert knobs.read["cmdline"] == Path("/proc/cmdline").read_text().strip()


def test_a_knob_added_as_one_row_has_its_arms() -> None:
    knob, value = parse_knob("zone-reclaim=1")
    now, other = arms(knob, value, ("-t", "1"))
    assert now.writes == () and other.writes == ((str(ZONE_RECLAIM), "1"),)
    assert other.args == now.args == ("-t", "1")
    assert knob.why and knob.check is None  # no check judges it yet: why it costs, said


def test_the_first_helpers_document_reads_as_before() -> None:
    """A bundle stored by the helper before the table (its sections by name) reads the same."""
    folder = Path(__file__).parent / "fixtures" / "captures" / "knobs"
    old = json.loads((folder / "knobs_h100.json").read_text())
    knobs = parse_knobs(json.dumps(old))
    assert old["thp"]["enabled"] == "always [madvise] never" and knobs.thp_enabled == "madvise"
    assert knobs.governors == old["cpu"]["governors"] and knobs.cores
    assert knobs.read["thp"] == old["thp"]["enabled"]
