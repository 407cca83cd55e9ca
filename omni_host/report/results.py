"""Where a host report keeps what a served rate and a plan measured: the one place that knows
which check holds it and how its details read (a bench's outcome is typed: ``HostReport.bench``).
The views, the history and the use cases ask here; none looks a check up by its id on its own.
A stored report's details are JSON a user may have edited: a value of the wrong shape reads as
absent, never as an error."""

from __future__ import annotations

import math
from typing import Any

from omni_host.model import BENCH_CHECK, CheckResult
from omni_host.outcome import rate
from omni_host.reports import HostReport

PERF = BENCH_CHECK
SERVED = "serve.tokens-per-s"
PLACEMENT = "perf.placement"
PROOF = "perf.placement-proof"
KNOB = "perf.knob"
WHY = "perf.why"
STABILITY = "serve.stability"


def details_of(host: HostReport, check_id: str) -> dict[str, Any]:
    """The details of a host's result of one check, {} where it has none."""
    found = host.result(check_id)
    return found.details if found is not None else {}


def perf_result(host: HostReport) -> CheckResult | None:
    """A host's tokens/s result (a bench's), None for an audit's."""
    return host.result(PERF)


def served_rates(host: HostReport) -> dict[str, dict[str, Any]]:
    """Each server whose rate was read: its name -> its part of serve.tokens-per-s's details
    (served_ts, and against a bench fraction and bench_ts)."""
    servers = details_of(host, SERVED).get("servers")
    return {str(s["server"]): s for s in servers if isinstance(s, dict)
            and rate(s.get("served_ts")) is not None} if isinstance(servers, list) else {}


def why_effects(host: HostReport) -> dict[str, dict[str, dict[str, Any]]]:
    """A ``bench --why``'s figures: test -> arm (``<factor> back``, ``all back``) -> its
    effect, uncertainty and whether it is measurable; {} where there are none."""
    effects = details_of(host, WHY).get("effects")
    if not isinstance(effects, dict):
        return {}
    return {str(test): {str(arm): e for arm, e in arms.items() if isinstance(e, dict)
                        and _fraction(e.get("effect")) and _fraction(e.get("uncertainty", 0.0))}
            for test, arms in effects.items() if isinstance(arms, dict)}


def _fraction(value: Any) -> bool:
    """A finite number (an edited file's string, boolean or NaN is none)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)
