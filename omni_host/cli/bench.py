"""The ``bench`` command: the host's own llama-bench against its baseline (part of the CLI:
it prints). Exit codes as the audit's; a refused bench (a busy GPU, a missing binary or model)
exits 2 and stores nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

from omni_host import interrupts
from omni_host.cli.common import (
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
    out,
    plans,
    ssh_options,
    targets,
)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="run the host's llama-bench (omni_bench) and judge "
                                         "tokens/s against its own baseline")
    add_target_args(bench)
    bench.add_argument("--baseline", action="store_true",
                       help="record this run as the host's new baseline (the first bench of "
                            "a host always is)")
    bench.add_argument("--force", action="store_true",
                       help="run even when a GPU is busy or runs compute processes")
    bench.add_argument("--wait", type=duration, default=0.0, metavar="TIME",
                       help="wait up to TIME (90s, 15m, 1h) for another bench of the host to "
                            "end, instead of refusing at once")
    bench.add_argument("--sweep-split", action="store_true",
                       help="on a multi-GPU host: run llama-bench over the advised --tensor-split "
                            "and splits around it, -sm layer and row, and say which is "
                            "fastest beyond the noise (perf.split-sweep; never a baseline)")
    bench.add_argument("--knob", default=None, metavar="NAME=VALUE",
                       help="measure what a knob costs here: interleaved A/B pairs of the host "
                            "as it is and the knob at VALUE, the knob restored on the host "
                            "whatever happens (perf.knob; never a baseline). NAME: thp, "
                            "thp-defrag, numa-balancing, governor (need root on the host), "
                            "threads, numa, ubatch (llama-bench's own options)")
    bench.add_argument("--why", action="store_true",
                       help="prove what each change since the baseline costs: each one that "
                            "can be set back for one run (a llama-bench option, a variable) "
                            "in interleaved rounds beside the host as it is, within 10 minutes "
                            "(perf.why; never a baseline)")
    bench.add_argument("--pairs", type=int, default=6, metavar="N",
                       help="A/B pairs of --knob (default 6; 4 at least to call a difference)")
    bench.add_argument("--format", default="table", choices=FORMATS)
    add_view_args(bench)
    bench.add_argument("--output", type=Path, default=None,
                       help="write the report to this file (atomically) instead of stdout")
    bench.add_argument("--waivers", type=Path, default=None,
                       help="waivers file (default: as for audit)")
    bench.add_argument("--report-dir", type=Path, default=None,
                       help="where audits and benches are stored (and baselines found)")
    bench.add_argument("--no-store", action="store_true",
                       help="do not store this run (it then cannot become a baseline)")


    plan = sub.add_parser("plan", help="where the model's tensors should go on the host: each "
                                       "candidate placement's memory per device and predicted "
                                       "tokens/s (perf.placement); --prove measures them")
    add_target_args(plan)
    plan.add_argument("--ctx", type=int, default=4096, metavar="N",
                      help="the context the server will serve (-c): what the KV cache must "
                           "hold (default 4096, --fit's minimum)")
    plan.add_argument("--depth", type=int, default=None, metavar="N",
                      help="the context a generated token reads (llama-bench -d): predicted "
                           "at, and proved at (default half of --ctx: a served request's "
                           "tokens read, on average, half the context it fills)")
    plan.add_argument("--prove", action="store_true",
                      help="run llama-bench for the leading candidates, the current args and "
                           "--fit's answer, in rounds behind the bench's idle gate, and say "
                           "which is fastest beyond the noise (never a baseline)")
    plan.add_argument("--rounds", type=int, default=4, metavar="N",
                      help="rounds of --prove (default 4; 4 at least to call a difference)")
    plan.add_argument("--top", type=int, default=4, metavar="N",
                      help="the plan's leading candidates --prove runs (default 4)")
    plan.add_argument("--budget", type=duration, default=300.0, metavar="TIME",
                      help="--prove's time on the host, from the plan's start (default 5m): "
                           "a round starts only where it fits, the costliest candidates "
                           "other than the plan's leader and --fit's answer leaving first")
    plan.add_argument("--wait", type=duration, default=0.0, metavar="TIME",
                      help="--prove waits up to TIME for another bench of the host to end "
                           "(a plan that only predicts takes no lock)")
    plan.add_argument("--force", action="store_true",
                      help="prove even when a GPU is busy or holds compute processes (a "
                           "ballast that only holds memory)")
    plan.add_argument("--format", default="table", choices=FORMATS)
    add_view_args(plan)
    plan.add_argument("--output", type=Path, default=None,
                      help="write the report to this file (atomically) instead of stdout")
    plan.add_argument("--report-dir", type=Path, default=None,
                      help="where audits and benches are stored (the host's measured rates "
                           "are read there)")
    plan.add_argument("--no-store", action="store_true", help="do not store the plan")


MAX_CTX = 1 << 27  # tokens: past any context a model has been trained for (10M, 2025)


def cmd_plan(args: argparse.Namespace) -> int:
    if args.depth is None:
        args.depth = args.ctx // 2
    if not 1 <= args.rounds <= 50 or not 1 <= args.top <= 20 or not 1 <= args.ctx <= MAX_CTX \
            or not 0 <= args.depth <= MAX_CTX:
        err(f"--rounds must be 1 to 50, --top 1 to 20, --ctx 1 to {MAX_CTX:,}, --depth 0 to "
            f"{MAX_CTX:,} (no model is trained past it; the plan also holds both to the model's "
            f"own trained context)")
        return EXIT_USAGE
    from omni_host.app.bench import BenchRefused
    from omni_host.app.plan import PlanRequest, PlanRun, run
    from omni_host.report.text import plan_lines

    request = PlanRequest(ctx=args.ctx, depth=args.depth, prove=args.prove, rounds=args.rounds,
                          top=args.top, force=args.force, wait_s=args.wait,
                          budget_s=args.budget)
    try:
        done = run(PlanRun(tuple(plans(args)), ssh_options(args), request,
                           str(args.inventory) if args.inventory else None, args.report_dir,
                           not args.no_store, args.probe_timeout, hint_args(args)))
    except BenchRefused as exc:
        err(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        err("plan interrupted: llama-bench stopped with its session; nothing stored")
        return EXIT_TERMINATED if interrupts.terminated(exc) else EXIT_INTERRUPTED
    for line in done.warnings:
        err(line)
    for host in done.run.report.unreachable:
        err(f"{host.host}: unreachable: {host.error}")
    history = done.run.history
    assert history is not None  # a plan reads the store: its run keeps what it read
    emit(done.run.report, args.format, args.output, lambda: history, args.verbosity)
    if args.format == "table" and args.output is None:
        for line in plan_lines(done.run.report):
            out(line)
    if done.stored is not None:
        err(f"plan stored in {done.stored}")
    return exit_code(done.run.report)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.sweep_split and args.baseline:
        err("--sweep-split never records a baseline: run omni-host bench --baseline with the "
            "split it found fastest")
        return EXIT_USAGE
    if args.why and (args.baseline or args.sweep_split or args.knob is not None):
        err("--why measures what changed since the baseline and is never a baseline, a sweep "
            "or a knob's A/B: run it alone")
        return EXIT_USAGE
    if args.knob is not None:
        if args.baseline or args.sweep_split:
            err("--knob measures a knob and is never a baseline or a sweep: run it alone")
            return EXIT_USAGE
        if not 1 <= args.pairs <= 50:
            err("--pairs must be 1 to 50")
            return EXIT_USAGE
    from omni_host.app.bench_run import BenchRequest, run
    from omni_host.report.views import ready

    request = BenchRequest(targets(args), ssh_options(args), record=args.baseline,
                           force=args.force, wait_s=args.wait, sweep=args.sweep_split,
                           knob=args.knob, why=args.why,
                           pairs=args.pairs, waivers=args.waivers, store_root=args.report_dir,
                           store=not args.no_store,
                           inventory=str(args.inventory) if args.inventory else None,
                           probe_timeout_s=args.probe_timeout, hint_args=hint_args(args),
                           ready=lambda: ready(args.format))
    try:
        done = run(request)
    except KeyboardInterrupt as exc:  # the collector's process group went with the session
        err("bench interrupted: llama-bench stopped with its session; nothing stored")
        return EXIT_TERMINATED if interrupts.terminated(exc) else EXIT_INTERRUPTED
    for line in done.warnings:
        err(line)
    report = done.run.report
    for host in report.unreachable:
        err(f"{host.host}: unreachable: {host.error}")
    history = done.run.history
    assert history is not None  # a bench reads the store: its run keeps what it read
    emit(done.run.report, args.format, args.output, lambda: history, args.verbosity)
    for one in done.hosts:
        for line in one.warnings:
            err(line)
        if one.refused_baseline:
            err(f"{one.report.host}: --baseline refused: {one.refused_baseline}; the run is "
                "stored as evidence, the baseline is unchanged")
        if one.recorded and args.no_store:
            err(f"{one.report.host}: not stored (--no-store): this run is not a baseline")
        elif one.recorded:
            err(f"{one.report.host}: this run is the host's baseline from now on")
        elif one.baseline:
            err(f"{one.report.host}: judged against baseline {one.baseline}")
    if done.stored is not None:
        err(f"bench stored in {done.stored}")
    return EXIT_USAGE if any(one.refused_baseline for one in done.hosts) else exit_code(report)
