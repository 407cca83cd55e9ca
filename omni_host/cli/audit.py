"""The ``audit`` and ``collect`` commands (part of the CLI: these print)."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from omni_host.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_UNREACHABLE,
    FORMATS,
    add_target_args,
    add_view_args,
    emit,
    err,
    exit_code,
    forks,
    inventory_path,
    load_inventory_arg,
    plans,
    plans_of,
    ssh_options,
)

if TYPE_CHECKING:
    from omni_host.app.audit import Hosts
    from omni_host.collect.ahead import Ahead
    from omni_host.collect.transport.base import SshOptions
    from omni_host.plan.inventory import Inventory
    from omni_host.plan.waivers import Waiver
    from omni_host.report.history import History


def add_parsers(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help="audit hosts (live over SSH/locally, or from bundles)")
    add_target_args(audit)
    audit.add_argument("--bundle", type=Path, nargs="+", metavar="PATH",
                       help="audit collected bundles (directories or .tar.gz) instead of hosts")
    audit.add_argument("--format", default="table",
                       choices=FORMATS)
    add_view_args(audit)
    audit.add_argument("--output", type=Path, default=None,
                       help="write the report to this file (atomically) instead of stdout")
    audit.add_argument("--waivers", type=Path, default=None,
                       help="waivers file (default: $OMNI_HOST_WAIVERS, else "
                            "~/.config/omni-host/waivers.yml if it exists)")
    audit.add_argument("--report-dir", type=Path, default=None,
                       help="where audits are stored (default: $XDG_DATA_HOME/omni-host/reports)")
    audit.add_argument("--no-store", action="store_true", help="do not store this audit")
    audit.add_argument("--processes", type=forks, default=None, metavar="N",
                       help="controller processes the hosts are spread over (default: one per "
                            "16 hosts in flight, up to the CPUs: one process is bound to one "
                            "core; beyond one machine, use --engine ansible with collect, or AWX)")

    collect = sub.add_parser("collect", help="collect bundles from hosts without evaluating")
    add_target_args(collect)
    collect.add_argument("--out", type=Path, required=True,
                         help="a directory (one bundle per host) or a .tar.gz file")
    collect.add_argument("--engine", choices=("ssh", "ansible"), default="ssh",
                         help="ssh: omni-host's own connections; ansible: playbooks/collect.yml "
                              "with Ansible's forks (large fleets, AWX)")


def session_ahead(inv: Inventory | None, pattern: str | None, ssh: SshOptions,
                  limit: str | None = None) -> Ahead | None:
    """A one-host SSH audit's session, opened now: paramiko is imported and the handshake
    starts before the policy is validated and the checks are imported (``Ahead``). None for
    a fleet, this machine, or a host whose connection values planning will refuse."""
    if inv is None:
        return None
    from omni_host.collect.ahead import Ahead
    from omni_host.collect.transport.loading import import_ssh
    from omni_host.errors import InventoryError
    from omni_host.plan.connection import connection
    from omni_host.plan.hosts import selected_names

    names = selected_names(inv, pattern or "all", limit)
    if len(names) != 1:
        return None
    host = inv.host(names[0])
    try:
        conn = connection(host.name, host.vars, f"{inv.source}: host {host.name}")
    except InventoryError:
        return None  # planning reports it, as for any host
    if conn.ssh is None:
        return None
    import_ssh(ssh.ssh_config)
    return Ahead(host.name, conn, ssh)


class Progress:
    """One line per host while a fleet is audited: a live rich display on a terminal, plain
    lines on stderr otherwise. Silent for a single host."""

    def __init__(self, names: list[str]) -> None:
        self.enabled = len(names) > 1
        self.live = None
        self.state = dict.fromkeys(names, "waiting")
        self.finished = 0
        self.lock = threading.Lock()
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.live import Live

            self.live = Live(self._table(), console=Console(stderr=True), transient=True,
                             refresh_per_second=8)
            self.live.start()

    def _table(self):  # noqa: ANN202 (a rich renderable)
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        for name, state in self.state.items():
            table.add_row(name, state)
        return table

    def _set(self, name: str, state: str, line: bool) -> None:
        if not self.enabled:
            return
        with self.lock:
            self.state[name] = state
            if self.live is not None:
                self.live.update(self._table())
            elif line:
                self.finished += 1
                sys.stderr.write(f"[{self.finished}/{len(self.state)}] {name}: {state}\n")

    def start(self, plan) -> None:  # noqa: ANN001 (HostPlan)
        self._set(plan.name, "auditing...", line=False)

    def done(self, plan, host) -> None:  # noqa: ANN001 (HostPlan, HostReport)
        if not host.reachable:
            state = f"unreachable ({host.duration_s:.1f}s): {host.error}"
        else:
            counts = host.counts()
            state = f"done ({host.duration_s:.1f}s): " + ", ".join(
                f"{n} {k}" for k, n in counts.items() if n)
        self._set(plan.name, state, line=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def cmd_audit(args: argparse.Namespace) -> int:
    hosts, waivers, history = _audit_bundles(args) if args.bundle else _audit_live(args)
    from omni_host.app import audit
    from omni_host.report.history import load_history
    from omni_host.report.store import default_report_dir
    from omni_host.report.text import init_command

    store_root = args.report_dir or default_report_dir()
    run = audit.finish(hosts, inventory=str(args.inventory) if args.inventory else None,
                       waivers=waivers, history=history)
    for host in run.report.unreachable:
        err(f"{host.host}: unreachable: {host.error}")
    inventory = str(args.inventory) if args.inventory else None
    for host in run.report.hosts:
        if host.unconfigured:
            err(f"{host.host}: no expected state: the inventory sets no omni_* variable for it "
                f"(record one with {init_command(host.host, inventory)})")
    for note in run.waiver_notes:
        err(f"waiver: {note}")
    emit(run.doc, args.format, args.output, lambda: run.history or load_history(store_root),
         args.verbosity)
    code = EXIT_TERMINATED if hosts.terminated else \
        EXIT_INTERRUPTED if hosts.interrupted else exit_code(run.report)
    if not args.no_store and hosts.source == "live":
        path = audit.keep(run, store_root)
        err(f"{'partial (interrupted) ' if hosts.interrupted else ''}report stored in {path}")
    return code


def _audit_bundles(args: argparse.Namespace) -> tuple[Hosts, tuple[Waiver, ...], None]:
    from omni_host.app import audit

    waivers = audit.read_waivers(args.waivers)
    return audit.audit_bundles(args.bundle, load_inventory_arg(args)), waivers, None


def _audit_live(args: argparse.Namespace) -> tuple[Hosts, tuple[Waiver, ...], History]:
    """Hosts audited live; with one SSH host, its session opens first and the rest (the
    policy, the imports of checks and renderers, waivers, the stored history) is done while
    the host answers."""
    ssh = ssh_options(args)
    inv = load_inventory_arg(args)
    ahead = session_ahead(inv, args.pattern, ssh, args.limit)
    try:
        if ahead is not None:
            ahead.wait_started()
        host_plans = plans_of(args, inv)
        if ahead is not None:
            ahead.go(host_plans[0], args.probe_timeout)
        from omni_host.app import audit
        from omni_host.report.history import load_history
        from omni_host.report.store import default_report_dir

        waivers = audit.read_waivers(args.waivers)
        history = load_history(args.report_dir or default_report_dir())
    except BaseException:
        if ahead is not None:
            ahead.cancel()
        raise
    progress = Progress([p.name for p in host_plans])
    try:
        hosts = audit.audit_live(host_plans, ssh, forks=args.forks,
                                 probe_timeout_s=args.probe_timeout,
                                 host_timeout_s=args.host_timeout,
                                 on_start=progress.start, on_done=progress.done,
                                 ahead=ahead, processes=args.processes)
    finally:
        progress.close()
    return hosts, waivers, history


def cmd_collect(args: argparse.Namespace) -> int:
    from omni_host.collect.bundle import Bundle, write_archive
    from omni_host.collect.pool import run_pool
    from omni_host.collect.run import (
        collect_host,
        host_deadline_s,
        import_transports,
        scrubbed,
    )
    from omni_host.errors import TransportError
    from omni_host.plan.hosts import HostPlan

    host_plans = plans(args)
    out: Path = args.out
    tar = out.name.endswith((".tar.gz", ".tgz"))
    ssh = ssh_options(args)

    def one(plan: HostPlan) -> Bundle | str:
        try:
            return scrubbed(collect_host(plan, ssh, args.probe_timeout), plan)
        except TransportError as exc:
            return f"{plan.name}: unreachable: {exc}"

    deadline = host_deadline_s(ssh, args.probe_timeout, args.host_timeout)
    import_transports(host_plans, ssh.ssh_config)
    if args.engine == "ansible":
        bundles, failed = _collect_ansible(args, host_plans)
    else:
        outcomes = run_pool(host_plans, one, forks=args.forks, deadline_s=deadline,
                            late=lambda p, t: f"{p.name}: unreachable: no answer within {deadline:g}s",
                            cancelled=lambda p: f"{p.name}: interrupted").results
        bundles = [o for o in outcomes if not isinstance(o, str)]
        failed = [o for o in outcomes if isinstance(o, str)]
    for message in failed:
        err(message)
    if tar:
        write_archive(bundles, out)
        err(f"{len(bundles)} bundle(s) written to {out}")
    else:
        for bundle in bundles:
            err(f"{bundle.host}: bundle written to {bundle.write_dir(out)}")
    return EXIT_UNREACHABLE if failed else EXIT_OK


def _collect_ansible(args: argparse.Namespace, host_plans: list) -> tuple[list, list[str]]:
    from omni_host.collect.ansible_engine import collect_with_ansible
    from omni_host.errors import UsageError

    if inventory_path(args) is None:
        raise UsageError("--engine ansible needs an inventory (-i)")
    return collect_with_ansible(inventory=args.inventory, plans=host_plans,
                                known_hosts=args.known_hosts, forks=args.forks,
                                probe_timeout_s=args.probe_timeout)


