"""What a check may know of a host's past (issue 45): a frozen, pure value built once per host
from its stored audits (``app.past.Past.prior``) and handed to every check with the host's
facts. A check that judges against the past (the served rate against the bench baseline and
the previous audit's servers, the stored placement plan quoted where it speaks, the knob
ledger's measured cost) is judged once, in the registry, instead of a use case patching the
finished report. A run without a store (a bundle judged offline, a recheck) gives ``NO_PRIOR``:
the checks say what they can without it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omni_host.model import Baseline, CheckResult, InferenceServer
from omni_host.outcome import LastBench


@dataclass(frozen=True)
class Prior:
    baseline: Baseline | None = None  # the host's bench baseline
    previous_audit: str | None = None  # the id of its previous stored audit (never a watch)
    # what that audit saw running, by pid
    previous_servers: Mapping[int, InferenceServer] = field(default_factory=dict)
    # check id -> (the stored bench, what its knob's A/B measured on this host)
    ledger: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # the newest stored placement plan: (its audit, the plan's details, the proof's or None)
    plan: tuple[str, dict[str, Any], dict[str, Any] | None] | None = None
    last_bench: LastBench | None = None  # its newest stored bench (the PCIe links under load)
    # what its stored benches reached: the GPUs' share of their ceiling, the CPU's read rate,
    # and where each was measured (the placement plan's rates; app.past.measured_rates)
    rates: Mapping[str, Any] = field(default_factory=dict)

    def with_ledger(self, result: CheckResult) -> CheckResult:
        """A knob check's verdict with what the knob measured here (``bench --knob``), where
        the ledger has an A/B for it: the host's own figure beside the public one."""
        found = self.ledger.get(result.id)
        if found is None:
            return result
        bench, measured = found
        return result.noted(f"measured here (bench {bench}): {measured}", "ledger",
                            {"bench": bench, "measured": measured})


NO_PRIOR = Prior()
