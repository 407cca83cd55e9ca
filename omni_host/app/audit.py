"""The audit use case: hosts (live, from bundles, or a stored audit's bundles again) -> host
reports -> ``conclude``: waivers, Cold Case, last bench -> one report, stored when asked. Every
run that ends in a report (audit, bench, recheck, remediation, bootstrap) passes through
``finish``; ``app.live.run`` conducts a live audit, ``audit_files`` and ``recheck_stored`` the
others. The CLI calls one of them and prints what it returns."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from omni_host.app.past import Past, past_of
from omni_host.app.spread import audit_spread, cpus, processes_for
from omni_host.collect.ahead import Ahead
from omni_host.collect.bundle import read_bundles
from omni_host.collect.run import Background
from omni_host.collect.transport.base import SshOptions
from omni_host.errors import InventoryError, StoreError
from omni_host.evaluate.audit import audit_many, evaluate_bundle
from omni_host.evaluate.checks import catalog
from omni_host.evaluate.prior import Prior
from omni_host.model import Bundle, Source
from omni_host.plan.hosts import HostPlan, local_plan, plan_host
from omni_host.plan.inventory import Inventory
from omni_host.plan.policy import ExpectedState, policy_from_vars
from omni_host.plan.waivers import Waiver, apply_waivers, default_waivers, load_waivers
from omni_host.report.history import History, cold_case
from omni_host.report.store import store_report
from omni_host.reports import HostReport, Report, make_report, scrub_host


@dataclass(frozen=True)
class Hosts:
    """Host reports of one run, and how they were obtained."""

    reports: list[HostReport]
    source: Source
    started_at: float
    interrupted: bool = False
    terminated: bool = False  # the interruption was SIGTERM, not Ctrl-C


@dataclass(frozen=True)
class AuditRun:
    report: Report  # with the waiver notes
    history: History | None  # loaded for live audits (Cold Case), else None

    @property
    def waiver_notes(self) -> tuple[str, ...]:
        return self.report.waiver_notes


def audit_live(plans: list[HostPlan], ssh: SshOptions, *, forks: int,
               probe_timeout_s: float | None, host_timeout_s: float | None,
               on_start: Callable[[HostPlan], None] | None = None,
               on_done: Callable[[HostPlan, HostReport], None] | None = None,
               ahead: Ahead | Background | None = None, processes: int | None = None,
               priors: Mapping[str, Prior] | None = None) -> Hosts:
    """Audit hosts live, each judged against its past (``priors``, by name): one thread pool,
    or (``processes`` > 1; by default one process per 16 hosts in flight, up to the CPUs) a
    pool in each of several processes."""
    started = time.time()
    if processes is None:
        processes = processes_for(len(plans), forks, cpus())
    if processes > 1 and ahead is None:
        pooled = audit_spread(plans, ssh, forks=forks, processes=processes,
                              probe_timeout_s=probe_timeout_s, host_timeout_s=host_timeout_s,
                              on_start=on_start, on_done=on_done, priors=priors)
    else:
        pooled = audit_many(plans, ssh, forks=forks, probe_timeout_s=probe_timeout_s,
                            host_timeout_s=host_timeout_s, on_start=on_start, on_done=on_done,
                            ahead=ahead, priors=priors)
    return Hosts(list(pooled.results), Source.LIVE, started, pooled.interrupted,
                 pooled.terminated)


def judge_plan(bundle: Bundle, inventory: Inventory | None, origin: str) -> HostPlan:
    """The expected state to judge a bundle under: the inventory's (when one is given), else
    the one the bundle recorded when it was collected, else (older bundles) the built-in
    reference policy. The report records which."""
    if inventory is not None:
        if bundle.host not in inventory:
            raise InventoryError(f"{origin}: bundle host {bundle.host!r} is not in "
                                 f"{inventory.source}")
        host = inventory.host(bundle.host)
        return plan_host(host.name, host.vars, origin=inventory.source, origins=host.origins)
    recorded = ExpectedState.from_dict(bundle.policy)
    if recorded is None:
        return local_plan()
    return HostPlan(bundle.host, policy_from_vars(recorded.values, f"{origin}: recorded policy"),
                    False, None, expected=recorded)


def audit_bundles(paths: list[Path], inventory: Inventory | None) -> Hosts:
    started = time.time()
    reports = []
    for path in paths:
        for bundle in read_bundles(path):
            plan = judge_plan(bundle, inventory, str(path))
            reports.append(scrub_host(evaluate_bundle(
                bundle, plan.policy, address=f"bundle {path}", expected=plan.expected),
                plan.secrets))
    return Hosts(reports, Source.BUNDLE, started)


def recheck(audit_dir: Path, audit_id: str, inventory: Inventory | None) -> Hosts:
    """A stored audit's bundles judged again with today's checks: under the inventory's
    policy when one is given, else under the policy each bundle recorded."""
    started = time.time()
    bundles_dir = audit_dir / "bundles"
    reports = []
    for bundle in read_bundles(bundles_dir) if bundles_dir.is_dir() else []:
        plan = judge_plan(bundle, inventory, str(bundles_dir))
        reports.append(scrub_host(evaluate_bundle(
            bundle, plan.policy, address=f"recheck of {audit_id}", expected=plan.expected),
            plan.secrets))
    return Hosts(reports, Source.RECHECK, started)


def read_waivers(path: Path | None) -> tuple[Waiver, ...]:
    """The waivers file given, or the default one; read before any host is audited, so a
    broken file costs a second, not a fleet's audit."""
    path = path or default_waivers()
    return () if path is None else load_waivers(path, set(catalog()))


def finish(hosts: Hosts, *, inventory: str | None, waivers: tuple[Waiver, ...],
           history: History | None, hint_args: tuple[str, ...] = (),
           pasts: dict[str, Past] | None = None) -> AuditRun:
    """Waivers, then the Cold Case layer and the last bench from the past of each reachable
    host (read once from the store, ``history``, given for live audits; ``pasts``: those the
    run read already, and judged its checks against); then the report."""
    pasts = {h.host: (pasts or {}).get(h.host) or past_of(history, h.host)
             for h in hosts.reports if history is not None and h.reachable}
    reports, notes = apply_waivers(hosts.reports, waivers, dt.date.today()) if waivers \
        else (hosts.reports, [])
    reports = [dataclasses.replace(h, cold_case=cold_case(pasts[h.host].entries, h),
                                   last_bench=pasts[h.host].last_bench
                                   if hosts.source is not Source.BENCH else None)
               if h.host in pasts else h for h in reports]
    report = make_report(reports, started_at=hosts.started_at, source=hosts.source,
                         interrupted=hosts.interrupted, inventory=inventory, hint_args=hint_args)
    return AuditRun(dataclasses.replace(report, waiver_notes=tuple(notes)), history)


@dataclass(frozen=True)
class Audited:
    """A finished run: its report, how its hosts were obtained, where it was stored (None:
    not stored)."""

    run: AuditRun
    hosts: Hosts
    stored: Path | None
    unstored: str | None = None  # why it could not be stored: the verdict is still told


def conclude(hosts: Hosts, *, inventory: str | None, waivers: tuple[Waiver, ...],
             history: History | None, store_root: Path | None, rechecked: str | None = None,
             hint_args: tuple[str, ...] = (), pasts: dict[str, Past] | None = None) -> Audited:
    """``finish``, then ``keep`` where ``store_root`` is given. A store that cannot be written
    costs the run its record, never its verdict (printed and written to --output all the same)."""
    run = finish(hosts, inventory=inventory, waivers=waivers, history=history,
                 hint_args=hint_args, pasts=pasts)
    if rechecked is not None:
        run = dataclasses.replace(run, report=dataclasses.replace(run.report, rechecked=rechecked))
    if store_root is None:
        return Audited(run, hosts, None)
    try:
        return Audited(run, hosts, keep(run, store_root))
    except StoreError as exc:
        return Audited(run, hosts, None, str(exc))


def audit_files(paths: list[Path], inventory: Inventory | None, inventory_name: str | None,
                waivers: Path | None) -> Audited:
    """Collected bundles judged (never stored: the store keeps what was audited live)."""
    chosen = read_waivers(waivers)
    return conclude(audit_bundles(paths, inventory), inventory=inventory_name, waivers=chosen,
                    history=None, store_root=None)


def recheck_stored(history: History, ref: str, inventory: Inventory | None,
                   inventory_name: str | None, waivers: Path | None,
                   store_root: Path | None) -> Audited:
    """A stored audit's bundles judged again with today's checks and waivers, the way an
    audit is judged; stored (as a recheck of it) where ``store_root`` is given."""
    audit = history.resolve(ref)
    chosen = read_waivers(waivers)
    hosts = recheck(audit.path, audit.id, inventory)
    return conclude(hosts, inventory=inventory_name, waivers=chosen, history=None,
                    store_root=store_root, rechecked=audit.id)


def keep(run: AuditRun, store_root: Path, attach: dict[str, Path] | None = None) -> Path:
    """Store a run's report and bundles (and ``attach``: name -> directory kept beside them,
    a remediation's Ansible artifacts); returns the audit's directory."""
    return store_report(run.report, store_root, attach=attach)
