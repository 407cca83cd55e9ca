"""The ``checks``, ``init`` and ``payload`` commands (part of the CLI: these print)."""

from __future__ import annotations

import argparse
import sys

from omni_host.cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    _err,
    _plans,
    _ssh_options,
)


def cmd_checks(args: argparse.Namespace) -> int:
    from omni_host import explain

    if args.checks_command == "list":
        sys.stdout.write("\n".join(explain.list_lines()) + "\n")
    elif args.checks_command == "doc":
        sys.stdout.write(explain.markdown())
    else:
        sys.stdout.write("\n".join(explain.explain(m) for m in explain.find(args.term)))
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    """Collect one host, derive its omni_* variables, show the diff, write host_vars."""
    import yaml

    from omni_host.audit import collect_host
    from omni_host.baseline import diff, merged_text, observed_vars
    from omni_host.errors import TransportError, UsageError
    from omni_host.facts import facts_from_bundle

    if args.inventory is None or not args.inventory.is_dir() or not args.pattern:
        raise UsageError("init needs an inventory directory (-i DIR) and one HOST")
    plans = _plans(args)
    if len(plans) != 1:
        raise UsageError(f"init records one host; {args.pattern!r} matches {len(plans)}")
    plan = plans[0]
    try:
        bundle = collect_host(plan, _ssh_options(args), args.probe_timeout)
    except TransportError as exc:
        _err(f"{plan.name}: unreachable: {exc}")
        return EXIT_UNREACHABLE
    target = args.inventory / "host_vars" / f"{plan.name}.yml"
    old = target.read_text() if target.is_file() else ""
    existing = (yaml.safe_load(old) or {}) if old else {}
    new = merged_text(existing, observed_vars(facts_from_bundle(bundle)), plan.name)
    if new == old:
        sys.stdout.write(f"{target} already records this state\n")
        return EXIT_OK
    sys.stdout.write(diff(old, new, str(target)))
    if old and not args.force:
        _err(f"{target} exists: not overwritten (use --force to write the diff above)")
        return EXIT_FAILED
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(new)
    tmp.replace(target)
    _err(f"wrote {target}")
    return EXIT_OK


def cmd_payload(args: argparse.Namespace) -> int:
    from omni_host.collect import payload
    from omni_host.probes import PROBES

    sys.stdout.write(payload(PROBES, args.probe_timeout))
    return EXIT_OK
