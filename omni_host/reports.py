"""A host's report and the run's: what is stored in report.json, diffed, rendered, and
scrubbed of vaulted values before any of that.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from omni_host import __version__, codec
from omni_host.model import (
    BENCH_CHECK,
    REPORT_SCHEMA,
    Bundle,
    CheckResult,
    ColdCase,
    EngineVerdict,
    FactSummary,
    ProbeNote,
    Source,
    Status,
    Verdict,
    scrub,
)
from omni_host.outcome import BenchOutcome, LastBench, read_bench


@dataclass(frozen=True)
class PolicyRecord:
    """The expected state a host was judged under: omni_* values and where each came from."""

    values: dict[str, Any]
    origins: dict[str, str]


@dataclass(frozen=True)
class HostReport:
    host: str
    address: str | None
    transport: str
    reachable: bool
    error: str | None
    duration_s: float = field(metadata={"round": 4})
    results: tuple[CheckResult, ...] = ()
    bundle: Bundle | None = field(default=None, compare=False, metadata={"stored": False})
    # What could not be observed on this host, and why (every probe of the plan).
    probes: dict[str, ProbeNote] = field(default_factory=dict)
    facts: FactSummary | None = None
    strategic: tuple[EngineVerdict, ...] = ()
    cold_case: ColdCase | None = None  # history.cold_case, once the store is known
    policy: PolicyRecord | None = None
    collected_at: float | None = None  # when its bundle was collected (an offline audit: then)
    last_bench: LastBench | None = None  # the newest stored bench of this host, for audits
    # The omni_* variables ``omni-host init`` would record from this audit's facts that the
    # inventory leaves unset: the "record it" hint is printed only while there are some.
    recordable: tuple[str, ...] = ()

    DERIVED: ClassVar[dict[str, Any]] = {
        "counts": dict[str, int], "no_expected_state": dict[str, str], "unconfigured": bool,
        "reference": bool}

    def result(self, check_id: str) -> CheckResult | None:
        """This host's result of one check, None where it has none."""
        return next((r for r in self.results if r.id == check_id), None)

    @cached_property
    def _bench(self) -> BenchOutcome | str | None:
        perf = self.result(BENCH_CHECK)
        if perf is None or perf.status is Status.ERROR:
            return None
        try:
            return read_bench(perf.details)
        except ValueError as exc:
            return str(exc)

    @property
    def bench(self) -> BenchOutcome | None:
        """What this host's bench measured and judged, typed (None for an audit, a bench that
        failed, or one whose stored details do not read: ``bench_unread`` says why)."""
        return self._bench if isinstance(self._bench, BenchOutcome) else None

    @property
    def bench_unread(self) -> str | None:
        """Why this host's stored bench does not read, None where it does or there is none."""
        return self._bench if isinstance(self._bench, str) else None

    def no_expected_state(self) -> dict[str, str]:
        """Check id -> the unset variable, for checks skipped for want of expected state."""
        return {r.id: r.details["no_expected_state"] for r in self.results
                if r.status is Status.SKIP and r.details.get("no_expected_state")}

    @property
    def unconfigured(self) -> bool:
        """Judged under role defaults alone: the inventory describes nothing of this host."""
        origins = self.policy.origins if self.policy else {}
        return self.reachable and bool(origins) and all(
            str(o).startswith("default: ") for o in origins.values())

    @property
    def reference(self) -> bool:
        """Judged against the built-in reference box (no inventory): not this machine's own
        expected state."""
        origins = self.policy.origins if self.policy else {}
        return self.reachable and any(str(o).startswith("built-in reference: ")
                                      for o in origins.values())

    def counts(self) -> dict[str, int]:
        counts = {v.value: 0 for v in Verdict}
        for r in self.results:
            counts[r.effective_status.value] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return codec.document(self)


class FixVerdict(str, enum.Enum):
    FIXED = "fixed"
    STILL_FAILING = "still failing"
    ERROR = "error"  # the apply failed on this host, or the re-audit did not run


@dataclass(frozen=True)
class FixOutcome:
    """One (host, check) of a remediation: the status before, after, and why."""

    host: str
    check: str
    playbook: str
    before: str
    changed_tasks: tuple[str, ...]
    after: str | None
    outcome: FixVerdict
    detail: str


@dataclass(frozen=True)
class Change:
    before: Any
    after: Any


@dataclass(frozen=True)
class HostDiff:
    """What changed for one host between two audits."""

    new_failures: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    still_failing: tuple[str, ...] = ()
    policy_changed: dict[str, Change] = field(default_factory=dict)
    changed_facts: dict[str, Change] = field(default_factory=dict)
    resurrected: tuple[str, ...] = ()
    resurrected_engines: tuple[str, ...] = ()
    tokens_per_s: dict[str, Change] = field(default_factory=dict)  # test -> mean t/s, 2 benches
    # checks whose verdict moved with the expected state (a variable they read changed)
    expected_state_changed: tuple[str, ...] = ()
    new_warnings: tuple[str, ...] = ()  # warn now, neither warn nor failing before
    # what the newer bench found changed on the host since its baseline (its own attribution)
    bench_changed: tuple[str, ...] = ()
    # the tests the newer bench read as falling over its history: a slide, a step down that
    # stayed, a step under the tolerance (issue 67)
    series: tuple[str, ...] = ()
    why: str | None = None  # what the newer report's bench --why proved (issue 65)


@dataclass(frozen=True)
class Report:
    """An audit of one or more hosts, as stored in report.json (schema in
    omni_host/report/report.schema.json)."""

    started_at: float
    finished_at: float
    source: Source
    inventory: str | None
    hosts: tuple[HostReport, ...]
    interrupted: bool = False
    id: str | None = None  # set when stored
    waiver_notes: tuple[str, ...] = ()  # expired and stale waivers
    twins: tuple[str, ...] = ()  # a fleet bench's hosts slower than their twins (measure.twins)
    rechecked: str | None = None  # the stored audit a recheck re-evaluated
    remediation: tuple[FixOutcome, ...] = ()
    pre_state: str | None = None  # the audit stored before a remediation
    baseline: bool = False
    # the run's connection options a pasted hint needs (--known-hosts, --ssh-config,
    # --vault-password-file and their values): report.text.target
    hint_args: tuple[str, ...] = ()

    DERIVED: ClassVar[dict[str, Any]] = {
        "schema_version": int, "tool": dict[str, str], "summary": dict[str, int]}
    schema_version: ClassVar[int] = REPORT_SCHEMA
    tool: ClassVar[dict[str, str]] = {"name": "omni-host", "version": __version__}

    @property
    def unreachable(self) -> list[HostReport]:
        return [h for h in self.hosts if not h.reachable]

    def summary(self) -> dict[str, int]:
        total = {v.value: 0 for v in Verdict}
        for h in self.hosts:
            for k, v in h.counts().items():
                total[k] += v
        return {"hosts": len(self.hosts), "unreachable": len(self.unreachable), **total}

    def to_dict(self) -> dict[str, Any]:
        return codec.document(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Report:
        """The report a stored report.json holds; codec.FormatError says where it does not fit."""
        return codec.from_dict(cls, doc)


def make_report(hosts: list[HostReport], *, started_at: float, source: Source,
                inventory: str | None, interrupted: bool = False,
                hint_args: tuple[str, ...] = ()) -> Report:
    return Report(started_at, time.time(), source, inventory, tuple(hosts), interrupted,
                  hint_args=hint_args)


def scrub_host(host: HostReport, secrets: tuple[str, ...]) -> HostReport:
    """A host report (its findings, evidence, summaries, engines, past and raw bundle)
    without the secrets: every string it holds, whatever field it sits in."""
    return scrub(host, secrets) if secrets else host
