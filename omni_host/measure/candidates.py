"""The candidates of a placement plan worth trying on a host, each assessed
(``measure/placement.py``: its memory and its predicted rate), pure: the operator's args and
llama.cpp's ``--fit`` answer as given; the most whole layers that fit with ``-ts``
proportional to VRAM (the registry's style), and half as many; every layer on the GPUs with
the routed experts on the CPU; as many expert layers on the GPUs as fit (``-ncmoe``), and
steps between; every layer on one GPU (``-sm none``) where it fits; the CPU threads at the
physical cores the bench may use (never more: SMT siblings cost); the KV cache at q8_0 with
the expert layers the room it frees brings onto the GPUs, and the fastest placement that
reads weights on the CPU at half the physical cores (levers --fit leaves alone)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace

from omni_host.measure.ceiling import EXPERTS, n_layers
from omni_host.measure.placement import (
    Assessed,
    Candidate,
    Host,
    PlanItem,
    Workload,
    assess,
    candidate_of,
)
from omni_host.probes.parsers.bench_run import TensorMap

STEPS = 6  # -ncmoe values between the fewest that fit and every layer's experts on the CPU
SHIFTS = tuple(range(5, 45, 5))  # points of the first GPU's share tried around the free split


def _free_split(host: Host) -> tuple[int, ...]:
    free = [max(g.free, 0) for g in host.gpus]
    total = sum(free) or 1
    split = [round(100 * f / total) for f in free]
    return tuple(split) if len(split) > 1 else ()


def _vram_split(host: Host) -> tuple[int, ...]:
    total = sum(g.total for g in host.gpus) or 1
    split = [round(100 * g.total / total) for g in host.gpus]
    return tuple(split) if len(split) > 1 else ()


def _splits(host: Host) -> Iterator[tuple[int, ...]]:
    """The free-memory split, then (two GPUs) the first GPU's share shifted, nearest first."""
    base = _free_split(host)
    yield base
    if len(base) == 2:
        for shift in SHIFTS:
            for sign in (1, -1):
                first = base[0] + sign * shift
                if 1 <= first <= 99:
                    yield first, 100 - first


def _fitting(tensors: TensorMap, cand: Candidate, host: Host, work: Workload,
             *, vary_split: bool) -> Assessed | None:
    """The candidate (under the first split that fits, where ``vary_split``), if it fits."""
    for split in _splits(host) if vary_split else (cand.split,):
        done = assess(tensors, replace(cand, split=split), host, work)
        if isinstance(done, Assessed) and done.fits:
            return done
    return None


def _last_true(ok: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest n in [low, high] with ok(n), for ok true up to a point and false after."""
    if not ok(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if ok(mid) else (low, mid - 1)
    return low


def _first_true(ok: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest n in [low, high] with ok(n), for ok false up to a point and true after."""
    if not ok(high):
        return None
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if ok(mid) else (mid + 1, high)
    return low


def _fewest_on_cpu(tensors: TensorMap, cand: Candidate, host: Host, work: Workload) -> int | None:
    """The fewest layers whose experts go to the CPU (``-ncmoe``) for ``cand`` to fit (more
    on the CPU, less GPU memory: monotone), under the first split that fits on several GPUs."""
    vary = len(host.gpus) > 1
    return _first_true(lambda k: _fitting(tensors, replace(cand, ncmoe=k), host, work,
                                          vary_split=vary) is not None, 0, n_layers(tensors))


def is_moe(tensors: TensorMap) -> bool:
    return tensors.expert_count > 1 and any(EXPERTS.search(n) for n, _, _ in tensors.tensors)


def _whole_layers(tensors: TensorMap, host: Host, work: Workload,
                  threads: int | None) -> Iterator[Candidate]:
    """The most whole layers that fit, split by VRAM (the registry's style), and half as many."""
    n_layer = n_layers(tensors)
    whole = Candidate("layers", "", "plan", split=_vram_split(host), threads=threads)

    def whole_fits(n: int) -> bool:
        done = assess(tensors, replace(whole, ngl=n), host, work)
        return isinstance(done, Assessed) and done.fits

    n = _last_true(whole_fits, 0, n_layer + 1)  # more layers, more memory: monotone
    if n is None:
        yield replace(whole, ngl=0, words="whole layers: not even one fits")
        return
    cand = replace(whole, ngl=n, words=f"{n} whole layer(s) of {n_layer + 1} on the GPU(s)"
                   + (f", split {'/'.join(map(str, whole.split))} by VRAM"
                      if whole.split else "") + ", the rest on the CPU")
    yield cand
    if n >= 4:  # half as many: how the rate falls with the layers left on the CPU
        yield replace(cand, key="layers-half", ngl=n // 2,
                      words=cand.words.replace(f"{n} whole", f"{n // 2} whole"))


def _on_gpus(tensors: TensorMap, host: Host, work: Workload,
             threads: int | None) -> Iterator[tuple[Candidate, Assessed | None]]:
    """Every layer on the GPUs: a mixture's routed experts all on the CPU, then as many
    expert layers on the GPUs as fit and steps between; a dense model's, where it fits."""
    n_layer, vary = n_layers(tensors), len(host.gpus) > 1
    if not is_moe(tensors):
        dense = Candidate("all-gpu", "every layer on the GPU(s)", "plan", threads=threads)
        done_dense = _fitting(tensors, dense, host, work, vary_split=vary)
        if done_dense is not None:
            yield dense, done_dense
        return
    all_cpu = Candidate("experts-cpu", f"every layer on the GPU(s), the routed experts of all "
                        f"{n_layer} layers on the CPU", "plan", ncmoe=n_layer, threads=threads)
    yield all_cpu, _fitting(tensors, all_cpu, host, work, vary_split=vary)
    k_min = _fewest_on_cpu(tensors, all_cpu, host, work)
    if k_min is None or k_min >= n_layer:
        return
    step = max(1, math.ceil((n_layer - k_min) / STEPS))
    for k in range(k_min, n_layer, step):
        cand = replace(all_cpu, key=f"ncmoe-{k}", ncmoe=k,
                       words=f"every layer on the GPU(s), the experts of {n_layer - k} "
                             f"layer(s) too (the first {k} layers' experts on the CPU)")
        stepped = _fitting(tensors, cand, host, work, vary_split=vary)
        if stepped is not None:
            yield cand, stepped


def _kv_q8(tensors: TensorMap, host: Host, work: Workload,
           threads: int | None) -> Iterator[tuple[Candidate, Assessed]]:
    """A lever --fit leaves alone: the KV cache at q8_0 (about half of f16's bytes), with the
    expert layers the room it frees brings onto the GPUs (the fewest ``-ncmoe`` that fits).
    Only where the args set no cache type and turn flash attention on (llama.cpp quantizes
    the V cache only with it), for a mixture whose f16 cache leaves experts on the CPU."""
    if work.cache_given or not work.flash_attn or not is_moe(tensors):
        return
    n_layer, vary = n_layers(tensors), len(host.gpus) > 1
    base = Candidate("kv-q8", "", "plan", ncmoe=n_layer, threads=threads, cache="q8_0")
    k_f16 = _fewest_on_cpu(tensors, replace(base, cache=None), host, work)
    k_q8 = _fewest_on_cpu(tensors, base, host, work)
    if k_q8 is None or (k_f16 is not None and k_q8 >= k_f16):
        return  # q8_0 frees no expert layer
    cand = replace(base, key=f"kv-q8-ncmoe-{k_q8}", ncmoe=k_q8,
                   words=f"every layer on the GPU(s), the KV cache at q8_0 (half of f16's) and "
                         f"the experts of {n_layer - k_q8} layer(s) too (the first {k_q8} "
                         f"layers' experts on the CPU"
                         + ("" if k_f16 is None else f"; f16 leaves {k_f16} there") + ")")
    done = _fitting(tensors, cand, host, work, vary_split=vary)
    if done is not None:
        yield cand, done


HALF_THREADS = "threads-half"  # the key of the thread lever's candidate: --prove measures it


def _half_threads(found: list[PlanItem], host: Host, tensors: TensorMap,
                  work: Workload) -> Iterator[tuple[Candidate, Assessed | str]]:
    """A lever --fit leaves alone: the predicted fastest placement that reads weights on the
    CPU, at half the physical cores (a CPU's memory channels may be full at fewer threads
    than cores; SMT siblings aside, the public reports differ by 20% either way). No bench
    measured that rate, so it has no prediction of its own: ``plan --prove`` measures it."""
    cores = host.physical_cores
    if not cores or cores < 4:
        return
    best = next((item for item in _ranked(found) if isinstance(item, Assessed) and item.fits
                 and item.tg is not None and item.candidate.origin == "plan"
                 and item.need.get("CPU", {}).get("weights", 0) > 0), None)
    if best is None:
        return
    cand = replace(best.candidate, key=HALF_THREADS, threads=cores // 2,
                   words=f"{best.candidate.words}, at {cores // 2} threads (half the physical "
                         "cores; --prove measures it)")
    yield cand, assess(tensors, cand, host, work)


def candidates(tensors: TensorMap, host: Host, work: Workload, current: Candidate | None,
               fit: Candidate | None) -> list[PlanItem]:
    """Every candidate assessed (or with why it cannot be), the fitting ones first, fastest
    predicted first; the ones that do not fit after them, nearest to fitting first."""
    gpus, threads = len(host.gpus), host.physical_cores
    found: list[PlanItem] = []

    def take(cand: Candidate, done: Assessed | str | None = None) -> None:
        done = done if done is not None else assess(tensors, cand, host, work)
        found.append(done if isinstance(done, Assessed) else (cand, done))

    for given in (current, fit):
        if given is not None:
            take(given)
    if not gpus:
        take(Candidate("cpu", "every layer on the CPU", "plan", ngl=0, threads=threads))
        return _ranked(found)
    for whole in _whole_layers(tensors, host, work, threads):
        take(whole)
    for cand, done in _on_gpus(tensors, host, work, threads):
        take(cand, done)
    for cand, done in _kv_q8(tensors, host, work, threads):
        take(cand, done)
    if gpus > 1:
        main = max(range(gpus), key=lambda i: host.gpus[i].free)
        take(Candidate("sm-none", f"every layer on GPU{main} alone (-sm none)", "plan",
                       mode="none", main=main, threads=threads))
    for half, assessed in list(_half_threads(found, host, tensors, work)):
        take(half, assessed)
    return _ranked(found)


def _ranked(found: list[PlanItem]) -> list[PlanItem]:
    seen: set[tuple[str, ...]] = set()
    unique: list[PlanItem] = []
    for item in found:
        flags = candidate_of(item).bench_flags()
        if flags in seen and candidate_of(item).origin == "plan":
            continue
        seen.add(flags)
        unique.append(item)

    def order(item: PlanItem) -> tuple[int, float]:
        if not isinstance(item, Assessed):
            return 3, 0.0
        if not item.fits:
            return 2, float(sum(item.short.values()))
        return (0, -item.tg) if item.tg is not None else (1, 0.0)

    return sorted(unique, key=order)

