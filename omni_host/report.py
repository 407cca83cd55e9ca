"""The report: one object per audit run, with a stable JSON form (the stored, canonical one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omni_host import __version__
from omni_host.bundle import Bundle
from omni_host.model import CheckResult, Status

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
