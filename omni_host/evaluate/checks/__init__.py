"""The check registry. A check is a pure function of (facts, policy) -> CheckResult, or of
(facts, policy, the host's past) for those that judge against it (``check_with_past``), or
also of what the run asked (``check_of_run``: a bench, a knob's A/B, a split sweep, a watch's
rounds, a plan and its proof), registered under a stable dotted id whose metadata lives in
``checks/catalog.yaml``."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import (
    ASKED_BY,
    REGISTERED,
    CheckFn,
    CheckMeta,
    PastCheckFn,
    Registered,
    catalog,
    check,
)
from omni_host.evaluate.prior import NO_PRIOR, Prior
from omni_host.measure.asked import NOTHING, Asked, RunRefused
from omni_host.model import CheckResult, Status
from omni_host.plan.policy import Policy

__all__ = ["CheckFn", "CheckMeta", "PastCheckFn", "catalog", "check", "registry", "run_checks"]


def registry() -> dict[str, Registered]:
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
        placement,
        runs,
        serve,
        swap,
    )

    unjudged = sorted(set(catalog()) - set(REGISTERED))
    if unjudged:  # a catalog entry nothing judges would be a silent skip in every run
        raise RuntimeError(f"checks/catalog.yaml names {', '.join(unjudged)} but no check is "
                           "registered for it")
    return dict(REGISTERED)


def run_checks(facts: HostFacts, policy: Policy, prior: Prior = NO_PRIOR,
               asked: Asked = NOTHING, *, only_asked: bool = False) -> list[CheckResult]:
    """Every registered check of the catalog, each judged once, with the host's past where it
    asks for it; a knob check's verdict says what its knob measured here (the ledger). The
    checks of what the run asked for come last (none for an audit). Raises RunRefused where
    the bench helper refused to run: nothing was measured, nothing is judged. ``only_asked``:
    the run observed nothing an audit judges (a watch's rounds): only its checks run."""
    metas = catalog()
    fns = registry()
    results = []
    for cid in sorted(metas, key=lambda c: c in ASKED_BY):  # stable: the catalog's order
        if only_asked and cid not in ASKED_BY:
            continue
        fn, meta = fns[cid], metas[cid]  # every catalog id has one (registry)
        try:
            result = fn(facts, policy, meta, prior, asked)
        except RunRefused:
            raise
        except Exception as exc:  # a bug in one check must not lose the host's other results
            result = meta.result(Status.ERROR, f"check crashed: {type(exc).__name__}: {exc}")
        if result is not None:
            results.append(prior.with_ledger(result))
    return results
