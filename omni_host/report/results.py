"""Where a host report keeps what a bench, a served rate and a plan measured: the one place
that knows which check holds it and how its details read. The views, the history and the use
cases ask here; none looks a check up by its id on its own. A stored report's details are
JSON a user may have edited: a value of the wrong shape reads as absent, never as an error."""

from __future__ import annotations

from typing import Any

from omni_host.model import CheckResult, HostReport
from omni_host.probes.parsers.bench import rate

PERF = "perf.tokens-per-s"
SERVED = "serve.tokens-per-s"
PLACEMENT = "perf.placement"
PROOF = "perf.placement-proof"
KNOB = "perf.knob"
STABILITY = "serve.stability"


def details_of(host: HostReport, check_id: str) -> dict[str, Any]:
    """The details of a host's result of one check, {} where it has none."""
    found = host.result(check_id)
    return found.details if found is not None else {}


def perf_result(host: HostReport) -> CheckResult | None:
    """A host's tokens/s result (a bench's), None for an audit's."""
    return host.result(PERF)


def bench_tests(host: HostReport) -> dict[str, dict[str, Any]]:
    """A bench's measured tests (name -> mean_ts, cv, samples...), {} for an audit (which
    never runs a benchmark)."""
    tests = details_of(host, PERF).get("tests")
    return {str(n): t for n, t in tests.items() if isinstance(t, dict)} \
        if isinstance(tests, dict) else {}


def served_rates(host: HostReport) -> dict[str, dict[str, Any]]:
    """Each server whose rate was read: its name -> its part of serve.tokens-per-s's details
    (served_ts, and against a bench fraction and bench_ts)."""
    servers = details_of(host, SERVED).get("servers")
    return {str(s["server"]): s for s in servers if isinstance(s, dict)
            and rate(s.get("served_ts")) is not None} if isinstance(servers, list) else {}


def test_rate(test: Any) -> float | None:
    """A stored test's tokens/s as judged (the median after the warm-up repetition; the mean
    in benches stored before that), None where the stored value is not a rate."""
    return rate(test.get("center_ts", test.get("mean_ts"))) if isinstance(test, dict) else None


def bench_figures(details: dict[str, Any]) -> tuple[float | None, float | None]:
    """A bench's generation test (else its first) against the baseline it was judged with and
    against its ceiling, as fractions (None where not known); an audit's LastBench keeps them."""
    given = details.get("tests")
    tests: dict[str, Any] = given if isinstance(given, dict) else {}
    name = next((n for n, t in tests.items() if isinstance(t, dict) and t.get("kind") == "tg"),
                next(iter(tests), None))
    if name is None:
        return None, None
    verdicts = details.get("verdicts")
    verdict = (verdicts.get(name) if isinstance(verdicts, dict) else None) or {}
    center, reference = test_rate(tests[name]), rate(verdict.get("reference_ts"))
    ceilings = details.get("ceiling")
    ceiling = ((ceilings.get(name) if isinstance(ceilings, dict) else None) or {}).get("fraction")
    return (center / reference if center and reference else None), rate(ceiling)
