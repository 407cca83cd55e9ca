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


def add_parsers(sub: argparse._SubParsersAction) -> None:
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
    import yaml

    from omni_host.collect.run import collect_host
    from omni_host.errors import TransportError, UsageError
    from omni_host.evaluate.baseline import diff, merged_text, observed_vars
    from omni_host.evaluate.facts import facts_from_bundle

    if inventory_path(args) is None or not args.inventory.is_dir() or not args.pattern:
        raise UsageError("init needs an inventory directory (-i DIR) and one HOST")
    host_plans = plans(args)
    if len(host_plans) != 1:
        raise UsageError(f"init records one host; {args.pattern!r} matches {len(host_plans)}")
    plan = host_plans[0]
    host_vars = args.inventory / "host_vars"
    target = host_vars / f"{plan.name}.yml"
    if target.parent.resolve() != host_vars.resolve() or "\0" in plan.name \
            or not plan.name.strip("."):
        # A name from a dynamic inventory ("../../x", "/etc/x") must not steer the write.
        raise UsageError(f"init: host name {plan.name!r} is not a file name in "
                         f"{host_vars}: record it by hand")
    try:
        bundle = collect_host(plan, ssh_options(args), args.probe_timeout)
    except TransportError as exc:
        err(f"{plan.name}: unreachable: {exc}")
        return EXIT_UNREACHABLE
    old = target.read_text() if target.is_file() else ""
    existing = (yaml.safe_load(old) or {}) if old else {}
    observed = observed_vars(facts_from_bundle(bundle, plan.policy), plan.policy)
    new = merged_text(existing, observed, plan.name)
    if new == old:
        sys.stdout.write(f"{target} already records this state\n")
        return EXIT_OK
    sys.stdout.write(diff(old, new, str(target)))
    if old and not args.force:
        err(f"{target} exists: not overwritten (use --force to write the diff above)")
        return EXIT_FAILED
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(new)
    tmp.replace(target)
    err(f"wrote {target}")
    return EXIT_OK


def cmd_payload(args: argparse.Namespace) -> int:
    from omni_host.collect.run import payload
    from omni_host.probes.catalog import PROBES

    sys.stdout.write(payload(PROBES, args.probe_timeout))
    return EXIT_OK
