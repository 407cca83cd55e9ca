"""The audit flow: targets -> collect (one round trip) -> facts -> checks -> host reports.

Collecting and evaluating are separate: a live audit evaluates the very bundle it collected,
through the same ``evaluate_bundle`` an offline ``--bundle`` audit uses, so both give the same
verdicts. One host's failure is that host's result, never the end of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from omni_host.collect.ahead import Ahead
from omni_host.collect.pool import PoolResult, run_pool
from omni_host.collect.run import Background, collect_host, host_deadline_s, import_transports
from omni_host.collect.transport.base import SshOptions
from omni_host.errors import TransportError
from omni_host.evaluate.checks import run_checks
from omni_host.evaluate.facts import HostFacts, facts_from_bundle
from omni_host.evaluate.observed import observed_vars
from omni_host.evaluate.prior import NO_PRIOR, Prior
from omni_host.evaluate.sentinel import fact_summary, strategic
from omni_host.measure.asked import NOTHING, Asked
from omni_host.model import Bundle, CheckResult, ProbeNote, Status
from omni_host.plan.hosts import HostPlan
from omni_host.plan.policy import ExpectedState, Policy
from omni_host.probes.catalog import PROBES_BY_ID
from omni_host.reports import HostReport, PolicyRecord, scrub_host


def evaluate_bundle(bundle: Bundle, policy: Policy, *, address: str | None = None,
                    duration_s: float = 0.0, expected: ExpectedState | None = None,
                    prior: Prior = NO_PRIOR, asked: Asked = NOTHING) -> HostReport:
    """A host report of ``bundle`` judged under ``policy``, against the host's ``prior`` and
    for what the run ``asked`` (a bench, an A/B, a sweep: its verdict is one of the checks);
    ``expected`` (the values and origins the policy came from) is recorded in the report,
    else the bundle's own record. Raises RunRefused where the bench helper refused to run."""
    facts = facts_from_bundle(bundle, policy, measured=asked.measures)
    results = tuple(run_checks(facts, policy, prior, asked))
    record = expected.to_dict() if expected is not None else bundle.policy
    if record and record.get("origins") and all(
            str(o).startswith("default: ") for o in record["origins"].values()):
        results = tuple(map(_not_on_defaults, results))
    # what the audit's probes observed (a run's measurement is its check's, not a probe note)
    probes = {pid: ProbeNote(p.outcome, p.reason) for pid, p in facts.probes.items()
              if pid in PROBES_BY_ID}
    summary = fact_summary(facts, policy)
    policy_record = PolicyRecord(dict(record["values"]), dict(record["origins"])) if record else None
    return HostReport(bundle.host, address, bundle.transport, True, None, duration_s, results,
                      bundle, probes, summary, strategic(summary), policy=policy_record,
                      collected_at=bundle.collected_at,
                      recordable=recordable(facts, policy, results))


# Variables that say how a check looks, not what the host should be: a check that reads only
# these (gpu.xid's window) is judged on a host without expected state too.
HOW_NOT_WHAT = frozenset({"omni_xid_window_h", "omni_swap_max_used_pct"})


def _not_on_defaults(result: CheckResult) -> CheckResult:
    """A host whose inventory sets no omni_* variable has no expected state: a check that
    reads one is not judged on the role's defaults alone (it failed the default packages and
    exited 1, right after saying the host had no expected state; exit 4 means exit 4). What
    it would have said stays in its summary; a check that reads no variable (a GPU fault) is
    judged as ever."""
    from dataclasses import replace

    from omni_host.plan.policy import check_readers

    reads = sorted(var for var, checks in check_readers().items()
                   if result.id in checks and var not in HOW_NOT_WHAT)
    if not reads or result.status is Status.SKIP:
        return result
    return replace(result, status=Status.SKIP, remediation=None,
                   summary=f"not judged: no expected state (the inventory sets no omni_* variable "
                           f"for this host); on the role's defaults alone: "
                           f"{result.status.value}: {result.summary}",
                   details={**result.details, "no_expected_state": reads[0],
                            "on_defaults": result.status.value})


def evaluate_watch(plan: HostPlan, asked: Asked, duration_s: float,
                   prior: Prior = NO_PRIOR) -> HostReport:
    """A stability watch's host report: its rounds judged by the registry's serve.stability,
    and nothing an audit judges (a watch collects no facts of the host)."""
    results = tuple(run_checks(HostFacts(plan.name, {}), plan.policy, prior, asked,
                               only_asked=True))
    return HostReport(plan.name, plan.address, plan.transport, True, None, duration_s, results)


def recordable(facts: HostFacts, policy: Policy,
               results: tuple[CheckResult, ...]) -> tuple[str, ...]:
    """What ``init`` would record now that the host's own inventory leaves unset: a variable
    some check skipped for want of, which this audit observed (an unobserved fact is never
    recorded, so its hint would loop: init, audit, "record it", init "already records")."""
    unset = {r.details["no_expected_state"] for r in results
             if r.status is Status.SKIP and r.details.get("no_expected_state")}
    return tuple(sorted(set(observed_vars(facts, policy)) & unset))


def audit_host(plan: HostPlan, ssh: SshOptions, probe_timeout_s: float | None = None,
               ahead: Ahead | Background | None = None, prior: Prior = NO_PRIOR) -> HostReport:
    """One host's audit, judged against its ``prior``; ``ahead``: its collection, already
    under way."""
    start = time.monotonic()
    try:
        bundle = ahead.bundle() if ahead is not None else collect_host(plan, ssh, probe_timeout_s)
    except TransportError as exc:
        return unreachable(plan, str(exc), time.monotonic() - start)
    except Exception as exc:  # a bug must cost this host its audit, not the fleet its run
        return unreachable(plan, f"internal error while collecting: {type(exc).__name__}: {exc}",
                       time.monotonic() - start)
    # Parsers and checks are each contained (a crash is that probe's or check's error), so
    # the collected evidence is always judged and kept.
    report = evaluate_bundle(bundle, plan.policy, address=plan.address,
                             duration_s=time.monotonic() - start, expected=plan.expected,
                             prior=prior)
    return scrub_host(report, plan.secrets)


def unreachable(plan: HostPlan, error: str, elapsed: float = 0.0) -> HostReport:
    """The one report of a host that could not be audited: its name, address, why."""
    return HostReport(plan.name, plan.address, plan.transport, False, error, elapsed)


def audit_many(plans: list[HostPlan], ssh: SshOptions, *, forks: int,
               probe_timeout_s: float | None = None, host_timeout_s: float | None = None,
               on_start: Callable[[HostPlan], None] | None = None,
               on_done: Callable[[HostPlan, HostReport], None] | None = None,
               ahead: Ahead | Background | None = None,
               priors: Mapping[str, Prior] | None = None) -> PoolResult[HostReport]:
    """Audit hosts in a bounded pool; a host past its deadline is reported unreachable with
    the reason, and Ctrl-C returns what finished (the rest marked interrupted). ``ahead``: one
    host's collection already under way (see ``Ahead``); ``priors``: each host's past, by
    name (none: judged without one)."""
    deadline = host_deadline_s(ssh, probe_timeout_s, host_timeout_s)
    import_transports(plans, ssh.ssh_config)

    def one(plan: HostPlan) -> HostReport:
        mine = ahead if ahead is not None and ahead.plan is plan else None
        return audit_host(plan, ssh, probe_timeout_s, mine, (priors or {}).get(plan.name, NO_PRIOR))

    return run_pool(
        plans, one, forks=forks, deadline_s=deadline,
        late=lambda p, t: unreachable(p, f"no answer within the host deadline of {deadline:g}s", t),
        cancelled=lambda p: unreachable(p, "interrupted before this host finished", 0.0),
        on_start=on_start, on_done=on_done)
