"""The ``serve`` command group: ``serve watch``, the stability watch of a host's running
llama-servers (part of the CLI: it prints). Exit codes as the audit's; Ctrl-C ends the window
early and its samples are judged and stored (130), as SIGTERM's (143)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from omni_host.cli.common import (
    DAY_S,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    FORMATS,
    add_target_args,
    add_view_args,
    duration,
    emit,
    err,
    exit_code,
    hint_args,
    ssh_options,
    targets,
)

if TYPE_CHECKING:
    from omni_host.measure.asked import Sample
    from omni_host.model import InferenceServer

def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="the running inference servers: a stability watch")
    verbs = serve.add_subparsers(dest="verb", required=True)
    watch = verbs.add_parser("watch", help="sample a host's llama-servers for a while and judge "
                                           "the window (restarts, rate drops, memory growth)")
    add_target_args(watch)
    watch.add_argument("--for", dest="duration", type=duration, default=3600.0, metavar="TIME",
                       help="how long to watch (90s, 15m, 1h; default 1h)")
    watch.add_argument("--every", type=duration, default=30.0, metavar="TIME",
                       help="time between samples (default 30s; at least 1s)")
    watch.add_argument("--format", default="table", choices=FORMATS)
    add_view_args(watch)
    watch.add_argument("--output", type=Path, default=None,
                       help="write the report to this file (atomically) instead of stdout")
    watch.add_argument("--report-dir", type=Path, default=None, help="the report store")
    watch.add_argument("--no-store", action="store_true", help="do not store the watch")


class _Progress:
    """One line per sample on stderr: each server's rate over the interval since the previous
    sample of the same process (not its cumulative tokens), and its memory. A process that is
    gone leaves the lines; one that answers beside a dead one on the same port is the one."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, int], InferenceServer] = {}

    def __call__(self, i: int, rounds: int, sample: Sample) -> None:
        from omni_host.measure.serve import generated_between
        from omni_host.safe_text import terminal_safe

        if sample.error:
            sys.stderr.write(terminal_safe(f"[{i}/{rounds}] host did not answer: "
                                           f"{sample.error}") + "\n")
            return
        by_key: dict[str, InferenceServer] = {}
        for s in sample.servers:  # per port, the process that answers
            key = s.address or f"pid {s.pid}"
            if key not in by_key or (by_key[key].counters is None and s.counters is not None):
                by_key[key] = s
        parts, seen = [], {}
        for key, s in by_key.items():
            seen[(key, s.pid)] = s
            if s.counters is None:
                parts.append(f"{key} pid {s.pid}: no counters ({s.metrics_error})")
                continue
            before = self.last.get((key, s.pid))
            moved = generated_between(before.counters, s.counters) \
                if before is not None and before.counters is not None else None
            few = (s.counters.predicted_tokens or 0) - (
                before.counters.predicted_tokens or 0) if before and before.counters else 0
            rate = (f"{moved[0] / moved[1]:.1f} t/s ({moved[0]:.0f} tokens)" if moved else
                    f"{max(few, 0):.0f} tokens (too few for a rate)" if before is not None
                    else "first sample")
            parts.append(f"{key} pid {s.pid}: {rate}, {(s.rss_kib or 0) / 1024:.0f} MiB "
                         "resident")
        self.last = seen
        state = "; ".join(parts) or "no llama-server running"
        sys.stderr.write(terminal_safe(f"[{i}/{rounds}] {state}") + "\n")


def cmd_serve(args: argparse.Namespace) -> int:
    from omni_host.app.stored import history_at
    from omni_host.app.watch import WatchRequest, run

    if args.every < 1 or args.every > args.duration or args.duration > DAY_S:
        err("--every must be at least 1s and at most --for; --for at most a day (24h)")
        return EXIT_USAGE
    done = run(WatchRequest(targets(args), ssh_options(args), args.duration, args.every,
                            args.report_dir, not args.no_store,
                            str(args.inventory) if args.inventory else None, hint_args(args)),
               _Progress())
    emit(done.run.report, args.format, args.output, lambda: history_at(args.report_dir),
         args.verbosity)
    if done.stored is not None:
        err(f"{'partial (interrupted) ' if done.hosts.interrupted else ''}watch stored in "
            f"{done.stored}")
    if done.unstored is not None:
        err(f"{done.unstored}: the verdict above is not kept")
        return EXIT_USAGE
    return EXIT_TERMINATED if done.hosts.terminated else \
        EXIT_INTERRUPTED if done.hosts.interrupted else exit_code(done.run.report)
