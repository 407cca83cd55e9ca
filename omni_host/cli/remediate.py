"""The ``remediate`` and ``bootstrap`` commands (part of the CLI: they print and prompt).

Preview first, always: every playbook runs in check mode with diffs and the changes are shown
per host and task. ``--apply`` then asks for confirmation on a terminal (``--yes`` skips it and
is required without one), runs for real, re-audits the touched hosts and stores the outcome.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from omni_host.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    add_target_args,
    emit,
    err,
    exit_code,
    inventory_path,
    out,
    plans,
    ssh_options,
)
from omni_host.errors import PlayCanceled

if TYPE_CHECKING:
    from omni_host.app.remediate import Runs, Settings
    from omni_host.collect.runner import TaskOutcome
    from omni_host.plan.hosts import HostPlan
    from omni_host.remediate.flow import Step


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rem = sub.add_parser("remediate", help="fix failed findings with Ansible (preview first)")
    add_target_args(rem)
    rem.add_argument("--check", dest="only", action="append", default=[], metavar="ID",
                     help="only this check id (repeatable); a waived finding is fixed only "
                          "when named here")
    rem.add_argument("--waivers", type=Path, default=None,
                     help="waivers file (default: as for audit): waived findings are not fixed")
    _add_apply_args(rem)
    boot = sub.add_parser("bootstrap", help="bring a fresh host to its expected state, then audit")
    add_target_args(boot)
    _add_apply_args(boot)


def _add_apply_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--apply", action="store_true", help="make the changes (default: preview only)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--allow-reboot", action="store_true",
                   help="allow playbooks that need a reboot (NVIDIA driver); never reboots itself")
    p.add_argument("--report-dir", type=Path, default=None, help="the report store")


def _task_printer(secrets: tuple[str, ...]) -> Callable[[TaskOutcome], None]:
    """What a play says of each task, shown live; the clear text of vaulted values that the
    play was given (--vault-password-file) is scrubbed from it, as from every report."""
    from omni_host.model import scrub

    def show(task: TaskOutcome) -> None:
        if task.status in ("changed", "failed", "unreachable"):
            out(scrub(f"    {task.host}: {task.status.upper()}: {task.task}"
                      + (f": {task.message}" if task.message else ""), secrets))
            for line in task.diff.splitlines():
                out(scrub(f"        {line}", secrets))
    return show


def _confirm(args: argparse.Namespace) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        err("refusing to apply without a terminal to confirm on: add --yes")
        return False
    answer = input("Apply these changes? [y/N] ").strip().lower()
    return answer in ("y", "yes")


def _inventory(args: argparse.Namespace) -> Path:
    """``-i`` (or Ansible's configured inventory); without one, for this machine (as
    ``omni-host audit`` without one judges it): an inventory of localhost over Ansible's local
    connection holding the built-in reference policy, so that the playbooks read the expected
    state the audit judged against. Made once per run, private, removed at exit."""
    from omni_host.errors import UsageError

    path = inventory_path(args)
    if path is not None:
        return path
    if args.pattern not in (None, "localhost") or args.limit not in (None, "localhost"):
        raise UsageError(f"{args.command} needs an inventory (-i) for {args.pattern!r}: the "
                         "playbooks read it too (without one, only this machine: localhost)")
    args.inventory, args.pattern, args.own_inventory = _local_inventory(), "localhost", True
    return Path(args.inventory)


def _local_inventory() -> Path:
    import atexit
    import shutil
    import tempfile

    import yaml

    from omni_host.plan.policy import reference_vars

    root = Path(tempfile.mkdtemp(prefix="omni-host-local-"))
    atexit.register(shutil.rmtree, root, True)
    (root / "group_vars").mkdir()
    # the controller's own Python for modules on localhost, as Ansible's docs advise for the
    # local connection (a discovered pyenv shim failed here: "python3.13: command not found")
    (root / "hosts.ini").write_text("localhost ansible_connection=local "
                                    "ansible_python_interpreter='{{ ansible_playbook_python }}'\n")
    (root / "group_vars" / "all.yml").write_text(
        "# the built-in reference policy, as omni-host audit judges this machine without -i\n"
        + yaml.safe_dump(reference_vars(), sort_keys=False))
    return root


def _vault_files(args: argparse.Namespace) -> tuple[Path, ...]:
    """The vault password files the playbooks need: --vault-password-file, else
    ANSIBLE_VAULT_PASSWORD_FILE (which ansible-playbook reads by itself). A password typed at
    the prompt cannot be handed to ansible-playbook through ansible-runner."""
    from omni_host.errors import UsageError

    if args.ask_vault_pass:
        raise UsageError("remediate and bootstrap need the vault password in a file: use "
                         "--vault-password-file (or ANSIBLE_VAULT_PASSWORD_FILE)")
    return tuple(args.vault_password_file)


def _settings(args: argparse.Namespace, store_root: Path, host_plans: list[HostPlan]) -> Settings:
    from omni_host.app.audit import read_waivers
    from omni_host.app.remediate import Settings
    from omni_host.cli.common import hint_args

    given = None if getattr(args, "own_inventory", False) else inventory_path(args)
    return Settings(_inventory(args), args.known_hosts, args.allow_reboot, _vault_files(args),
                    store_root, tuple(s for p in host_plans for s in p.secrets),
                    read_waivers(getattr(args, "waivers", None)),
                    str(given) if given is not None else None, hint_args(args))


def _preview_and_apply(args: argparse.Namespace, runs: Runs, before_apply: Callable[[], None] = lambda: None,
                       ) -> tuple[list[Step] | None, int]:
    """The preview shown; on --apply and confirmation, ``before_apply`` (the state kept),
    then the hosts whose preview passed are applied to. Returns (apply steps or None when
    nothing was applied, exit code)."""
    from omni_host.model import scrub

    secrets = runs.settings.secrets
    show_task = _task_printer(secrets)
    out("Preview (ansible check mode, nothing is changed):")
    preview, good = runs.preview(show_task)
    for step in preview:
        for host in step.run.hosts:
            failure = step.outcome.failure(host)
            would = len(step.outcome.changed(host))
            state = f"FAILED at '{failure.task}': {failure.message}" if failure else \
                f"{would} task(s) would change"
            out(scrub(f"  {step.run.playbook} on {host}: {state}", secrets))
    if not args.apply:
        failed = [h for h in runs.hosts if h not in good]
        if not failed:
            out("Nothing was changed. Run again with --apply to make these changes.")
            return None, EXIT_OK
        out(f"Nothing was changed. The preview failed on {', '.join(failed)}: --apply would "
            "not touch " + ("it" if len(failed) == 1 else "them") + " until it passes"
            + (f" (it would apply to {', '.join(h for h in runs.hosts if h in good)})"
               if good else "") + ".")
        return None, EXIT_FAILED
    if not good:
        err("no host passed its preview: nothing applied")
        return None, EXIT_FAILED
    if not _confirm(args):
        out("Not applied (declined): nothing was changed, nothing stored.")
        return None, EXIT_FAILED
    before_apply()
    out("Applying:")
    return runs.apply(good, show_task), EXIT_OK


def _stopped(exc: PlayCanceled, runs: Runs, args: argparse.Namespace) -> int:
    """A play cut by a signal: where it stopped and what it had done, the task it was in
    the middle of (its effect unknown), and the audit that checks it as the next step; no
    re-audit that would claim the fix ran (it printed STILL FAILING and exited 1). A preview
    cut short changed nothing, and says so."""
    if exc.check_mode:
        err(f"{exc.playbook}'s preview (check mode) stopped by a signal: nothing was changed, "
            "nothing applied")
        for line in exc.done:
            out(f"    previewed: {line.replace('(changed)', '(would change)')}")
        return EXIT_TERMINATED
    err(f"{exc.playbook} stopped by a signal (ansible-runner canceled it): nothing after it "
        "ran, nothing was re-audited")
    for line in exc.done:
        out(f"    done: {line}")
    for line in exc.in_flight:
        out(f"    in flight: {line}: its effect is unknown (it may have run in part or whole)")
    last = exc.done[-1] if exc.done else "before its first task"
    err(f"the hosts are left as its tasks left them (last finished: {last}"
        + (f"; in flight: {'; '.join(exc.in_flight)}" if exc.in_flight else "")
        + f"); its run is kept in {runs.artifacts}")
    err(f"next: check what it did with {_audit_command(args)}, before applying again")
    return EXIT_TERMINATED


def _audit_command(args: argparse.Namespace) -> str:
    """The audit of the hosts this run remediated, with the options it was given."""
    import shlex

    from omni_host.cli.common import hint_args

    parts = ["omni-host", "audit"]
    if args.inventory is not None:
        parts += ["-i", str(args.inventory)]
    parts += list(hint_args(args))
    if args.pattern:
        parts.append(args.pattern)
    if args.limit:
        parts += ["--limit", args.limit]
    return " ".join(shlex.quote(p) for p in parts)


def _prepare(args: argparse.Namespace) -> tuple[float, Path, list[HostPlan]] | int:
    """What remediate and bootstrap check before anything runs: an inventory, a way to
    confirm, valid policies. Returns (start time, store, host plans) or an exit code."""
    from omni_host.app.stored import store_at

    _inventory(args)
    from omni_host.app.remediate import known_check

    for check_id in getattr(args, "only", ()):
        known_check(check_id)
    if args.apply and not args.yes and not sys.stdin.isatty():
        err("refusing to apply without a terminal to confirm on: add --yes")
        return EXIT_USAGE
    return time.time(), store_at(args.report_dir), plans(args)


def cmd_remediate(args: argparse.Namespace) -> int:
    from omni_host.app import remediate

    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    started, store_root, host_plans = prepared
    ssh = ssh_options(args)
    settings = _settings(args, store_root, host_plans)
    planned = remediate.plan_fixes(host_plans, ssh, forks=args.forks, only=frozenset(args.only),
                                   allow_reboot=args.allow_reboot, settings=settings,
                                   started=started)
    for host in planned.findings:
        if not host.reachable:
            err(f"{host.host}: unreachable: {host.error}")
    plan = planned.plan
    for step in plan.manual:
        out(f"MANUAL {step.host}: {step.check} ({', '.join(step.lessons)}): {step.summary}")
        for line in step.steps:
            out(f"    - {line}")
    for line in plan.refused:
        err(line)
    for line in plan.waived:
        out(f"WAIVED {line}")
    if plan.empty:
        out("Nothing to remediate with a playbook.")
        code = EXIT_USAGE if plan.refused else EXIT_OK
        return EXIT_UNREACHABLE if planned.unreachable else code
    for run in plan.runs:
        out(f"PLAN {run.playbook}: {', '.join(run.hosts)} ({', '.join(run.checks)})")
    runs = remediate.Runs(plan, settings)

    def keep_pre() -> None:
        nonlocal planned
        planned = remediate.keep_pre(planned, settings=settings)
        err(f"pre-remediation audit stored in {planned.pre}")

    try:
        applied, code = _preview_and_apply(args, runs, keep_pre)
    except PlayCanceled as exc:
        return _stopped(exc, runs, args)
    if applied is None:
        runs.discard()
        return EXIT_UNREACHABLE if planned.unreachable and code == EXIT_OK else code
    fixed = remediate.reaudit(runs, applied, planned, host_plans, ssh, forks=args.forks,
                              started=started)
    for rec in fixed.records:
        out(f"{rec.outcome.value.upper():14} {rec.host}: {rec.check} "
            f"({rec.before} -> {rec.after}): {rec.detail}")
    err(f"report stored in {fixed.path}")
    if fixed.errored:
        return EXIT_UNREACHABLE
    return EXIT_OK if fixed.all_fixed else EXIT_FAILED


def cmd_bootstrap(args: argparse.Namespace) -> int:
    from omni_host.app import remediate
    from omni_host.app.stored import history_at

    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    started, store_root, host_plans = prepared
    runs = remediate.Runs(remediate.site_plan(host_plans),
                          _settings(args, store_root, host_plans))
    try:
        applied, code = _preview_and_apply(args, runs)
    except PlayCanceled as exc:
        return _stopped(exc, runs, args)
    if applied is None:
        runs.discard()
        return code
    report, path = remediate.baseline(runs, host_plans, ssh_options(args), forks=args.forks,
                                      started=started)
    emit(report, "table", None, lambda: history_at(store_root))
    err(f"baseline audit stored in {path}")
    return exit_code(report)
