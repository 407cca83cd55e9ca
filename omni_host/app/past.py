"""A host's past, read once from the store (issue 45): its stored audits (never a watch's),
and what every judge of a new report needs of them: the previous audit and its servers, the
bench baseline, the last bench, the knob ledger, the last placement plan, the rates its
benches reached. Built once per host per run (``past_of``: one scan of the store); the use
cases hand it to what judges against the past instead of each scanning the store again."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from omni_host.app.baseline import baseline_in
from omni_host.documents import load_json
from omni_host.evaluate.prior import Prior
from omni_host.measure.ceiling import CPU
from omni_host.measure.plan import PROOF_ID, measured_over_predicted
from omni_host.model import Baseline, InferenceServer, Source
from omni_host.outcome import LastBench, MeasuredTest
from omni_host.report.history import (
    History,
    HostEntries,
    knob_ledger,
    last_bench,
    last_plan,
)


@dataclass(frozen=True)
class Past:
    host: str
    entries: HostEntries  # newest first
    baseline: Baseline | None
    last_bench: LastBench | None
    ledger: dict[str, tuple[str, str]]  # check id -> (stored bench, what its knob measured)
    plan: tuple[str, dict[str, Any], dict[str, Any] | None] | None
    rates: dict[str, Any]  # what its stored benches reached (measured_rates): the plan's rates
    warnings: tuple[str, ...] = ()  # stored entries skipped while reading it

    @property
    def previous_audit(self) -> str | None:
        return self.entries[0][0].id if self.entries else None

    def previous_servers(self) -> dict[int, InferenceServer]:
        """The servers the host's previous audit saw, by pid."""
        facts = self.entries[0][1].facts if self.entries else None
        return {s.pid: s for s in (facts.servers if facts is not None else None) or ()}

    def prior(self) -> Prior:
        """What the checks may know of this past (``evaluate.prior``)."""
        return Prior(self.baseline, self.previous_audit, self.previous_servers(), self.ledger,
                     self.plan, self.last_bench, self.rates)


def measured_rates(entries: HostEntries) -> dict[str, Any]:
    """What this host's newest stored benches reached: the fraction of its ceiling where the
    GPUs took every but 1% of a token's time, and the rate its CPU read weights at (an
    all-CPU or hybrid test)."""
    found: dict[str, Any] = {}
    for audit, entry in entries:
        if audit.report.source is not Source.BENCH:
            continue
        if (bench := entry.bench) is None:
            continue
        for name, c in bench.ceiling.items():
            ms = {d: v.ms for d, v in c.devices.items()}
            if ms and ms.get(CPU, 0.0) <= 0.01 * sum(ms.values()) and c.fraction \
                    and "gpu_efficiency" not in found:
                found["gpu_efficiency"] = c.fraction
                found["gpu_from"] = f"{name} of stored bench {audit.id}"
                found["gpu_wander"] = wander(entries, name, bench.tests.get(name))
        for name, gbs in bench.cpu_rates.items():
            if gbs > 0 and "cpu_gbs" not in found:
                found["cpu_gbs"] = float(gbs) * 1e9
                found["cpu_wander"] = wander(entries, name, bench.tests.get(name))
                threads = _threads(bench.tests[name].key) if name in bench.tests else None
                found["cpu_threads"] = threads
                found["cpu_from"] = f"measured by {name} of stored bench {audit.id}" + (
                    f" at -t {threads}" if threads else "")
        if "gpu_efficiency" in found and "cpu_gbs" in found:
            break
    return found | proved_ratio(entries)


WANDER_RUNS = 3  # stored runs of a test that tell how far it wanders between runs
WANDER_MOST = 10  # the newest this many


def wander(entries: HostEntries, name: str, test: MeasuredTest | None) -> float | None:
    """How far a test's rate wanders between runs: the standard deviation of its stored runs'
    centres over their median (the newest runs of the same comparability key, three or
    more); None with fewer."""
    if test is None:
        return None
    centres: list[float] = []
    for audit, entry in entries:
        other = entry.bench.tests.get(name) if audit.report.source is Source.BENCH and \
            entry.bench is not None else None
        if other is not None and other.key == test.key and other.rate > 0:
            centres.append(other.rate)
        if len(centres) >= WANDER_MOST:
            break
    if len(centres) < WANDER_RUNS:
        return None
    return round(statistics.stdev(centres) / statistics.median(centres), 4)


CALIBRATION = 3  # proved placements the stated error is learned from, at least
CALIBRATION_MOST = 60  # the newest this many


def proved_ratio(entries: HostEntries) -> dict[str, Any]:
    """The plan's stated error as this host's stored proofs measured it: the lowest and the
    highest measured / predicted generation over the newest proved placements (three or
    more), and the proofs they came from; empty with fewer."""
    ratios: list[float] = []
    proofs: list[str] = []
    for audit, entry in entries:
        proof = entry.result(PROOF_ID)
        got = measured_over_predicted(proof.details) if proof is not None else []
        if got:
            ratios += got
            proofs.append(audit.id)
        if len(ratios) >= CALIBRATION_MOST:
            break
    if len(ratios) < CALIBRATION:
        return {}
    return {"tg_ratio": [round(min(ratios), 3), round(max(ratios), 3)],
            "tg_ratio_from": f"calibrated on this host: {len(ratios)} placement(s) proved by "
                             f"{len(proofs)} stored plan(s), the newest {proofs[0]}, measured "
                             f"{min(ratios):.2f}-{max(ratios):.2f}x their prediction"}


def _threads(key: dict[str, Any]) -> int | None:
    """The threads a stored test ran with (its comparability key's n_threads), else None."""
    text = key.get("n_threads", "null")
    try:
        value = load_json(text) if isinstance(text, str) else None
    except ValueError:  # DocumentError is one
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def past_of(history: History, host: str) -> Past:
    """The host's past: the store scanned once."""
    entries = tuple(history.for_host(host))
    warnings: list[str] = []
    return Past(host, entries, baseline_in(entries, warnings.append), last_bench(entries),
                knob_ledger(entries), last_plan(entries), measured_rates(entries),
                tuple(warnings))


def priors(pasts: dict[str, Past]) -> dict[str, Prior]:
    """Host name -> what its checks may know of its past (the audit's and the remediation's
    re-audit hand these to the checks)."""
    return {name: past.prior() for name, past in pasts.items()}
