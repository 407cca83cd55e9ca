"""One snapshot of a host: every probe's outcome, evaluated once from a bundle."""

from __future__ import annotations

from dataclasses import dataclass

from omni_host.collect.bundle import Bundle
from omni_host.model import Outcome, ProbeResult
from omni_host.probes.catalog import PROBES_BY_ID, evaluate


@dataclass(frozen=True)
class HostFacts:
    host: str
    probes: dict[str, ProbeResult]

    def get(self, probe_id: str) -> ProbeResult:
        return self.probes[probe_id]

    def first_observed(self, *probe_ids: str) -> ProbeResult:
        """The first probe that observed its fact; else the most telling failure (an
        unparseable output outranks a merely unavailable one)."""
        results = [self.probes[p] for p in probe_ids]
        for res in results:
            if res.ok:
                return res
        return next((r for r in results if r.outcome is Outcome.UNPARSEABLE), results[0])


def facts_from_bundle(bundle: Bundle) -> HostFacts:
    return HostFacts(bundle.host, {p.id: evaluate(p, bundle.results.get(p.id))
                                   for p in PROBES_BY_ID.values()})
