"""The ``remediate`` and ``bootstrap`` commands (part of the CLI: they print and prompt).

Preview first, always: every playbook runs in check mode with diffs and the changes are shown
per host and task. ``--apply`` then asks for confirmation on a terminal (``--yes`` skips it and
is required without one), runs for real, re-audits the touched hosts and stores the outcome.
"""

from __future__ import annotations

import argparse
import sys
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
    ssh_options,
)
from omni_host.errors import PlayCanceled

if TYPE_CHECKING:
    from omni_host.app.remediate import Planned, Remediated, RemediateRequest
    from omni_host.collect.runner import TaskOutcome
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


def _confirm(args: argparse.Namespace) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        err("refusing to apply without a terminal to confirm on: add --yes")
        return False
    answer = input("Apply these changes? [y/N] ").strip().lower()
    return answer in ("y", "yes")


def _inventory(args: argparse.Namespace) -> tuple[Path, str | None, bool]:
    """``-i`` (or Ansible's configured inventory); without one, for this machine (as
    ``omni-host audit`` without one judges it): an inventory of localhost over Ansible's local
    connection holding the built-in reference policy, so that the playbooks read the expected
    state the audit judged against. Made once per run, private, removed at exit. Returns
    (the inventory, the pattern, whether it is the run's own)."""
    from omni_host.errors import UsageError

    path = inventory_path(args)
    if path is not None:
        return path, args.pattern, False
    if args.pattern not in (None, "localhost") or args.limit not in (None, "localhost"):
        raise UsageError(f"{args.command} needs an inventory (-i) for {args.pattern!r}: the "
                         "playbooks read it too (without one, only this machine: localhost)")
    return _local_inventory(), "localhost", True


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


class _Told:
    """What the run tells, printed: the plan, each task of a play live, the preview's state of
    each host, the stored state before an apply."""

    secrets: tuple[str, ...] = ()  # the clear text of the vaulted values the plays are given

    def planned(self, planned: Planned) -> None:
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
        for run in plan.runs:
            out(f"PLAN {run.playbook}: {', '.join(run.hosts)} ({', '.join(run.checks)})")

    def previewing(self, secrets: tuple[str, ...]) -> None:
        self.secrets = secrets
        out("Preview (ansible check mode, nothing is changed):")

    def task(self, task: TaskOutcome) -> None:
        """What a play says of a task, shown live; the clear text of vaulted values the play
        was given (--vault-password-file) is scrubbed from it, as from every report."""
        from omni_host.model import scrub

        if task.status in ("changed", "failed", "unreachable"):
            out(scrub(f"    {task.host}: {task.status.upper()}: {task.task}"
                      + (f": {task.message}" if task.message else ""), self.secrets))
            for line in task.diff.splitlines():
                out(scrub(f"        {line}", self.secrets))

    def previewed(self, steps: list[Step]) -> None:
        from omni_host.model import scrub

        for step in steps:
            for host in step.run.hosts:
                failure = step.outcome.failure(host)
                would = len(step.outcome.changed(host))
                state = f"FAILED at '{failure.task}': {failure.message}" if failure else \
                    f"{would} task(s) would change"
                out(scrub(f"  {step.run.playbook} on {host}: {state}", self.secrets))

    def pre_kept(self, path: Path) -> None:
        err(f"pre-remediation audit stored in {path}")

    def applying(self) -> None:
        out("Applying:")


def _request(args: argparse.Namespace, *, bootstrap: bool) -> RemediateRequest:
    from omni_host.app.remediate import RemediateRequest
    from omni_host.cli.common import hint_args, targets

    inventory, pattern, own = _inventory(args)
    view = argparse.Namespace(**{**vars(args), "inventory": inventory, "pattern": pattern})
    return RemediateRequest(
        targets(view), ssh_options(args), inventory, args.forks,
        frozenset(getattr(args, "only", ())), args.apply, args.allow_reboot, bootstrap,
        _vault_files(args), args.report_dir, getattr(args, "waivers", None),
        None if own else str(inventory), hint_args(args))


def _said(done: Remediated) -> int:
    """The end of a run that applied nothing, said, and its exit code."""
    planned = done.planned
    lost = planned is not None and planned.unreachable
    if done.ended == "nothing":
        assert planned is not None
        return EXIT_UNREACHABLE if lost else EXIT_USAGE if planned.plan.refused else EXIT_OK
    if done.ended == "previewed":
        failed = [h for h in done.hosts if h not in done.good]
        if not failed:
            out("Nothing was changed. Run again with --apply to make these changes.")
            return EXIT_UNREACHABLE if lost else EXIT_OK
        out(f"Nothing was changed. The preview failed on {', '.join(failed)}: --apply would "
            "not touch " + ("it" if len(failed) == 1 else "them") + " until it passes"
            + (f" (it would apply to {', '.join(h for h in done.hosts if h in done.good)})"
               if done.good else "") + ".")
        return EXIT_FAILED
    if done.ended == "no host passed":
        err("no host passed its preview: nothing applied")
    else:
        out("Not applied (declined): nothing was changed, nothing stored.")
    return EXIT_FAILED


def _stopped(exc: PlayCanceled, artifacts: Path | None, args: argparse.Namespace,
             own: bool) -> int:
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
        + f"); its run is kept in {artifacts}")
    err(f"next: check what it did with {_audit_command(args, own)}, before applying again")
    return EXIT_TERMINATED


def _audit_command(args: argparse.Namespace, own: bool) -> str:
    """The audit of the hosts this run remediated, with the options it was given (``own``:
    this machine, through the run's own inventory, gone at its exit: audited without -i)."""
    import shlex

    from omni_host.cli.common import hint_args

    parts = ["omni-host", "audit"]
    inventory = None if own else inventory_path(args)
    if inventory is not None:
        parts += ["-i", str(inventory)]
    parts += list(hint_args(args))
    if args.pattern:
        parts.append(args.pattern)
    if args.limit:
        parts += ["--limit", args.limit]
    return " ".join(shlex.quote(p) for p in parts)


def cmd_remediate(args: argparse.Namespace) -> int:
    return _cmd(args, bootstrap=False)


def cmd_bootstrap(args: argparse.Namespace) -> int:
    return _cmd(args, bootstrap=True)


def _cmd(args: argparse.Namespace, *, bootstrap: bool) -> int:
    from omni_host.app import remediate
    from omni_host.app.stored import history_at

    if args.apply and not args.yes and not sys.stdin.isatty():
        err("refusing to apply without a terminal to confirm on: add --yes")
        return EXIT_USAGE
    req = _request(args, bootstrap=bootstrap)
    done = remediate.run(req, lambda: _confirm(args), _Told())
    if done.stopped is not None:
        return _stopped(done.stopped, done.artifacts, args, req.reported_inventory is None)
    if done.baseline is not None:
        report, path = done.baseline
        emit(report, "table", None, lambda: history_at(args.report_dir))
        err(f"baseline audit stored in {path}")
        return exit_code(report)
    if done.fixed is None:
        return _said(done)
    for rec in done.fixed.records:
        out(f"{rec.outcome.value.upper():14} {rec.host}: {rec.check} "
            f"({rec.before} -> {rec.after}): {rec.detail}")
    err(f"report stored in {done.fixed.path}")
    if done.fixed.errored:
        return EXIT_UNREACHABLE
    return EXIT_OK if done.fixed.all_fixed else EXIT_FAILED
