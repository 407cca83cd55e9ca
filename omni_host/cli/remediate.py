"""The ``remediate`` and ``bootstrap`` commands (part of the CLI: they print and prompt).

Preview first, always: every playbook runs in check mode with diffs and the changes are shown
per host and task. ``--apply`` then asks for confirmation on a terminal (``--yes`` skips it and
is required without one), runs for real, re-audits the touched hosts and stores the outcome.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
from pathlib import Path

from omni_host.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    rem = sub.add_parser("remediate", help="fix failed findings with Ansible (preview first)")
    add_target_args(rem)
    rem.add_argument("--check", dest="only", action="append", default=[], metavar="ID",
                     help="only this check id (repeatable)")
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


def _task_printer(secrets: tuple[str, ...]):  # noqa: ANN202 (a TaskOutcome callback)
    """What a play says of each task, shown live; the clear text of vaulted values that the
    play was given (--vault-password-file) is scrubbed from it, as from every report."""
    from omni_host.model import scrub

    def show(task) -> None:  # noqa: ANN001 (TaskOutcome, imported lazily)
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
    from omni_host.errors import UsageError

    path = inventory_path(args)
    if path is None:
        raise UsageError(f"{args.command} needs an inventory (-i): the playbooks read it too")
    return path


def _known_check(check_id: str) -> None:
    import difflib

    from omni_host.errors import UsageError
    from omni_host.evaluate.checks import catalog

    if check_id not in catalog():
        close = difflib.get_close_matches(check_id, list(catalog()), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"--check {check_id}: no such check{hint}")


def _vault_files(args: argparse.Namespace) -> tuple[Path, ...]:
    """The vault password files the playbooks need: --vault-password-file, else
    ANSIBLE_VAULT_PASSWORD_FILE (which ansible-playbook reads by itself). A password typed at
    the prompt cannot be handed to ansible-playbook through ansible-runner."""
    from omni_host.errors import UsageError

    if args.ask_vault_pass:
        raise UsageError("remediate and bootstrap need the vault password in a file: use "
                         "--vault-password-file (or ANSIBLE_VAULT_PASSWORD_FILE)")
    return tuple(args.vault_password_file)


def _preview_and_apply(args: argparse.Namespace, plan, store_root: Path,  # noqa: ANN001
                       secrets: tuple[str, ...] = ()):
    """Returns (artifacts dir, apply steps or None when nothing was applied, exit code)."""
    from omni_host.model import scrub
    from omni_host.remediate.flow import artifacts_dir, execute, hosts_ok

    show_task = _task_printer(secrets)
    artifacts = artifacts_dir(store_root)
    common = {"inventory": _inventory(args), "allow_reboot": args.allow_reboot,
              "known_hosts": args.known_hosts, "artifacts_root": artifacts,
              "vault_password_files": _vault_files(args)}
    out("Preview (ansible check mode, nothing is changed):")
    preview = execute(plan, check_mode=True, on_task=show_task, **common)
    all_hosts = tuple(dict.fromkeys(h for run in plan.runs for h in run.hosts))
    good = hosts_ok(preview, all_hosts)
    for step in preview:
        for host in step.run.hosts:
            failure = step.outcome.failure(host)
            would = len(step.outcome.changed(host))
            state = f"FAILED at '{failure.task}': {failure.message}" if failure else \
                f"{would} task(s) would change"
            out(scrub(f"  {step.run.playbook} on {host}: {state}", secrets))
    if not args.apply:
        out("Nothing was changed. Run again with --apply to make these changes.")
        return artifacts, None, EXIT_OK if len(good) == len(all_hosts) else EXIT_FAILED
    if not good:
        err("no host passed its preview: nothing applied")
        return artifacts, None, EXIT_FAILED
    if not _confirm(args):
        return artifacts, None, EXIT_USAGE
    out("Applying:")
    applied = execute(plan, check_mode=False, hosts=good, on_task=show_task, **common)
    return artifacts, applied, EXIT_OK


def _prepare(args: argparse.Namespace) -> tuple[float, Path, list] | int:
    """What remediate and bootstrap check before anything runs: an inventory, a way to
    confirm, valid policies. Returns (start time, store, host plans) or an exit code."""
    from omni_host.report.store import default_report_dir

    _inventory(args)
    for check_id in getattr(args, "only", ()):
        _known_check(check_id)
    if args.apply and not args.yes and not sys.stdin.isatty():
        err("refusing to apply without a terminal to confirm on: add --yes")
        return EXIT_USAGE
    return time.time(), args.report_dir or default_report_dir(), plans(args)


def cmd_remediate(args: argparse.Namespace) -> int:
    from omni_host.evaluate.audit import audit_many
    from omni_host.model import FixVerdict, make_report
    from omni_host.remediate.flow import available_playbooks, current_findings, outcomes
    from omni_host.remediate.plan import make_plan
    from omni_host.report.store import store_report

    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    started, store_root, host_plans = prepared
    ssh = ssh_options(args)
    findings = current_findings(host_plans, ssh=ssh, forks=args.forks)
    # A preview changes nothing, so it stores nothing: the next report diff compares real
    # audits. Only an apply keeps the state it started from (its record points to it).
    pre = store_report(make_report(findings, started_at=started, source="pre-remediation",
                                   inventory=str(args.inventory)), store_root) \
        if args.apply else None
    if pre is not None:
        err(f"pre-remediation audit stored in {pre}")
    for host in findings:
        if not host.reachable:
            err(f"{host.host}: unreachable: {host.error}")
    plan = make_plan([h for h in findings if h.reachable], only=frozenset(args.only),
                     allow_reboot=args.allow_reboot, available=available_playbooks())
    for step in plan.manual:
        out(f"MANUAL {step.host}: {step.check} ({', '.join(step.lessons)}): {step.summary}")
        for line in step.steps:
            out(f"    - {line}")
    for line in plan.refused:
        err(line)
    if plan.empty:
        out("Nothing to remediate with a playbook.")
        code = EXIT_USAGE if plan.refused else EXIT_OK
        return EXIT_UNREACHABLE if any(not h.reachable for h in findings) else code
    for run in plan.runs:
        out(f"PLAN {run.playbook}: {', '.join(run.hosts)} ({', '.join(run.checks)})")
    secrets = tuple(s for p in host_plans for s in p.secrets)
    artifacts, applied, code = _preview_and_apply(args, plan, store_root, secrets)
    unreachable = any(not h.reachable for h in findings)
    if applied is None:
        shutil.rmtree(artifacts, ignore_errors=True)  # a preview leaves nothing behind
        return EXIT_UNREACHABLE if unreachable and code == EXIT_OK else code
    touched = {h for step in applied for h in step.run.hosts}
    after = audit_many([p for p in host_plans if p.name in touched], ssh, forks=args.forks).results
    records = outcomes(plan, applied, after)
    for rec in records:
        out(f"{rec.outcome.value.upper():14} {rec.host}: {rec.check} "
            f"({rec.before} -> {rec.after}): {rec.detail}")
    report = dataclasses.replace(
        make_report(after, started_at=started, source="remediation", inventory=str(args.inventory)),
        remediation=records, pre_state=pre.name if pre is not None else None)
    path = store_report(report, store_root, attach={"ansible": artifacts})
    err(f"report stored in {path}")
    if any(r.outcome is FixVerdict.ERROR for r in records) or report.unreachable:
        return EXIT_UNREACHABLE
    return EXIT_OK if all(r.outcome is FixVerdict.FIXED for r in records) else EXIT_FAILED


def cmd_bootstrap(args: argparse.Namespace) -> int:
    from omni_host.evaluate.audit import audit_many
    from omni_host.model import make_report
    from omni_host.remediate.plan import Plan, PlaybookRun
    from omni_host.report.store import store_report

    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    started, store_root, host_plans = prepared
    plan = Plan((PlaybookRun("site.yml", tuple(p.name for p in host_plans), ()),), ())
    artifacts, applied, code = _preview_and_apply(
        args, plan, store_root, tuple(s for p in host_plans for s in p.secrets))
    if applied is None:
        shutil.rmtree(artifacts, ignore_errors=True)  # a preview leaves nothing behind
        return code
    after = audit_many(host_plans, ssh_options(args), forks=args.forks).results
    report = make_report(after, started_at=started, source="bootstrap",
                         inventory=str(args.inventory))
    path = store_report(dataclasses.replace(report, baseline=True), store_root,
                        attach={"ansible": artifacts})
    from omni_host.report.history import load_history

    emit(report.to_dict(), "table", None, lambda: load_history(store_root))
    err(f"baseline audit stored in {path}")
    return exit_code(report)
