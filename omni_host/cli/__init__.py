"""The command line: the only package that prints, prompts or exits.

Exit codes: 0 nothing failed; 1 a check failed (or could not be evaluated: error); 2 usage,
inventory or report-store error; 3 a host could not be audited (outranks 1); 4 nothing failed
but a host had no expected state at all (its inventory sets no omni_* variable: no check
that reads one is judged on the role's defaults; never a silent green); 130 interrupted (Ctrl-C); 143
terminated (SIGTERM), with the finished hosts stored as for Ctrl-C.

Heavy imports (paramiko, rich, yaml, ansible) happen inside the commands so ``--help`` stays
fast. One module per command group; ``common`` holds what they share.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from types import ModuleType

from omni_host import __version__, interrupts
from omni_host.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_PIPE,
    EXIT_TERMINATED,
    EXIT_USAGE,
    err,
)

# command -> the module of its group (omni_host.cli.NAME), imported only for that command: a
# bench starts its host's collection before the other groups' imports (issue 44)
GROUPS = {"audit": "audit", "collect": "audit", "bench": "bench", "plan": "bench",
          "remediate": "remediate", "bootstrap": "remediate", "report": "report",
          "schedule": "report", "payload": "catalog", "checks": "catalog", "init": "catalog",
          "completion": "completion", "serve": "serve"}
ORDER = ("audit", "bench", "catalog", "remediate", "report", "serve", "completion")


def group(name: str) -> ModuleType:
    """The command group ``omni_host.cli.NAME``, imported now."""
    return importlib.import_module(f"omni_host.cli.{name}")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser, or, when ``argv`` names a command, only its group's: argparse spends
    about 12 ms building all 137 options, a tenth of a local audit."""
    parser = argparse.ArgumentParser(
        prog="omni-host",
        description="Audit LLM inference hosts against the lessons they were built on.")
    parser.add_argument("--version", action="version", version=f"omni-host {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    named = GROUPS.get(argv[0]) if argv else None
    for name in (named,) if named else ORDER:
        group(name).add_parsers(sub)
    return parser


Handler = Callable[[argparse.Namespace], int]
# command -> its handler, a function of its group's module (completion's is here: it reads the
# whole parser)
HANDLERS: dict[str, str] = {
    "audit": "cmd_audit", "collect": "cmd_collect", "bench": "cmd_bench", "plan": "cmd_plan",
    "remediate": "cmd_remediate", "bootstrap": "cmd_bootstrap", "report": "cmd_report",
    "schedule": "cmd_schedule", "payload": "cmd_payload", "checks": "cmd_checks",
    "init": "cmd_init", "serve": "cmd_serve", "completion": "_completion"}


def handler(command: str) -> Handler:
    import sys

    home = sys.modules[__name__] if command == "completion" else group(GROUPS[command])
    found: Handler = getattr(home, HANDLERS[command])
    return found


def _completion(args: argparse.Namespace) -> int:
    import sys

    sys.stdout.write(group("completion").script(build_parser(), args.shell))
    return 0


def _warnings_to_stderr() -> None:
    """Library warnings (logger "omni_host": a skipped known_hosts line...) as one line each."""
    import logging

    class Line(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            err(f"warning: {record.getMessage()}")

    logger = logging.getLogger("omni_host")
    if not any(h.get_name() == "omni-host-cli" for h in logger.handlers):
        handler = Line(logging.WARNING)
        handler.set_name("omni-host-cli")
        logger.addHandler(handler)
        logger.propagate = False


def run() -> None:
    """The console script: ``main``, then exit without the interpreter's last garbage
    collections over every object of the run (``gc.freeze``: 15-20 ms of a one-host audit).
    Everything else of an exit (atexit handlers, flushing, threads) happens as ever."""
    import gc
    import sys

    code = main()
    gc.freeze()
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    import sys

    from omni_host.errors import OmniHostError

    argv = sys.argv[1:] if argv is None else argv
    try:  # parsing too: a Ctrl-C while the parser is built is an interruption, not a traceback
        args = build_parser(argv).parse_args(argv)
        _warnings_to_stderr()
        interrupts.install()
        return handler(args.command)(args)
    except OmniHostError as exc:
        err(str(exc))
        return EXIT_USAGE
    except BrokenPipeError:  # `report list | head`: the reader had what it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_PIPE
    except OSError as exc:
        err(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        return EXIT_USAGE
    except interrupts.Terminated:
        err("terminated")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        err("interrupted")
        return EXIT_INTERRUPTED
