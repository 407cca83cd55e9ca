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
    EXIT_USAGE,
    FORMATS,
    add_target_args,
    add_view_args,
    emit,
    err,
    exit_code,
    extra_vars,
    forks,
    hint_args,
    inventory_path,
    load_inventory_arg,
    plans,
    ssh_options,
    terminal_console,
)

if TYPE_CHECKING:
    from rich.live import Live
    from rich.table import Table

    from omni_host.app.audit import Audited
    from omni_host.plan.hosts import HostPlan
    from omni_host.reports import HostReport


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


class Progress:
    """One line per host while a fleet is audited: a live rich display on a terminal, plain
    lines on stderr otherwise. Silent for a single host."""

    def __init__(self, names: list[str]) -> None:
        self.enabled = len(names) > 1
        self.live: Live | None = None
        self.state = dict.fromkeys(names, "waiting")
        self.finished = 0
        self.lock = threading.Lock()
        if self.enabled and sys.stderr.isatty():
            from rich.live import Live

            self.live = Live(self._table(), console=terminal_console(stderr=True), transient=True,
                             refresh_per_second=8)
            self.live.start()

    def _table(self) -> Table:
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        from rich.text import Text

        from omni_host.safe_text import terminal_safe

        for name, state in self.state.items():  # plain Text: no markup read from a host
            table.add_row(Text(terminal_safe(name)), Text(state))
        return table

    def _set(self, name: str, state: str, line: bool) -> None:
        if not self.enabled:
            return
        from omni_host.safe_text import terminal_safe

        # what a host controls (its name in a dynamic inventory, its last error line) reaches
        # the operator's terminal escaped: an OSC or ESC c retitled or cleared it
        state = terminal_safe(state)
        with self.lock:
            self.state[name] = state
            if self.live is not None:
                self.live.update(self._table())
            elif line:
                self.finished += 1
                sys.stderr.write(f"[{self.finished}/{len(self.state)}] {terminal_safe(name)}: "
                                 f"{state}\n")

    def start(self, plan: HostPlan) -> None:
        self._set(plan.name, "auditing...", line=False)

    def done(self, plan: HostPlan, host: HostReport) -> None:
        if not host.reachable:  # the reason: once, in the run's own line at the end
            state = f"unreachable ({host.duration_s:.1f}s)"
        else:
            counts = host.counts()
            state = f"done ({host.duration_s:.1f}s): " + ", ".join(
                f"{n} {k}" for k, n in counts.items() if n)
        self._set(plan.name, state, line=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def cmd_audit(args: argparse.Namespace) -> int:
    inventory = load_inventory_arg(args)
    name = str(args.inventory) if args.inventory else None
    if args.bundle:
        from omni_host.app.audit import audit_files

        done = audit_files(args.bundle, inventory, name, args.waivers)
    else:
        from omni_host.app import live

        done = live.run(live.LiveAudit(
            inventory, name, args.pattern, args.limit, extra_vars(args), ssh_options(args),
            forks=args.forks, probe_timeout_s=args.probe_timeout,
            host_timeout_s=args.host_timeout, processes=args.processes, waivers=args.waivers,
            store_root=args.report_dir, store=not args.no_store, hint_args=hint_args(args)),
            lambda plans: Progress([p.name for p in plans]))
    return _told(args, done)


def _recorded_here() -> bool:
    """Whether the working directory holds what `omni-host init` records for this machine
    (hosts.ini, host_vars/localhost.yml): without -i it is never read (one expected state for
    every command run without -i, wherever it is run), and the audit says so."""
    from pathlib import Path

    return Path("hosts.ini").is_file() and Path("host_vars", "localhost.yml").is_file()


def _told(args: argparse.Namespace, done: Audited) -> int:
    """What the operator is told of a finished audit: unreachable and unconfigured hosts and
    waiver notes on stderr, the report in its format, where it was stored; the exit code."""
    from omni_host.app.stored import history_at
    from omni_host.report.text import init_command, plain, target

    run, hosts = done.run, done.hosts
    for host in run.report.unreachable:
        err(f"{host.host}: unreachable: {host.error}")
    for host in run.report.hosts:
        if host.unconfigured:
            err(f"{host.host}: no expected state: the inventory sets no omni_* variable for it "
                f"(record one with {plain(init_command(host.host, target(run.report)))})")
    for note in run.waiver_notes:
        err(f"waiver: {note}")
    if not run.report.inventory and _recorded_here():
        from omni_host.invocation import program

        err("judged against the built-in reference box, not the state omni-host init recorded "
            f"in this directory's hosts.ini: {program()} audit -i hosts.ini localhost judges "
            "against that")
    emit(run.report, args.format, args.output,
         lambda: run.history or history_at(args.report_dir),
         args.verbosity)
    if done.stored is not None:
        err(f"{'partial (interrupted) ' if hosts.interrupted else ''}report stored in {done.stored}")
    if done.unstored is not None:
        err(f"{done.unstored}: the verdict above is not kept")
        return EXIT_USAGE
    return EXIT_TERMINATED if hosts.terminated else \
        EXIT_INTERRUPTED if hosts.interrupted else exit_code(run.report)


def cmd_collect(args: argparse.Namespace) -> int:
    from omni_host.app.collect import collect_fleet, write_bundles
    collected = collect_fleet(plans(args), ssh_options(args), forks=args.forks,
                              probe_timeout_s=args.probe_timeout,
                              host_timeout_s=args.host_timeout, engine=args.engine,
                              inventory=inventory_path(args) if args.engine == "ansible" else None,
                              extra=extra_vars(args))
    for message in collected.failed:
        err(message)
    for line in write_bundles(collected, args.out):
        err(line)
    return EXIT_UNREACHABLE if collected.failed else EXIT_OK
