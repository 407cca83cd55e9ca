"""A bench's outcome, typed: what ``omni-host bench`` measured and judged (its tests, the host
state it ran in, its ceilings, its verdicts against the baseline), and an audit's word on the
newest stored bench. ``read_bench`` reads a stored perf.tokens-per-s result's details back into
these types from any omni-host that stored one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from omni_host import codec
from omni_host.model import LinkUnderLoad, Status

# -- a bench's outcome (issue 45) -------------------------------------------------------------
# What ``omni-host bench`` measured and judged, typed. Its JSON form is what the perf.tokens-per-s
# result keeps in its details (the form every view shows and the store keeps, unchanged since
# the keys were first stored); ``HostReport.bench`` reads it back into these types, and no code
# reads those details by key. Every field has a default: a bench stored by an earlier omni-host
# lacks some of them.
MAX_TS = 1e9  # tokens/s past this is not a measurement (samples_ts of 1e308 overflowed the mean)


def rate(value: Any) -> float | None:
    """A tokens/s value, or None where it is not one (a bool, NaN, infinite, <= 0, absurd)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0 < number < MAX_TS else None


@dataclass(frozen=True)
class MeasuredTest:
    """One llama-bench test as measured: every repetition's tokens/s and what it measured."""

    kind: str = ""  # "pp", "tg" or "pg"
    samples_ts: tuple[float, ...] = ()
    mean_ts: float = 0.0
    cv: float = 0.0
    center_ts: float | None = None  # the estimator judged (None in benches stored before it)
    spread: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    key: dict[str, Any] = field(default_factory=dict)  # what it measured: the comparability key

    @property
    def rate(self) -> float:
        """Its tokens/s as judged: the median after the warm-up repetition (the mean in benches
        stored before that)."""
        return self.center_ts if self.center_ts is not None else self.mean_ts

    def key_items(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((str(k), str(v)) for k, v in self.key.items()))


@dataclass(frozen=True)
class JudgedTest:
    """One test's verdict against the baseline, as the bench said it."""

    status: Status
    drop: float = 0.0  # fraction below the reference (negative: faster)
    threshold: float = 0.0
    noise: float = 0.0
    detectable: float = 0.0
    reference_ts: float | None = None
    modes: tuple[float, ...] = ()
    drift: float | None = None
    dropped: bool = False
    blind: bool = False
    line: str = ""
    # the rate judged (the run's median); None in benches stored before it was kept
    measured_ts: float | None = None
    # which of two runs decided it ("first" or "second"; None where one run was judged): the
    # stored verdict is the one the summary says, the plot and the JSON read it (issue 63)
    run: str | None = None
    step: float | None = None  # a step under the tolerance its last runs sit at (issue 67)


@dataclass(frozen=True)
class DeviceShare:
    """One device's part of a token: the bytes it reads, its bandwidth, its milliseconds."""

    gb_per_token: float = 0.0
    gbs: float = 0.0
    ms: float = 0.0


@dataclass(frozen=True)
class Ceiling:
    """A generation test's memory-bandwidth ceiling and how near the run came to it."""

    ceiling_ts: float
    fraction: float
    limit: str = ""
    basis: str = "theoretical"  # or the measured rate it was predicted at
    bytes_per_token: int = 0
    bandwidth_gbs: tuple[float, ...] = ()
    devices: dict[str, DeviceShare] = field(default_factory=dict)
    source: str = ""
    cpu_bandwidth_from: str | None = None
    cpu_effective_gbs: float | None = None


@dataclass(frozen=True)
class FirstRun:
    """The first of two runs, that a second run is judged with (a drop or a scattered run is
    measured once more before it is said)."""

    verdicts: dict[str, JudgedTest] = field(default_factory=dict)
    centers: dict[str, float] = field(default_factory=dict)
    fit: bool = False
    disturbed: str | None = None


@dataclass(frozen=True)
class BenchRef:
    """The stored bench a run was judged against."""

    audit: str
    recorded_at: float = 0.0


@dataclass(frozen=True)
class BenchOutcome:
    """A bench: its tests, the host state it ran in (the context, by key), its ceilings, and
    its verdicts against the baseline (none where it recorded one or was not comparable)."""

    tests: dict[str, MeasuredTest]
    context: dict[str, Any] = field(default_factory=dict)
    ceiling: dict[str, Ceiling] = field(default_factory=dict)
    no_ceiling: dict[str, str] = field(default_factory=dict)
    cpu_rates: dict[str, float] = field(default_factory=dict)  # the rate the CPU read weights at
    recorded_baseline: bool = False
    forced: bool = False
    fit: bool = True
    unfit: tuple[str, ...] = ()
    disturbances: tuple[str, ...] = ()
    links: tuple[LinkUnderLoad, ...] = ()  # each GPU's PCIe link while it ran
    resolution: dict[str, float] | None = None  # a recorded baseline's, by test
    baseline: BenchRef | None = None
    not_comparable: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()  # what moved since the baseline, the causes first
    verdicts: dict[str, JudgedTest] = field(default_factory=dict)
    first_run: FirstRun | None = None

    def centers(self) -> dict[str, float]:
        return {name: t.rate for name, t in self.tests.items()}

    def generation(self) -> str | None:
        """The test an operator reads first: the generation test, else the first."""
        return next((n for n, t in self.tests.items() if t.kind == "tg"), next(iter(self.tests), None))

    def figures(self) -> tuple[float | None, float | None]:
        """Its generation test against the baseline it was judged with and against its
        ceiling, as fractions (None where not known)."""
        name = self.generation()
        if name is None:
            return None, None
        verdict, ceiling = self.verdicts.get(name), self.ceiling.get(name)
        reference = verdict.reference_ts if verdict is not None else None
        center = self.tests[name].rate
        return (center / reference if center and reference else None), \
            (ceiling.fraction if ceiling is not None else None)


def _known(cls: type, doc: Any, what: str) -> dict[str, Any]:
    """``doc``'s keys that ``cls`` stores (a key an earlier omni-host wrote and this one does
    not is left behind); ValueError where ``doc`` is not a mapping."""
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a mapping")
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in doc.items() if k in names}


def _rates(values: Any) -> bool:
    return isinstance(values, list) and bool(values) and all(rate(v) is not None for v in values)


def read_bench(details: Any) -> BenchOutcome:
    """A perf.tokens-per-s result's details as the typed outcome, from any omni-host that
    stored one. ValueError naming what is wrong (a hand-edited or foreign report costs its
    host one warning, never its bench)."""
    doc = _known(BenchOutcome, details, "the details")
    if not isinstance(doc.get("tests"), dict) or not doc["tests"]:
        raise ValueError("no tests")
    tests = {}
    for name, test in doc["tests"].items():
        one = _known(MeasuredTest, test, str(name))
        if not _rates(one.get("samples_ts")):
            raise ValueError(f"{name}: samples_ts is not a list of positive numbers")
        one.setdefault("mean_ts", math.fsum(one["samples_ts"]) / len(one["samples_ts"]))
        tests[str(name)] = one
    doc["tests"] = tests
    for part, cls in (("verdicts", JudgedTest), ("ceiling", Ceiling)):
        if isinstance(doc.get(part), dict):
            doc[part] = {n: _known(cls, v, f"{part}.{n}") for n, v in doc[part].items()}
    if isinstance(doc.get("first_run"), dict):
        first = doc["first_run"] = _known(FirstRun, doc["first_run"], "first_run")
        if isinstance(first.get("verdicts"), dict):
            first["verdicts"] = {n: _known(JudgedTest, v, f"first_run.verdicts.{n}")
                                 for n, v in first["verdicts"].items()}
    if isinstance(doc.get("baseline"), dict):
        doc["baseline"] = _known(BenchRef, doc["baseline"], "baseline")
    if isinstance(doc.get("links"), list):
        doc["links"] = [_known(LinkUnderLoad, v, "links") for v in doc["links"]]
    # a run stored before fitness was recorded: fit unless it was forced
    doc["fit"] = details.get("fit", not details.get("forced")) is True
    return codec.from_dict(BenchOutcome, doc)


@dataclass(frozen=True)
class LastBench:
    """An audit's word on the host's newest stored bench (an audit never runs one)."""

    audit: str  # the stored bench
    at: float  # when it ran
    status: Status  # its perf.tokens-per-s verdict
    summary: str
    # its generation test against the baseline it was judged with, and against its ceiling
    of_baseline: float | None = None
    of_ceiling: float | None = None
    links: tuple[LinkUnderLoad, ...] = ()  # each GPU's PCIe link while it ran
    # how the bench reached the host (-i INVENTORY and its connection options, shell-quoted):
    # measuring again is run as it was, not with the audit's inventory
    reach: str | None = None
    why: str | None = None  # the newest bench --why since it: its verdict, id and summary
