"""What a check may know of a host's past (issue 45): a frozen, pure value built once per host
from its stored audits (``app.past.Past.prior``) and handed to every check with the host's
facts. A check that judges against the past (the served rate against the bench baseline and
the previous audit's servers, the stored placement plan quoted where it speaks, the knob
ledger's measured cost) is judged once, in the registry, instead of a use case patching the
finished report. A run without a store (a bundle judged offline, a recheck) gives ``NO_PRIOR``:
the checks say what they can without it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from omni_host.model import Baseline, CheckResult, InferenceServer


@dataclass(frozen=True)
class Prior:
    baseline: Baseline | None = None  # the host's bench baseline
    previous_audit: str | None = None  # the id of its previous stored audit (never a watch)
    previous_servers: tuple[InferenceServer, ...] = ()  # what that audit saw running
    # check id -> (the stored bench, what its knob's A/B measured on this host)
    ledger: tuple[tuple[str, tuple[str, str]], ...] = ()
    # the newest stored placement plan: (its audit, the plan's details, the proof's or None)
    plan: tuple[str, dict[str, Any], dict[str, Any] | None] | None = None

    def servers_by_pid(self) -> dict[int, InferenceServer]:
        return {s.pid: s for s in self.previous_servers}

    def with_ledger(self, result: CheckResult) -> CheckResult:
        """A knob check's verdict with what the knob measured here (``bench --knob``), where
        the ledger has an A/B for it: the host's own figure beside the public one."""
        found = dict(self.ledger).get(result.id)
        if found is None:
            return result
        bench, measured = found
        return dataclasses.replace(
            result, summary=f"{result.summary}; measured here (bench {bench}): {measured}",
            details={**result.details, "ledger": {"bench": bench, "measured": measured}})


NO_PRIOR = Prior()
