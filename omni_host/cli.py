"""The command line: the only module that prints, prompts or exits.

Exit codes: 0 nothing failed; 1 a check failed (or could not be evaluated: error); 2 usage,
inventory or report-store error; 3 a host could not be audited (outranks 1).

Heavy imports (paramiko, rich, yaml) happen inside the commands so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from omni_host import __version__

if TYPE_CHECKING:
    from omni_host.report import Report
    from omni_host.transport.ssh import SshOptions

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _forks(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--forks needs a whole number >= 1, got {text!r}")
    return int(text)


def _add_target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("pattern", nargs="?", default=None,
                   help="Ansible host pattern (all, a group, a host; default: all)")
    p.add_argument("-i", "--inventory", type=Path,
                   help="Ansible YAML inventory file or directory (default: this machine with "
                        "the built-in reference policy)")
    p.add_argument("--ssh-config", type=Path, default=Path("~/.ssh/config").expanduser(),
                   help="OpenSSH client config to honour (default: ~/.ssh/config)")
    p.add_argument("--known-hosts", type=Path, default=Path("~/.ssh/known_hosts").expanduser(),
                   help="known_hosts file used to verify host keys (default: ~/.ssh/known_hosts)")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="accept and record the key of a host not yet in known_hosts "
                        "(a changed key is always refused)")
    p.add_argument("--connect-timeout", type=_positive, default=10.0, metavar="S",
                   help="SSH connect/auth timeout in seconds (default: 10)")
    p.add_argument("--probe-timeout", type=_positive, default=None, metavar="S",
                   help="time limit for every probe on the host (default: per probe, 10-30 s)")
    p.add_argument("--forks", type=_forks, default=5, metavar="N",
                   help="hosts audited in parallel (default: 5, as Ansible)")
    p.add_argument("--host-timeout", type=_positive, default=None, metavar="S",
                   help="give up on a host after S seconds in all (default: connect and probe "
                        "limits added up)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="omni-host",
        description="Audit LLM inference hosts against the lessons they were built on.")
    parser.add_argument("--version", action="version", version=f"omni-host {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    audit = sub.add_parser("audit", help="audit hosts (live over SSH/locally, or from bundles)")
    _add_target_args(audit)
    audit.add_argument("--bundle", type=Path, nargs="+", metavar="PATH",
                       help="audit collected bundles (directories or .tar.gz) instead of hosts")
    audit.add_argument("--format", default="table",
                       choices=("table", "json", "markdown", "html", "junit", "prometheus"))
    audit.add_argument("--output", type=Path, default=None,
                       help="write the report to this file (atomically) instead of stdout")
    audit.add_argument("--waivers", type=Path, default=None,
                       help="waivers file (default: $OMNI_HOST_WAIVERS, else "
                            "~/.config/omni-host/waivers.yml if it exists)")
    audit.add_argument("--report-dir", type=Path, default=None,
                       help="where audits are stored (default: $XDG_DATA_HOME/omni-host/reports)")
    audit.add_argument("--no-store", action="store_true", help="do not store this audit")

    collect = sub.add_parser("collect", help="collect bundles from hosts without evaluating")
    _add_target_args(collect)
    collect.add_argument("--out", type=Path, required=True,
                         help="a directory (one bundle per host) or a .tar.gz file")
    collect.add_argument("--engine", choices=("ssh", "ansible"), default="ssh",
                         help="ssh: omni-host's own connections; ansible: playbooks/collect.yml "
                              "with Ansible's forks (large fleets, AWX)")
    checks = sub.add_parser("checks", help="the check catalog: list, explain ID|LESSON, doc")
    csub = checks.add_subparsers(dest="checks_command", required=True)
    csub.add_parser("list", help="every check with severity, layer and lessons")
    explain = csub.add_parser("explain", help="what a check verifies, why, how, and the fix")
    explain.add_argument("term", help="a check id (swap.capacity) or a lesson id (F-010)")
    csub.add_parser("doc", help="print docs/checks.md")
    init = sub.add_parser("init", help="record a known-good host's state as its host_vars")
    _add_target_args(init)
    init.add_argument("--force", action="store_true", help="overwrite existing host_vars")
    payload = sub.add_parser("payload", help="print the collector payload (for "
                             "ansible-playbook playbooks/collect.yml -e omni_payload=FILE)")
    payload.add_argument("--probe-timeout", type=_positive, default=None, metavar="S")
    from omni_host import cli_remediate, cli_report

    cli_remediate.add_parsers(sub)
    cli_report.add_parsers(sub)
    return parser


def _err(message: str) -> None:
    sys.stderr.write(f"omni-host: {message}\n")


def _ssh_options(args: argparse.Namespace) -> SshOptions:
    from omni_host.transport.ssh import SshOptions

    return SshOptions(known_hosts=args.known_hosts, ssh_config=args.ssh_config,
                      accept_new=args.accept_new_host_key, connect_timeout_s=args.connect_timeout)


def _plans(args: argparse.Namespace) -> list:
    from omni_host.audit import local_plan, plan_inventory
    from omni_host.errors import UsageError
    from omni_host.inventory import load_inventory

    if args.inventory is None:
        if args.pattern not in (None, "localhost", "all"):
            raise UsageError(f"host pattern {args.pattern!r} needs an inventory (-i)")
        return [local_plan()]
    inv = load_inventory(args.inventory)
    return plan_inventory(inv, args.pattern or "all", ssh_config=args.ssh_config)


def _bundle_reports(args: argparse.Namespace) -> list:
    from omni_host.audit import evaluate_bundle, local_plan, plan_host
    from omni_host.bundle import read_bundles
    from omni_host.errors import InventoryError
    from omni_host.inventory import load_inventory

    inv = load_inventory(args.inventory) if args.inventory else None
    reports = []
    for path in args.bundle:
        for bundle in read_bundles(path):
            if inv is None:
                policy = local_plan().policy
            elif bundle.host in inv.hosts:
                policy = plan_host(inv.hosts[bundle.host], source=inv.source,
                                   ssh_config=None).policy
            else:
                raise InventoryError(f"{path}: bundle host {bundle.host!r} is not in {inv.source}")
            reports.append(evaluate_bundle(bundle, policy, address=f"bundle {path}"))
    return reports


def exit_code(report: Report) -> int:
    from omni_host.model import Status

    if report.unreachable:
        return EXIT_UNREACHABLE
    bad = (Status.FAIL.value, Status.ERROR.value)
    failed = any(r.effective_status in bad for h in report.hosts for r in h.results)
    return EXIT_FAILED if failed else EXIT_OK


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
    import dataclasses

    from omni_host.audit import audit_many, make_report
    from omni_host.cli_report import emit
    from omni_host.history import cold_case, load_history
    from omni_host.store import default_report_dir, store_report

    started = time.time()
    interrupted = False
    if args.bundle:
        hosts, source = _bundle_reports(args), "bundle"
    else:
        plans = _plans(args)
        progress = Progress([p.name for p in plans])
        try:
            pooled = audit_many(plans, _ssh_options(args), forks=args.forks,
                                probe_timeout_s=args.probe_timeout,
                                host_timeout_s=args.host_timeout,
                                on_start=progress.start, on_done=progress.done)
        finally:
            progress.close()
        hosts, source, interrupted = pooled.results, "live", pooled.interrupted
    store_root = args.report_dir or default_report_dir()
    hosts, notes = _waived(args, hosts)
    history = load_history(store_root) if source == "live" else None
    if history is not None:
        hosts = [dataclasses.replace(h, cold_case=cold_case(history, h.to_dict()))
                 if h.reachable else h for h in hosts]
    report = make_report(hosts, started_at=started, source=source, interrupted=interrupted,
                         inventory=str(args.inventory) if args.inventory else None)
    doc = report.to_dict() | ({"waiver_notes": notes} if notes else {})
    for host in report.unreachable:
        _err(f"{host.host}: unreachable: {host.error}")
    for note in notes:
        _err(f"waiver: {note}")
    emit(doc, args.format, args.output, lambda: history or load_history(store_root))
    code = EXIT_INTERRUPTED if interrupted else exit_code(report)
    if not args.no_store and source == "live":
        path = store_report(report, store_root,
                            extra={"waiver_notes": notes} if notes else None)
        _err(f"{'partial (interrupted) ' if interrupted else ''}report stored in {path}")
    return code


def default_waivers() -> Path | None:
    """$OMNI_HOST_WAIVERS, else $XDG_CONFIG_HOME/omni-host/waivers.yml when it exists. (Not
    beside the inventory: Ansible would read it as an inventory source.)"""
    import os

    if os.environ.get("OMNI_HOST_WAIVERS"):
        return Path(os.environ["OMNI_HOST_WAIVERS"])
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    path = config / "omni-host" / "waivers.yml"
    return path if path.is_file() else None


def _waived(args: argparse.Namespace, hosts: list) -> tuple[list, list[str]]:
    import datetime as dt

    from omni_host.checks import catalog
    from omni_host.waivers import apply_waivers, load_waivers

    path = args.waivers or default_waivers()
    if path is None:
        return hosts, []
    waivers = load_waivers(path, set(catalog()))
    return apply_waivers(hosts, waivers, dt.date.today())


def cmd_collect(args: argparse.Namespace) -> int:
    from omni_host.audit import HostPlan, collect_host, host_deadline_s
    from omni_host.bundle import Bundle, write_archive
    from omni_host.errors import TransportError
    from omni_host.pool import run_pool

    plans = _plans(args)
    out: Path = args.out
    tar = out.name.endswith((".tar.gz", ".tgz"))
    ssh = _ssh_options(args)

    def one(plan: HostPlan) -> Bundle | str:
        try:
            return collect_host(plan, ssh, args.probe_timeout)
        except TransportError as exc:
            return f"{plan.name}: unreachable: {exc}"

    deadline = args.host_timeout or host_deadline_s(ssh, args.probe_timeout)
    if args.engine == "ansible":
        bundles, failed = _collect_ansible(args, plans)
    else:
        outcomes = run_pool(plans, one, forks=args.forks, deadline_s=deadline,
                            late=lambda p, t: f"{p.name}: unreachable: no answer within {deadline:g}s",
                            cancelled=lambda p: f"{p.name}: interrupted").results
        bundles = [o for o in outcomes if not isinstance(o, str)]
        failed = [o for o in outcomes if isinstance(o, str)]
    for message in failed:
        _err(message)
    if tar:
        write_archive(bundles, out)
        _err(f"{len(bundles)} bundle(s) written to {out}")
    else:
        for bundle in bundles:
            _err(f"{bundle.host}: bundle written to {bundle.write_dir(out)}")
    return EXIT_UNREACHABLE if failed else EXIT_OK


def _collect_ansible(args: argparse.Namespace, plans: list) -> tuple[list, list[str]]:
    from omni_host.ansible_engine import collect_with_ansible
    from omni_host.errors import UsageError

    if args.inventory is None:
        raise UsageError("--engine ansible needs an inventory (-i)")
    return collect_with_ansible(inventory=args.inventory, plans=plans,
                                known_hosts=args.known_hosts, forks=args.forks,
                                probe_timeout_s=args.probe_timeout)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from omni_host.cli_catalog import cmd_checks, cmd_init, cmd_payload
    from omni_host.cli_remediate import cmd_bootstrap, cmd_remediate
    from omni_host.cli_report import cmd_report, cmd_schedule
    from omni_host.errors import OmniHostError

    handlers = {"audit": cmd_audit, "collect": cmd_collect, "remediate": cmd_remediate,
                "bootstrap": cmd_bootstrap, "report": cmd_report, "schedule": cmd_schedule,
                "payload": cmd_payload, "checks": cmd_checks, "init": cmd_init}
    try:
        return handlers[args.command](args)
    except OmniHostError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except OSError as exc:
        _err(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
