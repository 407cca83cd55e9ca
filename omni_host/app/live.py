"""The live audit, conducted in one place: targets -> plans -> waivers and the stored history
-> the hosts audited -> ``conclude`` (waivers, Cold Case, last bench, the store).

The one-host fast path: a single SSH host's session is opened first (``session_ahead``), and
only then are the policy validated and the checks, renderers and the store imported: they load
while the host answers. This machine's collection starts as soon as its plan is valid
(``local_ahead``), for the same reason. That is why this module imports, at its top, nothing
but types, and ``run`` imports the rest once the host's work has started
(benchmarks/bench_single_host.py measures the start-up this saves; keep the order)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from omni_host.app.audit import Audited
    from omni_host.collect.ahead import Ahead
    from omni_host.collect.run import Background
    from omni_host.collect.transport.base import SshOptions
    from omni_host.plan.hosts import HostPlan
    from omni_host.plan.inventory import Inventory
    from omni_host.reports import HostReport


@dataclass(frozen=True)
class LiveAudit:
    """What a live audit targets and how: the inventory (None: this machine), the hosts'
    pattern and limit, the run's ``-e`` values, the SSH options and the run's limits."""

    inventory: Inventory | None
    inventory_name: str | None
    pattern: str | None
    limit: str | None
    extra: dict[str, Any] | None
    ssh: SshOptions
    forks: int = 5
    probe_timeout_s: float | None = None
    host_timeout_s: float | None = None
    processes: int | None = None
    waivers: Path | None = None  # None: the default waivers file, where there is one
    store_root: Path | None = None  # the report store (None: the default one)
    store: bool = True
    hint_args: tuple[str, ...] = ()  # the connection options a pasted hint needs


class Observer(Protocol):
    """Progress of a run, host by host (the CLI's live display)."""

    def start(self, plan: HostPlan) -> None: ...

    def done(self, plan: HostPlan, host: HostReport) -> None: ...

    def close(self) -> None: ...


def run(req: LiveAudit, observe: Callable[[list[HostPlan]], Observer]) -> Audited:
    """Audit the targets live and conclude: the report finished, stored unless ``req.store``
    is off (an interrupted run stores what finished, marked partial)."""
    from omni_host.app.ahead import local_ahead, session_ahead

    session = session_ahead(req.inventory, req.pattern, req.ssh, req.limit)
    ahead: Ahead | Background | None = session
    try:
        if session is not None:
            session.wait_started()
        from omni_host.plan.hosts import plan_targets

        plans = plan_targets(req.inventory, req.pattern, req.limit, req.extra)
        if session is not None:
            session.go(plans[0], req.probe_timeout_s)
        else:
            ahead = local_ahead(plans, req.ssh, req.probe_timeout_s)
        from omni_host.app import audit
        from omni_host.app.stored import history_at, store_at

        waivers = audit.read_waivers(req.waivers)
        store_root = store_at(req.store_root)
        history = history_at(store_root)
        if history.unreadable and req.store:  # as the bench does: never kept where others write
            from omni_host.errors import UsageError

            raise UsageError(f"audit refused: {history.unreadable}; its report would be kept "
                             "where another account can change it (--report-dir names another "
                             "store, --no-store keeps none)")
        from omni_host.app.past import past_of, priors

        pasts = {p.name: past_of(history, p.name) for p in plans}  # the store scanned once
    except BaseException:
        if ahead is not None:
            ahead.cancel()
        raise
    observer = observe(plans)
    try:
        hosts = audit.audit_live(plans, req.ssh, forks=req.forks,
                                 probe_timeout_s=req.probe_timeout_s,
                                 host_timeout_s=req.host_timeout_s, on_start=observer.start,
                                 on_done=observer.done, ahead=ahead, processes=req.processes,
                                 priors=priors(pasts))
    finally:
        observer.close()
    return audit.conclude(hosts, inventory=req.inventory_name, waivers=waivers, history=history,
                          store_root=store_root if req.store else None, hint_args=req.hint_args,
                          pasts=pasts)
