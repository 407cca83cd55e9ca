"""The ``report`` and ``schedule`` commands, and the output of every audit in any format (part
of the CLI: these print)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_host.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    FORMATS,
    add_inventory_args,
    add_view_args,
    emit,
    err,
    out,
    plans,
    write_output,
)

if TYPE_CHECKING:
    from omni_host.app.schedule import ScheduleTarget
    from omni_host.app.stored import History


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser("report", help="stored audits: list, show, diff, recheck; the "
                                           "JSON Schema of report.json")
    rsub = report.add_subparsers(dest="report_command", required=True)
    for name, helptext in (("list", "stored audits, newest first"),
                           ("show", "one stored audit in any format"),
                           ("diff", "what changed between two audits (default: each host's "
                                    "latest against its previous)"),
                           ("recheck", "re-evaluate a stored audit's bundles with today's checks"),
                           ("schema", "the JSON Schema of report.json (and of --format json)")):
        p = rsub.add_parser(name, help=helptext)
        if name == "schema":
            continue
        p.add_argument("--report-dir", type=Path, default=None)
        if name in ("show", "recheck"):
            p.add_argument("ref", nargs="?", default="latest", help="audit id (or prefix) or latest")
        if name == "diff":
            p.add_argument("a", nargs="?", default=None, help="older audit (id or prefix)")
            p.add_argument("b", nargs="?", default=None, help="newer audit (id or prefix)")
        if name in ("show", "recheck", "diff"):
            p.add_argument("--format", choices=FORMATS if name != "diff" else ("table", "json"),
                           default="table")
            p.add_argument("--output", type=Path, default=None, help="write to this file")
        if name in ("show", "recheck"):
            add_view_args(p)
        if name == "recheck":
            add_inventory_args(p)  # default: the policy each bundle recorded
            p.add_argument("--waivers", type=Path, default=None,
                           help="waivers file (default: as for audit)")
            p.add_argument("--no-store", action="store_true")
    sched = sub.add_parser("schedule", help="the unattended quarterly audit (systemd or cron)")
    ssub = sched.add_subparsers(dest="schedule_command", required=True)
    for name in ("install", "status", "remove"):
        p = ssub.add_parser(name)
        p.add_argument("--user", action="store_true", help="a systemd user timer")
        p.add_argument("--system", action="store_true", help="a systemd system timer (root)")
        p.add_argument("--cron", action="store_true", help="a cron entry instead of systemd")
        p.add_argument("--root", type=Path, default=Path("/"), help=argparse.SUPPRESS)
        if name == "install":
            p.add_argument("--quarterly", action="store_true", required=True,
                           help="every quarter (the Sentinel cadence of S-013)")
            p.add_argument("--force", action="store_true", help="replace an existing schedule")
            p.add_argument("audit_args", nargs=argparse.REMAINDER,
                           help="after --: arguments for the audit (e.g. -- -i /etc/omni all)")


def _history(args: argparse.Namespace) -> History:
    from omni_host.app.stored import history_at

    history = history_at(args.report_dir)
    for warning in history.warnings:
        err(f"warning: {warning}")
    return history


def cmd_report(args: argparse.Namespace) -> int:
    if args.report_command == "schema":
        from omni_host.report.schema import SCHEMA_FILE

        sys.stdout.write(SCHEMA_FILE.read_text(encoding="utf-8"))
        return EXIT_OK
    history = _history(args)
    if args.report_command == "list":
        if not history.audits:
            out("no stored audit")
        for audit in history.audits:
            report = audit.report
            s = report.summary()
            hosts = ", ".join(h.host for h in report.hosts)
            out(f"{audit.id}  {report.source.value:11} {hosts:30} "
                f"{s['pass']} pass {s['fail']} fail {s['warn']} warn {s['unreachable']} "
                f"unreachable{' INTERRUPTED' if report.interrupted else ''}")
        return EXIT_OK
    if args.report_command == "show":
        emit(history.resolve(args.ref).report, args.format, args.output, lambda: history,
             args.verbosity)
        return EXIT_OK
    if args.report_command == "diff":
        if history.unreadable or not history.audits:  # it printed nothing and exited 0
            from omni_host.app.stored import store_at

            err(f"report diff: {history.unreadable or f'{store_at(args.report_dir)} holds no stored audit'}: "
                "nothing to compare")
            return EXIT_USAGE
        return _diff(args, history)
    return _recheck(args, history)


def _diff(args: argparse.Namespace, history: History) -> int:
    import json

    from omni_host.app.stored import diffs

    found = diffs(history, args.a, args.b)
    text = json.dumps(found, indent=2) + "\n" if args.format == "json" else _diff_text(found)
    write_output(text, args.output)
    return EXIT_OK


def _yaml(value: Any) -> str:
    """A value as the inventory spells it (YAML flow style: null, true, [a, b]), not as
    Python's repr (None, True, ['a', 'b'])."""
    import yaml

    return str(yaml.safe_dump(value, default_flow_style=True, width=10**6)).strip().removesuffix(
        "\n...").strip()


def _diff_text(diffs: list[dict[str, Any]]) -> str:
    lines = []
    for d in diffs:
        if d.get("previous") is None:
            lines.append(f"{d['host']}: {d['note']}")
            continue
        lines.append(f"{d['host']}: {d['previous']} -> {d['latest']}")
        for key, title in (("new_failures", "new failures"), ("new_warnings", "new warnings"),
                           ("fixed", "fixed on the host"),
                           ("still_failing", "still failing"),
                           ("resurrected_engines", "engines worth re-evaluating")):
            if d.get(key):
                lines.append(f"  {title}: {', '.join(d[key])}")
        for var, change in d.get("policy_changed", {}).items():
            lines.append(f"  policy changed: {var}: {_yaml(change['before'])} -> "
                         f"{_yaml(change['after'])}")
        if d.get("expected_state_changed"):
            lines.append("  verdicts that moved with the expected state, not the host (a pass "
                         "here is no fix): " + ", ".join(d["expected_state_changed"]))
        for fact, change in d["changed_facts"].items():
            lines.append(f"  host drifted: {fact}: {change['before']} -> {change['after']}")
        for test, change in d.get("tokens_per_s", {}).items():
            lines.append(f"  tokens/s: {test}: {change['before']:.1f} -> {change['after']:.1f} "
                         f"({change['after'] / change['before'] - 1:+.0%})")
        if d.get("bench_changed"):
            lines.append("  the bench found changed on the host since its baseline: "
                         + "; ".join(d["bench_changed"]))
        for words in d.get("series", ()):
            lines.append(f"  over its history: {words}")
        if d.get("why"):
            lines.append(f"  bench --why proved: {d['why']}")
        if not any(d.get(k) for k in ("new_failures", "new_warnings", "fixed", "still_failing",
                                      "resurrected_engines", "changed_facts",
                                      "policy_changed", "tokens_per_s", "bench_changed",
                                      "series", "why")):
            lines.append("  no change in verdicts, state or policy")
    return "\n".join(lines) + "\n"


def _recheck(args: argparse.Namespace, history: History) -> int:
    """A stored audit judged again, the way an audit is judged: its waivers applied by the one
    ``finish``, its exit code as an audit's."""
    from omni_host.app.audit import recheck_stored
    from omni_host.app.stored import store_at
    from omni_host.cli.common import exit_code, load_inventory_arg

    inventory = load_inventory_arg(args)
    done = recheck_stored(history, args.ref, inventory,
                          str(args.inventory) if args.inventory else None, args.waivers,
                          None if args.no_store else store_at(args.report_dir))
    for note in done.run.waiver_notes:
        err(f"waiver: {note}")
    emit(done.run.report, args.format, args.output, lambda: history, args.verbosity)
    if done.stored is not None:
        err(f"recheck stored in {done.stored}")
    return exit_code(done.run.report)


def _check_scheduled_audit(extra: list[str]) -> None:
    """The audit a schedule would run, resolved now: its arguments parse, its inventory is an
    absolute path (the timer does not run here) and resolves, its hosts' values validate. A
    schedule that could only fail is refused before anything is written."""
    from omni_host.cli.audit import add_parsers
    from omni_host.errors import OmniHostError, UsageError

    parser = argparse.ArgumentParser(prog="omni-host")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    try:
        audit_args = parser.parse_args(["audit", *extra])
    except SystemExit:
        raise UsageError("schedule: the audit arguments after -- are not valid (see above)") \
            from None
    if audit_args.inventory is not None and not audit_args.inventory.is_absolute():
        raise UsageError(f"schedule: -i {audit_args.inventory}: give the absolute path (the "
                         "scheduled audit does not run in this directory)")
    try:
        plans(audit_args)
    except OmniHostError as exc:
        raise UsageError(f"schedule: the audit it would run fails now: {exc}") from None


def _schedule_status(target: ScheduleTarget, kind: str) -> None:
    import datetime as dt

    from omni_host.app import schedule
    from omni_host.app.stored import newest

    installed = [p for p in target.files() if p.exists()]
    if not installed:
        sys.stdout.write(f"no {kind} schedule installed\n")
        return
    sys.stdout.write("installed: " + ", ".join(map(str, installed)) + "\n")
    if kind == "cron":
        logged = schedule.last_log_lines(target.log())
        if logged is None:
            sys.stdout.write(f"last run: none logged yet ({target.log()})\n")
        else:
            at = dt.datetime.fromtimestamp(logged[0]).strftime("%Y-%m-%d %H:%M")
            sys.stdout.write(f"last run: {at}, its log ends: {' | '.join(logged[1])}\n")
    else:
        user = " --user" if kind == "systemd-user" else ""
        sys.stdout.write(f"last run: journalctl{user} -u {schedule.NAME}.service\n")
    for what, last in (("audit", newest()), ("bench", newest(benches=True))):
        if last is None:
            sys.stdout.write(f"last stored {what}: none\n")
            continue
        summary = last.report.summary()
        verdict = ", ".join(f"{summary[k]} {k}" for k in ("fail", "warn", "error")) \
            + f", {summary['unreachable']} unreachable"
        sys.stdout.write(f"last stored {what}: {last.id} ({verdict})\n")
    upcoming = schedule.next_run(dt.datetime.now())
    delay = "" if kind == "cron" else " (plus up to 1 h of random delay)"
    sys.stdout.write(f"next run: {upcoming:%Y-%m-%d %H:%M}{delay}\n")


def cmd_schedule(args: argparse.Namespace) -> int:
    import getpass
    import shutil as sh

    from omni_host.app import schedule

    kind = "cron" if args.cron else schedule.pick_kind(user=args.user, system=args.system)
    target = schedule.ScheduleTarget(kind, args.root)
    if args.schedule_command == "install":
        extra = [a for a in args.audit_args if a != "--"]
        exe = sh.which("omni-host") or str(Path(sys.executable).parent / "omni-host")
        command = schedule.audit_command(exe, extra)
        _check_scheduled_audit(extra)
        paths, ok, message = schedule.install(target, command, force=args.force,
                                              run_as=getpass.getuser())
        if not ok:
            err(f"systemd-analyze verify failed, nothing installed: {message.splitlines()[0]}")
            return EXIT_USAGE
        for p in paths:
            sys.stdout.write(f"wrote {p}\n")
        enable = {"systemd-user": f"systemctl --user enable --now {schedule.NAME}.timer",
                  "systemd-system": f"systemctl enable --now {schedule.NAME}.timer"}.get(kind)
        if enable:
            sys.stdout.write(f"enable it with: {enable}\n")
        else:
            sys.stdout.write(f"its output: {target.log()}; a failing audit is mailed to "
                             f"{getpass.getuser()}\n")
        return EXIT_OK
    if args.schedule_command == "remove":
        removed = schedule.remove(target)
        for p in removed:
            sys.stdout.write(f"removed {p}\n")
        if not removed:
            sys.stdout.write(f"no {kind} schedule installed\n")
        return EXIT_OK
    _schedule_status(target, kind)
    return EXIT_OK
