"""Twins (issue 67): in a fleet bench, hosts with the same GPUs, driver, CUDA, llama-bench
build, model and comparability key are each other's reference. Identical GPUs differ by 8% on
average and 22% at worst ("Not All GPUs Are Created Equal"); a host's own past cannot show
that it was always the slow one, its twins can. A host whose rate sits below the median of
at least two twins past the noise (SIGMAS x the largest noise their own verdicts measured:
how far a host's runs wander, not one run's repetitions; at least MIN_GAP) is named, with
what differs between its context and theirs. Where a host's verdict is missing (no baseline
yet), the twins are not told apart.

On one box (``gpu_twins``), the GPUs of one model benched each alone (``-sm none -mg 0,1,...``:
llama-bench names the tests ``tg128 mg=N``) are twins the same way, by the same rule: a GPU
slower than the median of at least two others is named, with what differs in its own
context (clocks, power limit, PCIe link). Its index is the GPU's in the context only where
CUDA_VISIBLE_DEVICES was not set (a mask renumbers them)."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence

from omni_host.measure.context import diff
from omni_host.measure.series import SIGMAS
from omni_host.outcome import BenchOutcome, JudgedTest, MeasuredTest
from omni_host.reports import HostReport

MIN_TWINS = 2  # a host is compared with two twins at least: with one, which is slow is unknown
MIN_GAP = 0.02  # hosts closer than 2% are not told apart (the proof's floor, docs/plan.md)
# what makes two hosts twins: the same of each (every GPU's name too)
IDENTITY = ("driver", "cuda", "backends", "llama_bench_sha256", "model_fingerprint")
MAIN_GPU = re.compile(r" mg=(\d+)(?= |$)")  # a test's GPU in its name (-mg varied in one run)


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
            slower = [said for test, mine in bench.tests.items()
                      if (said := _slower(test, mine, [b.tests[test] for _, b in others],
                                          [b.verdicts.get(test) for _, b in group])) is not None]
            if not slower:
                continue
            changes, _ = diff(others[0][1].context, bench.context)
            differs = [c.line() for c in changes if not c.key.endswith(".uuid")]
            out.append(f"{name} runs slower than its {len(others)} twins ("
                       f"{', '.join(n for n, _ in others)}: the same GPUs, driver, build, model "
                       f"and args): {'; '.join(slower)}; what differs from {others[0][0]}: "
                       + ("; ".join(differs) if differs else "nothing the bench records"))
    return out


def _slower(test: str, mine: MeasuredTest, others: list[MeasuredTest],
            judged: list[JudgedTest | None]) -> str | None:
    """How far ``mine`` sits below the median of its twins' rates, in words, where that is past
    SIGMAS x the largest noise the verdicts of all of them measured (how far runs wander,
    between runs once known; at least MIN_GAP); None where it is not, or where any verdict is
    missing (the noise unknown: the twins are not told apart)."""
    if any(v is None for v in judged) or not others:
        return None
    noise = max(v.noise for v in judged if v is not None)
    level = statistics.median(t.rate for t in others)
    line = max(SIGMAS * noise * math.sqrt(1 + 1 / len(others)), MIN_GAP)
    fell = 1 - mine.rate / level if level > 0 else 0.0
    if fell <= line:
        return None
    return (f"{test} {fell:.1%} below its twins' median ({mine.rate:.1f} vs {level:.1f} t/s, "
            f"past {line:.1%}: 3 x the noise of their runs)")


def gpu_twins(host: str, bench: BenchOutcome) -> list[str]:
    """The GPUs of one box slower than their twins in it, in words: the tests that ran each on
    one GPU (``-sm none``, ``mg=N`` in the name) grouped by the test, the rest of its key and
    the GPU's model; each GPU compared with the others of its group as ``twins`` compares
    hosts, with what differs in the GPU's own context."""
    context = bench.context
    if context.get("env.CUDA_VISIBLE_DEVICES") is not None:
        return []  # the indices llama-bench saw are not the context's
    groups: dict[tuple[str, tuple[tuple[str, str], ...], str],
                 dict[int, tuple[str, MeasuredTest]]] = {}
    for name, test in bench.tests.items():
        found = MAIN_GPU.search(name)
        gpu_name = str(context.get(f"gpu.{found.group(1)}.name", "")) if found else ""
        if found is None or not gpu_name or test.params.get("split_mode") != "none":
            continue
        index = int(found.group(1))
        rest = tuple(sorted((k, str(v)) for k, v in test.key.items() if k != "main_gpu"))
        base = MAIN_GPU.sub("", name)
        groups.setdefault((base, rest, gpu_name), {})[index] = (name, test)
    out = []
    for (base, _, gpu_name), by_gpu in groups.items():
        if len(by_gpu) < MIN_TWINS + 1:
            continue
        for index, (_, mine) in sorted(by_gpu.items()):
            others = {i: t for i, t in by_gpu.items() if i != index}
            said = _slower(base, mine, [t for _, t in others.values()],
                           [bench.verdicts.get(n) for n, _ in by_gpu.values()])
            if said is None:
                continue
            first = min(others)
            differs = [f"{k}: {context.get(f'gpu.{first}.{k}')} on GPU{first}, "
                       f"{context.get(f'gpu.{index}.{k}')} here"
                       for k in _gpu_fields(context, index, first)]
            out.append(f"{host}: GPU{index} ({gpu_name}) runs slower than its {len(others)} "
                       f"twins in the box (GPU{', GPU'.join(str(i) for i in sorted(others))}: "
                       f"the same model, each benched alone, -sm none): {said}; what differs "
                       f"from GPU{first}: " + ("; ".join(differs) if differs else
                                                "nothing the bench records"))
    return out


def _gpu_fields(context: dict[str, object], index: int, other: int) -> list[str]:
    """The fields of GPU ``index``'s context that differ from GPU ``other``'s (not its uuid)."""
    fields = {k.split(".", 2)[2] for k in context
              if k.startswith((f"gpu.{index}.", f"gpu.{other}.")) and k.count(".") >= 2}
    return sorted(f for f in fields - {"uuid"}
                  if context.get(f"gpu.{index}.{f}") != context.get(f"gpu.{other}.{f}"))
