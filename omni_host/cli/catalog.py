"""The ``checks``, ``init`` and ``payload`` commands (part of the CLI: these print)."""

from __future__ import annotations

import argparse
import sys

from omni_host.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    add_target_args,
    err,
    inventory_path,
    plans,
    positive,
    ssh_options,
)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    checks = sub.add_parser("checks", help="the check catalog: list, explain ID|LESSON, doc")
    csub = checks.add_subparsers(dest="checks_command", required=True)
    csub.add_parser("list", help="every check with severity, layer and lessons")
    explain = csub.add_parser("explain", help="what a check verifies, why, how, and the fix")
    explain.add_argument("term", help="a check id (swap.capacity) or a lesson id (F-010)")
    csub.add_parser("doc", help="print docs/checks.md")
    csub.add_parser("vars", help="the omni_* variables (the table in docs/inventory.md)")
    init = sub.add_parser("init", help="record a known-good host's state as its host_vars")
    add_target_args(init)
    init.add_argument("--force", action="store_true", help="overwrite existing host_vars")
    payload = sub.add_parser("payload", help="print the collector payload (for "
                             "ansible-playbook playbooks/collect.yml -e omni_payload=FILE)")
    payload.add_argument("--probe-timeout", type=positive, default=None, metavar="S")


def cmd_checks(args: argparse.Namespace) -> int:
    from omni_host.evaluate import explain

    if args.checks_command == "list":
        sys.stdout.write("\n".join(explain.list_lines()) + "\n")
    elif args.checks_command == "doc":
        sys.stdout.write(explain.markdown())
    elif args.checks_command == "vars":
        sys.stdout.write(explain.variables_markdown())
    else:
        sys.stdout.write("\n".join(explain.explain(m) for m in explain.find(args.term)))
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    """Collect one host, derive its omni_* variables, show the diff, write host_vars."""
    from omni_host.app import init
    from omni_host.errors import TransportError, UsageError
    from omni_host.report.text import init_command, plain

    inventory = inventory_path(args)
    if inventory is None or not args.pattern:
        raise UsageError("init needs an inventory (-i FILE or DIR) and one HOST; for this "
                         f"machine: {plain(init_command('localhost', None))}")
    host_plans = plans(args)
    if len(host_plans) != 1:
        raise UsageError(f"init records one host; {args.pattern!r} matches {len(host_plans)}")
    plan = host_plans[0]
    # host_vars/ beside an inventory file, or in an inventory directory: where Ansible reads it
    target = init.host_vars_file(inventory if inventory.is_dir() else inventory.parent, plan.name)
    try:
        recorded = init.observe(plan, ssh_options(args), args.probe_timeout, target)
    except TransportError as exc:
        err(f"{plan.name}: unreachable: {exc}")
        return EXIT_UNREACHABLE
    if recorded.unchanged:
        sys.stdout.write(f"{target} already records this state\n")
        return EXIT_OK
    sys.stdout.write(recorded.diff())
    if recorded.old and not args.force:
        err(f"{target} exists: not overwritten (use --force to write the diff above)")
        return EXIT_FAILED
    init.write(recorded)
    err(f"wrote {target}")
    return EXIT_OK


def cmd_payload(args: argparse.Namespace) -> int:
    from omni_host.app.collect import catalog_payload

    sys.stdout.write(catalog_payload(args.probe_timeout))
    return EXIT_OK
