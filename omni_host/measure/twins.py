"""Twins (issue 67): in a fleet bench, hosts with the same GPUs, driver, CUDA, llama-bench
build, model and comparability key are each other's reference. Identical GPUs differ by 8% on
average and 22% at worst ("Not All GPUs Are Created Equal"); a host's own past cannot show
that it was always the slow one, its twins can. A host whose rate sits below the median of
at least two twins past the noise (SIGMAS x the largest noise their own verdicts measured:
how far a host's runs wander, not one run's repetitions; at least MIN_GAP) is named, with
what differs between its context and theirs. Where a host's verdict is missing (no baseline
yet), the twins are not told apart."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from omni_host.measure.context import diff
from omni_host.measure.series import SIGMAS
from omni_host.outcome import BenchOutcome
from omni_host.reports import HostReport

MIN_TWINS = 2  # a host is compared with two twins at least: with one, which is slow is unknown
MIN_GAP = 0.02  # hosts closer than 2% are not told apart (the proof's floor, docs/plan.md)
# what makes two hosts twins: the same of each (every GPU's name too)
IDENTITY = ("driver", "cuda", "backends", "llama_bench_sha256", "model_fingerprint")


def _identity(bench: BenchOutcome) -> tuple[object, ...]:
    context = bench.context
    gpus = tuple(sorted((k, v) for k, v in context.items()
                        if k.startswith("gpu.") and k.endswith(".name")))
    keys = tuple(sorted((name, t.key_items()) for name, t in bench.tests.items()))
    return (gpus, *(context.get(k) for k in IDENTITY), keys)


def benched(hosts: Sequence[HostReport]) -> list[tuple[str, BenchOutcome]]:
    """The hosts of a report that hold a bench's tests: (name, outcome)."""
    return [(h.host, b) for h in hosts if h.reachable and (b := h.bench) is not None and b.tests]


def twins(benches: Sequence[tuple[str, BenchOutcome]]) -> list[str]:
    """Each host slower than its twins, in words: the test, how much slower than the twins'
    median (a ratio of medians), the noise it passed, and what differs in its context."""
    groups: dict[tuple[object, ...], list[tuple[str, BenchOutcome]]] = {}
    for name, bench in benches:
        groups.setdefault(_identity(bench), []).append((name, bench))
    out = []
    for group in groups.values():
        if len(group) < MIN_TWINS + 1:
            continue
        for name, bench in group:
            others = [(n, b) for n, b in group if n != name]
            slower = []
            for test, mine in bench.tests.items():
                # how far each host's runs wander, as its own verdict measured it (between
                # runs, once known): unknown for any of them, the twins are not told apart
                judged = [b.verdicts.get(test) for _, b in group]
                if any(v is None for v in judged):
                    continue
                noise = max(v.noise for v in judged if v is not None)
                rates = [b.tests[test].rate for _, b in others]
                level = statistics.median(rates)
                line = max(SIGMAS * noise * math.sqrt(1 + 1 / len(rates)), MIN_GAP)
                fell = 1 - mine.rate / level if level > 0 else 0.0
                if fell > line:
                    slower.append(f"{test} {fell:.1%} below its twins' median ({mine.rate:.1f} vs "
                                  f"{level:.1f} t/s, past {line:.1%}: 3 x the noise of their "
                                  "runs)")
            if not slower:
                continue
            changes, _ = diff(others[0][1].context, bench.context)
            differs = [c.line() for c in changes if not c.key.endswith(".uuid")]
            out.append(f"{name} runs slower than its {len(others)} twins ("
                       f"{', '.join(n for n, _ in others)}: the same GPUs, driver, build, model "
                       f"and args): {'; '.join(slower)}; what differs from {others[0][0]}: "
                       + ("; ".join(differs) if differs else "nothing the bench records"))
    return out
