"""The bench command's run, conducted in one place (issue 45: the audit's treatment): the
store resolved, one host's bench started early (``app.ahead.bench_ahead``: before the heavy
imports and the store's read, which then overlap the host's probes), waivers and the history
read, each host benched, the report stored. This module imports, at its top, nothing but
types: ``run`` imports the rest after the early start (keep the order; benchmarks/
fixed_cost_ab.py measures what it saves)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omni_host.app.audit import AuditRun
    from omni_host.app.bench import BenchHost
    from omni_host.collect.transport.base import SshOptions
    from omni_host.plan.hosts import Targets


@dataclass(frozen=True)
class BenchRequest:
    targets: Targets  # the hosts, resolved by ``run``
    ssh: SshOptions
    record: bool = False  # --baseline
    force: bool = False
    wait_s: float = 0.0  # --wait: for another bench to release the host's bench lock
    sweep: bool = False
    knob: str | None = None  # --knob NAME=VALUE, parsed by ``run``
    pairs: int = 6
    why: bool = False  # --why: each change since the baseline set back in rounds
    waivers: Path | None = None  # None: the default waivers file, where there is one
    store_root: Path | None = None  # None: the default store
    store: bool = True
    inventory: str | None = None
    probe_timeout_s: float | None = None
    hint_args: tuple[str, ...] = ()
    ready: Callable[[], None] | None = None  # what the caller wants done while the host works


@dataclass(frozen=True)
class Benched:
    run: AuditRun
    hosts: list[BenchHost]
    stored: Path | None
    warnings: tuple[str, ...]  # the store's, one line each


def run(req: BenchRequest) -> Benched:
    """Bench the hosts and store the report (unless ``req.store`` is off). Raises UsageError
    where the store is one others can write (no baseline can be found or kept there), where
    the knob is not one, or where the pattern selects no host."""
    from omni_host.app.ahead import bench_ahead
    from omni_host.app.stored import store_at
    from omni_host.plan.knobs import parse_knob

    knob = parse_knob(req.knob) if req.knob is not None else None
    plans = req.targets.plans()
    store_root = store_at(req.store_root)
    started = None if knob is not None or req.why else bench_ahead(
        plans, req.ssh, store_root, sweep=req.sweep, force=req.force,
        waivers_given=req.waivers is not None, probe_timeout_s=req.probe_timeout_s,
        wait_s=req.wait_s)
    import contextlib

    from omni_host.app import audit
    from omni_host.app.bench import bench
    from omni_host.errors import UsageError
    from omni_host.report.history import load_history

    waivers = audit.read_waivers(req.waivers)
    history = load_history(store_root)
    if req.ready is not None:
        req.ready()
    if history.unreadable:  # every bench would call itself the host's first
        if started is not None:  # not foreseen: the run is not kept
            with contextlib.suppress(Exception):
                started.bundle()
        raise UsageError(f"bench refused: {history.unreadable}; no baseline can be found or "
                         "kept there (--report-dir names another store)")
    done, hosts = bench(plans, req.ssh, history, record=req.record, force=req.force,
                        waivers=waivers, inventory=req.inventory,
                        probe_timeout_s=req.probe_timeout_s, sweep=req.sweep,
                        hint_args=req.hint_args, under_way=started, knob=knob,
                        pairs=req.pairs, wait_s=req.wait_s, why=req.why)
    stored = audit.keep(done, store_root) if req.store else None
    return Benched(done, hosts, stored, tuple(history.warnings))
