"""The check registry. A check is a pure function of (facts, policy) -> CheckResult,
registered under a stable dotted id whose metadata lives in ``checks/catalog.yaml``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from omni_host.evaluate.facts import HostFacts
from omni_host.model import (
    CheckResult,
    Evidence,
    Outcome,
    ProbeResult,
    Remediation,
    Severity,
    Status,
)
from omni_host.plan.policy import Policy
from omni_host.resources import data_path, read_yaml


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


CheckFn = Callable[[HostFacts, Policy, CheckMeta], CheckResult]
_REGISTRY: dict[str, CheckFn] = {}


def check(check_id: str) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        _REGISTRY[check_id] = fn
        return fn
    return register


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


def registry() -> dict[str, CheckFn]:
    from omni_host.evaluate.checks import (  # noqa: F401 (registration)
        build,
        containers,
        docker,
        gpu,
        gpu_faults,
        host,
        knobs,
        memory,
        models,
        numa,
        serve,
        swap,
    )

    return dict(_REGISTRY)


def run_checks(facts: HostFacts, policy: Policy) -> list[CheckResult]:
    metas = catalog()
    fns = registry()
    results = []
    for cid, meta in metas.items():
        fn = fns.get(cid)
        if fn is None:
            continue
        try:
            results.append(fn(facts, policy, meta))
        except Exception as exc:  # a bug in one check must not lose the host's other results
            results.append(meta.result(Status.ERROR, f"check crashed: {type(exc).__name__}: {exc}"))
    return results
