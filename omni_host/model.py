"""The small shared vocabulary: command results, probe outcomes, check results, reports.

Everything here is a frozen dataclass so that a bundle, once collected, cannot drift while the
checks read it.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omni_host import __version__

if TYPE_CHECKING:  # the raw evidence a host report keeps (collect stage)
    from omni_host.collect.bundle import Bundle


@dataclass(frozen=True)
class CommandResult:
    """One command as it ran on the host. A non-zero exit code is data, not an error.

    ``status`` is the collector's word on whether the command ran at all: ``ran``, ``missing``
    (not installed), ``denied`` (not executable for us), ``timeout`` (killed at its deadline) or
    ``error`` (anything else that kept it from starting).
    """

    probe_id: str
    argv: tuple[str, ...]
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    reason: str = ""


class Outcome(str, enum.Enum):
    OBSERVED = "observed"
    UNAVAILABLE = "unavailable"
    UNPARSEABLE = "unparseable"


@dataclass(frozen=True)
class ProbeResult:
    """What a probe yielded: a typed fact, or why there is none (never a silent None)."""

    probe_id: str
    command: str
    outcome: Outcome
    fact: Any = None
    reason: str = ""
    excerpt: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OBSERVED

    def why_not(self) -> str:
        """One line saying why there is no fact: for skip and error summaries."""
        if self.outcome is Outcome.UNPARSEABLE:
            return f"{self.command}: unparseable output ({self.reason})"
        return f"{self.command}: {self.reason}"


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    ERROR = "error"


class Severity(str, enum.Enum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"


@dataclass(frozen=True)
class Evidence:
    """The probe, the exact command and the output lines that decided a result."""

    probe: str
    command: str
    lines: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "command": self.command, "lines": list(self.lines)}


@dataclass(frozen=True)
class Remediation:
    """A playbook to run, or manual steps when the fix is outside the tool (BIOS, flags)."""

    kind: str  # "playbook" or "manual"
    playbook: str | None = None
    steps: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "playbook": self.playbook, "steps": list(self.steps)}


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict on one host. The single finding shape of every report."""

    id: str
    title: str
    status: Status
    severity: Severity
    lessons: tuple[str, ...]
    summary: str
    expected: Any = None
    actual: Any = None
    evidence: tuple[Evidence, ...] = ()
    remediation: Remediation | None = None
    details: dict[str, Any] = field(default_factory=dict)
    waiver: dict[str, Any] | None = None  # the waiver that accepts this finding, if any

    @property
    def effective_status(self) -> str:
        """``waived`` for an accepted failure or warning; the status otherwise."""
        waivable = (Status.FAIL, Status.WARN, Status.ERROR)
        return "waived" if self.waiver and self.status in waivable else self.status.value

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status.value,
            "effective_status": self.effective_status,
            "severity": self.severity.value,
            "lessons": list(self.lessons),
            "summary": self.summary,
            "expected": self.expected,
            "actual": self.actual,
            "evidence": [e.to_dict() for e in self.evidence],
            "remediation": self.remediation.to_dict() if self.remediation else None,
            "details": self.details,
            "waiver": self.waiver,
        }


# -- reports ---------------------------------------------------------------------------------
REPORT_SCHEMA = 1



@dataclass(frozen=True)
class HostReport:
    host: str
    address: str | None
    transport: str
    reachable: bool
    error: str | None
    duration_s: float
    results: tuple[CheckResult, ...] = ()
    bundle: Bundle | None = field(default=None, compare=False)
    # probe id -> {"outcome", "reason"}: what could not be observed on this host, and why.
    probes: dict[str, dict[str, str]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # sentinel.fact_summary
    strategic: tuple[dict[str, Any], ...] = ()  # sentinel.strategic
    cold_case: dict[str, Any] | None = None  # history.cold_cases, once the store is known
    # The expected state judged under: {"values": {omni_*: value}, "origins": {omni_*: where}}
    policy: dict[str, Any] | None = None

    def no_expected_state(self) -> dict[str, str]:
        """Check id -> the unset variable, for checks skipped for want of expected state."""
        return {r.id: r.details["no_expected_state"] for r in self.results
                if r.status is Status.SKIP and r.details.get("no_expected_state")}

    @property
    def unconfigured(self) -> bool:
        """Judged under role defaults alone: the inventory describes nothing of this host."""
        origins = (self.policy or {}).get("origins") or {}
        return self.reachable and bool(origins) and all(
            str(o).startswith("default: ") for o in origins.values())

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status} | {"waived": 0}
        for r in self.results:
            counts[r.effective_status] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "address": self.address,
            "transport": self.transport,
            "reachable": self.reachable,
            "error": self.error,
            "duration_s": round(self.duration_s, 4),
            "collected_at": self.bundle.collected_at if self.bundle else None,
            "counts": self.counts(),
            "probes": self.probes,
            "facts": self.facts,
            "strategic": list(self.strategic),
            "cold_case": self.cold_case,
            "policy": self.policy,
            "no_expected_state": self.no_expected_state(),
            "unconfigured": self.unconfigured,
            "results": [r.to_dict() for r in self.results],
        }


@dataclass(frozen=True)
class Report:
    started_at: float
    finished_at: float
    source: str  # "live" or "bundle"
    inventory: str | None
    hosts: tuple[HostReport, ...]
    interrupted: bool = False

    @property
    def unreachable(self) -> list[HostReport]:
        return [h for h in self.hosts if not h.reachable]

    def summary(self) -> dict[str, int]:
        total = {s.value: 0 for s in Status} | {"waived": 0}
        for h in self.hosts:
            for k, v in h.counts().items():
                total[k] += v
        return {"hosts": len(self.hosts), "unreachable": len(self.unreachable), **total}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": REPORT_SCHEMA,
            "tool": {"name": "omni-host", "version": __version__},
            "source": self.source,
            "interrupted": self.interrupted,
            "inventory": self.inventory,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "summary": self.summary(),
            "hosts": [h.to_dict() for h in self.hosts],
        }


def make_report(hosts: list[HostReport], *, started_at: float, source: str,
                inventory: str | None, interrupted: bool = False) -> Report:
    return Report(started_at, time.time(), source, inventory, tuple(hosts), interrupted)


# -- scrubbing: the clear text of vaulted values never leaves memory ------------------------
SCRUBBED = "<vaulted>"


def scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` (JSON-like) with every occurrence of each secret replaced."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, SCRUBBED)
        return value
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub(v, secrets) for v in value)
    return value


def scrub_command(result: CommandResult, secrets: tuple[str, ...]) -> CommandResult:
    return dataclasses.replace(result, argv=scrub(result.argv, secrets),
                               stdout=scrub(result.stdout, secrets),
                               stderr=scrub(result.stderr, secrets),
                               reason=scrub(result.reason, secrets))


def scrub_host(host: HostReport, secrets: tuple[str, ...]) -> HostReport:
    """A host report (its findings, evidence and raw bundle) without the secrets."""
    if not secrets:
        return host
    results = tuple(dataclasses.replace(
        r, summary=scrub(r.summary, secrets), expected=scrub(r.expected, secrets),
        actual=scrub(r.actual, secrets), details=scrub(r.details, secrets),
        evidence=tuple(Evidence(e.probe, scrub(e.command, secrets), scrub(e.lines, secrets))
                       for e in r.evidence)) for r in host.results)
    bundle = host.bundle
    if bundle is not None:
        bundle = dataclasses.replace(bundle, results={
            k: scrub_command(v, secrets) for k, v in bundle.results.items()})
    return dataclasses.replace(host, results=results, bundle=bundle,
                               facts=scrub(host.facts, secrets),
                               probes=scrub(host.probes, secrets))
