"""A bench's verdict settled and kept: which of two runs decides each test (``settle``), the
typed form a test's verdict is stored in, when a second run is called for (``first_run``),
and what a later bench reads of a stored one (``StoredRun``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from omni_host.measure.context import (
    keyed,
)
from omni_host.measure.series import TestVerdict
from omni_host.model import Status
from omni_host.outcome import BenchOutcome, FirstRun, JudgedTest, MeasuredTest
from omni_host.probes.parsers.bench import (
    BenchTest,
    estimate,
)

RANK = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}


@dataclass(frozen=True)
class StoredRun:
    """A stored bench as a later bench reads it: its repetitions, keys and context by key."""

    tests: dict[str, list[float]]
    keys: dict[str, tuple[tuple[str, str], ...]]
    context: dict[str, Any]
    recorded_baseline: bool
    fit: bool
    baseline: str | None  # the stored bench it was judged against
    changed: tuple[str, ...]
    # the centers of the first of two runs (a drop or a scattered run measured once more),
    # when that run was fit: the same host, measured
    first_centers: dict[str, float] = dataclasses.field(default_factory=dict)

    def centers(self) -> dict[str, float]:
        return {name: estimate(samples).center_ts for name, samples in self.tests.items()}


def stored_run(bench: BenchOutcome) -> StoredRun:
    """What a later bench reads of a stored one (its context by key: a bench stored before
    the keys kept it by display label)."""
    first = bench.first_run
    return StoredRun({n: list(t.samples_ts) for n, t in bench.tests.items()},
                     {n: t.key_items() for n, t in bench.tests.items()},
                     keyed(bench.context), bench.recorded_baseline, bench.fit,
                     bench.baseline.audit if bench.baseline else None, bench.changed,
                     dict(first.centers) if first is not None and first.fit else {})


def measured_test(t: BenchTest) -> MeasuredTest:
    est = t.estimate
    return MeasuredTest(t.kind, t.samples_ts, round(t.mean_ts, 3), round(t.cv, 4),
                        round(est.center_ts, 3), round(est.spread, 4), t.params, dict(t.key))


def judgement(v: TestVerdict) -> JudgedTest:
    return JudgedTest(v.status, round(v.drop, 4), round(v.threshold, 4), round(v.noise, 4),
                      round(v.detectable, 4), round(v.baseline_ts, 3),
                      tuple(round(m, 3) for m in v.modes),
                      None if v.drift is None else round(v.drift, 4), v.dropped, v.blind, v.line(),
                      round(v.now_ts, 3), step=None if v.step is None else round(v.step, 4))


def settle(now: dict[str, JudgedTest], first: FirstRun | None) -> dict[str, JudgedTest]:
    """Each test's deciding verdict. After a first run that did not pass (``first``: its
    verdicts), a test is decided by the run that judged it better: a drop must show in both
    runs to be called, a scattered run is settled by a steadier one; the verdict says which
    run (``run``, and its line). What is stored, said and plotted is this one verdict."""
    out = {}
    for name, v in now.items():
        earlier = first.verdicts.get(name) if first is not None else None
        take, which = v, None
        if earlier is not None and earlier.status in RANK:
            which = "second"
            if RANK[earlier.status] < RANK[v.status]:
                take, which = earlier, "first"
        out[name] = dataclasses.replace(take, run=which, line=take.line + (
            f" (the {which} of two runs)" if which else ""))
    return out


def worst_first(verdicts: dict[str, JudgedTest]) -> list[JudgedTest]:
    return sorted(verdicts.values(), key=lambda v: (-RANK[v.status], -v.drop))


def first_run(status: Status, bench: BenchOutcome | None) -> FirstRun | None:
    """What a second run is judged with, when this compared run's verdict did not pass on the
    tests' own evidence (a drop, or a run that scattered): the bench runs once more before it
    says so (``settle``). None when it passed, or was not compared."""
    if status is Status.ERROR or bench is None or bench.first_run is not None or not any(
            v.status is not Status.PASS for v in bench.verdicts.values()):
        return None
    return FirstRun(bench.verdicts, bench.centers(), bench.fit,
                    "; ".join(bench.disturbances) or None)

