"""A check's metadata (``checks/catalog.yaml``): what it is, why, how to fix it, and how a
result is made from it. Its own module, apart from the registry, so that the judges outside
``evaluate/checks`` (the bench, the sweep, the plan, the watch) use it without importing the
registry that imports them: no import circle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from omni_host.measure.asked import NOTHING, Asked
from omni_host.model import (
    CheckResult,
    Evidence,
    Outcome,
    ProbeResult,
    Remediation,
    Severity,
    Status,
)
from omni_host.resources import data_path, read_yaml

if TYPE_CHECKING:
    from omni_host.evaluate.facts import HostFacts
    from omni_host.evaluate.prior import Prior
    from omni_host.plan.policy import Policy


@dataclass(frozen=True)
class CheckMeta:
    id: str
    title: str
    severity: Severity
    layer: str
    lessons: tuple[str, ...]
    rationale: str
    remediation: Remediation
    references: tuple[str, ...] = ()
    decided: str = ""

    def result(self, status: Status, summary: str, *, expected: Any = None, actual: Any = None,
               evidence: tuple[Evidence, ...] = (), details: dict[str, Any] | None = None,
               remediation: Remediation | None = None) -> CheckResult:
        fix = remediation or self.remediation
        return CheckResult(
            id=self.id, title=self.title, status=status, severity=self.severity,
            lessons=self.lessons, summary=summary, expected=expected, actual=actual,
            evidence=evidence, details=details or {},
            remediation=fix if status in (Status.FAIL, Status.WARN) else None,
        )

    def no_policy(self, var: str, summary: str | None = None, *, expected: Any = None,
                  evidence: tuple[Evidence, ...] = ()) -> CheckResult:
        """Skip: the policy gives this check no expected state (``var`` is unset). The report
        lists such checks per host with how to record the state (never a silent green)."""
        return self.result(Status.SKIP, summary or f"no {var} in the policy", expected=expected,
                           evidence=evidence, details={"no_expected_state": var})

    def not_evaluated(self, probe: ProbeResult, *, expected: Any = None) -> CheckResult:
        """Skip (input unavailable) or error (input unparseable), said once with the reason."""
        if probe.outcome is Outcome.UNPARSEABLE:
            return self.result(Status.ERROR, probe.why_not(), expected=expected,
                               evidence=(Evidence(probe.probe_id, probe.command, (probe.excerpt,)),))
        return self.result(Status.SKIP, f"not evaluated: {probe.why_not()}", expected=expected,
                           evidence=(Evidence(probe.probe_id, probe.command, ()),))



@lru_cache(maxsize=1)
def catalog() -> dict[str, CheckMeta]:
    doc = read_yaml(data_path("checks") / "catalog.yaml")
    metas = {}
    for cid, entry in doc.items():
        fix = entry["remediation"]
        metas[cid] = CheckMeta(cid, entry["title"], Severity(entry["severity"]), entry["layer"],
                               tuple(entry["lessons"]), " ".join(entry["rationale"].split()),
                               Remediation(fix["kind"], fix.get("playbook"), tuple(fix.get("steps", ()))),
                               tuple(entry.get("references", ())),
                               " ".join(str(entry.get("decided", "")).split()))
    return metas


# The registered checks that judge what a run asked for (``check_of_run``), by their command
# (``omni-host checks list`` says it): no audit runs them. Every catalog id has a registered
# function.
ASKED_BY: dict[str, str] = {}


CheckFn = Callable[["HostFacts", "Policy", CheckMeta], CheckResult]
PastCheckFn = Callable[["HostFacts", "Policy", CheckMeta, "Prior"], CheckResult]
RunCheckFn = Callable[["HostFacts", "Policy", CheckMeta, "Prior", Asked], "CheckResult | None"]


class Registered(Protocol):
    """A registered check as the registry calls it: None where the run did not ask for it."""

    def __call__(self, facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
                 asked: Asked = NOTHING, /) -> CheckResult | None: ...


REGISTERED: dict[str, Registered] = {}  # filled as the check modules of evaluate/checks load


def check(check_id: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check function (of the host's facts and policy) under its catalog id."""
    def register(fn: CheckFn) -> CheckFn:
        def registered(facts: HostFacts, policy: Policy, meta: CheckMeta, _prior: Prior,
                       _asked: Asked = NOTHING, /) -> CheckResult:
            return fn(facts, policy, meta)
        REGISTERED[check_id] = registered
        return fn
    return register


def check_with_past(check_id: str) -> Callable[[PastCheckFn], PastCheckFn]:
    """Register a check that also judges against the host's past (``evaluate.prior``: its
    bench baseline, its previous audit's servers, its stored plan)."""
    def register(fn: PastCheckFn) -> PastCheckFn:
        def registered(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
                       _asked: Asked = NOTHING, /) -> CheckResult:
            return fn(facts, policy, meta, prior)
        REGISTERED[check_id] = registered
        return fn
    return register


def check_of_run(check_id: str, command: str) -> Callable[[RunCheckFn], RunCheckFn]:
    """Register a check of what a run asked for (``measure.asked``: a bench, a knob's A/B, a
    split sweep), judged with the host's facts and past; it gives no result where the run did
    not ask for it (an audit)."""
    def register(fn: RunCheckFn) -> RunCheckFn:
        def registered(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior,
                       asked: Asked = NOTHING, /) -> CheckResult | None:
            return fn(facts, policy, meta, prior, asked)
        REGISTERED[check_id] = registered
        ASKED_BY[check_id] = command
        return fn
    return register
