"""What every command group shares: exit codes, the target arguments, host plans, error
lines and the one place a report is rendered to its destination. Part of the CLI: it prints."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_host.report.views import VIEWS

if TYPE_CHECKING:
    from rich.console import Console

    from omni_host.app.stored import History
    from omni_host.collect.transport.base import SshOptions
    from omni_host.plan.hosts import HostPlan, Targets
    from omni_host.plan.inventory import Inventory
    from omni_host.reports import Report

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_NO_POLICY = 4  # nothing failed, but a host had no expected state at all
EXIT_TERMINATED = 143  # SIGTERM: 128 + 15, as a shell reports it
EXIT_PIPE = 141  # SIGPIPE: 128 + 13, the reader of stdout went away (`| head`)
FORMATS = tuple(VIEWS)  # every view of the registry


def err(message: str) -> None:
    """One line on stderr; what it quotes of hosts and files is made terminal-safe."""
    from omni_host.safe_text import terminal_safe

    sys.stderr.write(f"omni-host: {terminal_safe(message)}\n")


def out(line: str = "") -> None:
    from omni_host.safe_text import terminal_safe

    sys.stdout.write(terminal_safe(line) + "\n")
    sys.stdout.flush()


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def forks(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"needs a whole number >= 1, got {text!r}")
    return int(text)


SSH_CONFIG = Path("~/.ssh/config").expanduser()
KNOWN_HOSTS = Path("~/.ssh/known_hosts").expanduser()


def add_inventory_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-i", "--inventory", type=Path,
                   help="Ansible inventory: a file (YAML, INI), a directory, a script or a "
                        "plugin config (default: ANSIBLE_INVENTORY or ansible.cfg's inventory; "
                        "without either, this machine with the built-in reference policy)")
    p.add_argument("--vault-password-file", type=Path, action="append", default=[],
                   metavar="FILE", help="vault password file for vaulted inventory values "
                                        "(also ANSIBLE_VAULT_PASSWORD_FILE)")
    p.add_argument("--ask-vault-pass", action="store_true",
                   help="ask for the vault password on the terminal")


def add_target_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("pattern", nargs="?", default=None,
                   help="Ansible host pattern (all, a group, a host; default: all)")
    add_inventory_args(p)
    p.add_argument("-l", "--limit", metavar="SUBSET", default=None,
                   help="further limit the hosts to a pattern (or @file), as ansible-playbook")
    p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="NAME=VALUE",
                   help="an omni_* value for this run only (also a JSON/YAML mapping or @file); "
                        "validated like the inventory's and recorded in the report")
    p.add_argument("--ssh-config", type=Path, default=SSH_CONFIG,
                   help="OpenSSH client config to honour (default: ~/.ssh/config)")
    p.add_argument("--known-hosts", type=Path, default=KNOWN_HOSTS,
                   help="known_hosts file used to verify host keys (default: ~/.ssh/known_hosts)")
    p.add_argument("--accept-new-host-key", action="store_true",
                   help="accept and record the key of a host not yet in known_hosts "
                        "(a changed key is always refused)")
    p.add_argument("--connect-timeout", type=positive, default=10.0, metavar="S",
                   help="SSH connect/auth timeout in seconds (default: 10)")
    p.add_argument("--probe-timeout", type=positive, default=None, metavar="S",
                   help="time limit for every probe on the host (default: per probe, 10-30 s)")
    p.add_argument("--forks", type=forks, default=5, metavar="N",
                   help="hosts audited in parallel (default: 5, as Ansible)")
    p.add_argument("--host-timeout", type=positive, default=None, metavar="S",
                   help="give up on a host after S seconds in all (default: connect and probe "
                        "limits added up)")


def hint_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The options of this run that a pasted hint (init, remediate) needs to reach the hosts
    as this run did: the known_hosts and ssh config files where not the defaults, the vault
    password files (their paths; never a secret), and the report store where not the default
    (a bench's baseline is there)."""
    found: list[str] = []
    if args.known_hosts != KNOWN_HOSTS:
        found += ["--known-hosts", str(args.known_hosts)]
    if args.ssh_config != SSH_CONFIG:
        found += ["--ssh-config", str(args.ssh_config)]
    for path in args.vault_password_file or ():
        found += ["--vault-password-file", str(path)]
    if args.ask_vault_pass:
        found.append("--ask-vault-pass")
    if getattr(args, "report_dir", None) is not None:  # where the baseline and history are
        found += ["--report-dir", str(args.report_dir)]
    return tuple(found)


def ssh_options(args: argparse.Namespace) -> SshOptions:
    from omni_host.collect.transport.base import SshOptions

    return SshOptions(known_hosts=args.known_hosts, ssh_config=args.ssh_config,
                      accept_new=args.accept_new_host_key, connect_timeout_s=args.connect_timeout)


_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}
DAY_S = 86400.0  # the longest watch: a longer one is a schedule, not a window


def duration(text: str) -> float:
    """90, 90s, 15m, 1h (a positive number of seconds, minutes or hours)."""
    match = re.fullmatch(r"\s*(\d{1,9}(?:\.\d{1,9})?)\s*([smh]?)\s*", text.lower())
    if match is None or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration (90s, 15m, 1h): {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def inventory_path(args: argparse.Namespace) -> Path | None:
    """``-i``, else the inventory Ansible is configured with (ANSIBLE_INVENTORY, ansible.cfg);
    None when neither is given: the caller audits this machine with the built-in policy."""
    given: Path | None = args.inventory
    if given is not None:
        return given
    from omni_host.errors import UsageError
    from omni_host.plan.inventory import default_sources

    sources = default_sources()
    if len(sources) > 1:
        raise UsageError(f"Ansible is configured with several inventories ({', '.join(sources)}): "
                         "pass the one to use with -i")
    args.inventory = Path(sources[0]) if sources else None
    return Path(sources[0]) if sources else None


def load_inventory_arg(args: argparse.Namespace) -> Inventory | None:
    from omni_host.errors import UsageError
    from omni_host.plan.inventory import VaultOptions, load_inventory

    path = inventory_path(args)
    if path is None:
        return None
    if args.ask_vault_pass and not sys.stdin.isatty():
        raise UsageError("--ask-vault-pass needs a terminal: use --vault-password-file")
    vault = VaultOptions(tuple(args.vault_password_file), args.ask_vault_pass)
    return load_inventory(path, vault)


def plans(args: argparse.Namespace) -> list[HostPlan]:
    """The hosts of ``args``'s inventory and pattern, or this machine without an inventory."""
    return targets(args).plans()


def extra_vars(args: argparse.Namespace) -> dict[str, Any] | None:
    """The run's ``-e`` values, parsed and checked (None without any)."""
    if not args.extra_vars:
        return None
    from omni_host.plan.inventory import parse_extra_vars

    return parse_extra_vars(args.extra_vars)


def targets(args: argparse.Namespace) -> Targets:
    """What ``args`` target (the inventory loaded, the ``-e`` values parsed): the use case
    resolves the hosts."""
    from omni_host.plan.hosts import Targets

    return Targets(load_inventory_arg(args), args.pattern, args.limit, extra_vars(args))


def exit_code(report: Report) -> int:
    from omni_host.model import Verdict

    if report.unreachable:
        return EXIT_UNREACHABLE
    failed = any(r.effective_status in (Verdict.FAIL, Verdict.ERROR)
                 for h in report.hosts for r in h.results)
    if failed:
        return EXIT_FAILED
    return EXIT_NO_POLICY if any(h.unconfigured for h in report.hosts) else EXIT_OK


def write_output(text: str, output: Path | None, *, readable: bool = False) -> None:
    """To stdout, or atomically to a file (a textfile collector never reads half a file),
    private to its owner (0600: a report holds the host's evidence), unless ``readable``
    (the Prometheus metrics, which node_exporter reads as its own user: no evidence in them)."""
    if output is None:
        sys.stdout.write(text)
        return
    from omni_host.resources import atomic_write

    atomic_write(output, text, 0o644 if readable else 0o600)


def add_view_args(parser: argparse.ArgumentParser) -> None:
    """-v and --quiet: how much of the terminal view to show."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1,
                       default=0, help="the terminal view expanded: every check, every "
                                       "evidence line, every engine's reasons")
    group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1,
                       help="only failures and the summary line (for timers and CI)")


def terminal_console(*, stderr: bool = False) -> Console:
    """The live terminal: its width, colour and styles, none of either where NO_COLOR is set
    (no-color.org: present and not empty; rich alone kept bold and dim)."""
    import os

    from rich.console import Console

    plain = bool(os.environ.get("NO_COLOR"))
    return Console(stderr=stderr, color_system=None) if plain else Console(stderr=stderr)


def emit(report: Report, fmt: str, output: Path | None,
         history: Callable[[], History], verbosity: int = 0) -> None:
    """Render a report through the view registry. ``history`` is read only by
    views that need it (the HTML timelines), so other formats never read the report store."""
    from omni_host.report.views import context, render, show_table

    if fmt == "table" and output is None:
        console = terminal_console()
        show_table(report, context(fmt, report, history, width=console.width,
                                   verbosity=verbosity), console)
        return
    write_output(render(fmt, report, context(fmt, report, history, verbosity=verbosity)), output,
                 readable=fmt == "prometheus")
