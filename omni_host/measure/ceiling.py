"""The ceiling of generation, pure: the bytes one generated token reads on each device, from
the model's own tensor table, at that device's memory bandwidth.

* **Where each tensor lies** follows llama.cpp's loader (``llama_model::load_tensors``): the
  token embedding stays on the CPU (a token reads one row of it); with ``-ngl N`` the last N
  layers of the ``block_count`` + 1 (the output layer counts as one) go to the GPUs, the
  repeating layers split among them by ``-ts`` (default: their free memory) in order;
  ``-sm none`` keeps them on the main GPU; ``-sm row`` splits each GPU layer's matrices across
  the GPUs by ``-ts``, read side by side. ``-ot`` patterns (``tensor_buft_overrides``) move a
  tensor to the buffer they name, the first match winning, then ``-ncmoe N`` moves the first
  N layers' expert tensors to the CPU, as llama-bench appends it.
* **What a token reads**: every tensor of its layers once, except the expert tensors of a
  mixture of experts (``ffn_{gate,up,down}_exps``: one tensor holds every expert), of which it
  reads ``expert_used_count`` of ``expert_count``. Shared experts, routers, attention and
  dense layers are read whole. The KV cache is left out (small beside the weights at the
  depths llama-bench generates at).
* **The time**: a token passes the devices in turn (layers), so their times add; under
  ``-sm row`` the GPUs read at once (their longest counts). The ceiling is one token over
  that time; the device that takes longest is what limits it. Bandwidth: GPU, NVML's bus
  width x maximum memory clock x 2; CPU, the memory channels that hold DIMMs x 8 bytes x
  their configured speed (dmidecode), or on AMD Zen 3 and later the CCD links' ~64 GB/s each
  where that is lower. Weights on the CPU are read by the CPU in generation: no PCIe
  transfer bounds it.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from omni_host.measure.context import CCD_LINKS, CPU_BANDWIDTH
from omni_host.measure.patterns import linear
from omni_host.probes.parsers.bench import BenchTest, split_values
from omni_host.probes.parsers.bench_run import BenchRun, TensorMap

CPU = "CPU"
ALL_LAYERS = 99  # llama-bench's default -ngl
EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps\.")
LAYER = re.compile(r"^blk\.(\d+)\.")
ROW = "GPU*"  # a tensor split by rows across every GPU
# llama-bench's model_type starts with the GGUF architecture: these are mixtures of experts.
MOE_WORDS = ("moe", "deepseek", "mixtral", "gpt-oss", "llama4", "dbrx", "grok", "arctic", "jamba",
             "hunyuan", "bailing", "minimax", "olmoe")


@dataclass(frozen=True)
class Placement:
    """Where llama.cpp puts a model's tensors, from one llama-bench test's parameters."""

    n_gpu_layers: int
    gpus: int
    split_mode: str  # layer, row, none
    main_gpu: int
    shares: tuple[float, ...]  # each GPU's share of the layers (normalised)
    overrides: tuple[tuple[str, str], ...]  # (pattern, device), first match wins
    n_cpu_moe: int = 0  # -ncmoe: the experts of the first N layers on the CPU (after -ot)


@dataclass(frozen=True)
class Ceiling:
    bytes_by_device: dict[str, float]  # read per generated token
    gbs_by_device: dict[str, float]
    seconds_by_device: dict[str, float]
    tokens_per_s: float
    limit: str  # the device that takes longest
    parallel_gpus: bool


def _device(buffer: str) -> str | None:
    """llama.cpp's buffer type name as a device: CPU (host memory) or GPU<n>."""
    name = buffer.strip().upper()
    if name.startswith("CPU") or "HOST" in name:
        return CPU
    match = re.search(r"(\d+)$", name)
    return f"GPU{int(match.group(1))}" if match else None


def placement(params: dict[str, Any], free_bytes: list[int]) -> Placement | str:
    """The placement a test ran under (``free_bytes``: each GPU's free memory before it, the
    default split), or why it cannot be told."""
    gpus = len(free_bytes)
    ngl = params.get("n_gpu_layers", ALL_LAYERS)
    if not isinstance(ngl, int) or isinstance(ngl, bool):
        return f"-ngl {ngl!r} is not a layer count"
    split_mode = str(params.get("split_mode") or "layer")
    given = split_values(params)
    weights = given[:gpus] if gpus and len(given) >= gpus and sum(given[:gpus]) > 0 else \
        [float(f) for f in free_bytes] if free_bytes and sum(free_bytes) > 0 else [1.0] * gpus
    total = sum(weights) or 1.0
    overrides: list[tuple[str, str]] = []
    for item in str(params.get("tensor_buft_overrides") or "none").split(";"):
        pattern, _, buffer = item.rpartition("=")
        device = _device(buffer) if pattern else None
        if item.strip() in ("", "none"):
            continue
        if device is None:
            return f"-ot {item!r}: buffer {buffer!r} is not a CPU or a numbered GPU"
        compiled = linear(pattern)
        if isinstance(compiled, str):
            return f"-ot pattern {pattern[:80]!r} {compiled}: not evaluated"
        overrides.append((pattern, device))
    if len(overrides) > MAX_OVERRIDES:
        return f"{len(overrides)} -ot patterns: more than {MAX_OVERRIDES} are not evaluated"
    n_cpu_moe = params.get("n_cpu_moe") or 0
    main = params.get("main_gpu") or 0
    return Placement(ngl if ngl >= 0 else 10**6, gpus, split_mode,
                     main if isinstance(main, int) else 0,
                     tuple(w / total for w in weights), tuple(overrides),
                     n_cpu_moe if isinstance(n_cpu_moe, int) and n_cpu_moe > 0 else 0)


MAX_OVERRIDES = 64  # -ot as llama-bench's record echoes it, from the host


def layer_device(il: int, n_layer: int, p: Placement) -> str:
    """Layer ``il`` (``n_layer``: the output layer) as llama.cpp assigns it."""
    if p.gpus == 0:
        return CPU
    start = max(n_layer + 1 - p.n_gpu_layers, 0)
    active = min(p.n_gpu_layers, n_layer + 1)
    if il < start or il - start >= active:
        return CPU
    if p.split_mode == "none":
        return f"GPU{p.main_gpu}"
    if p.split_mode == "row":
        return ROW
    cumulative = [sum(p.shares[:i + 1]) for i in range(p.gpus)]
    return f"GPU{min(bisect.bisect_right(cumulative, (il - start) / active), p.gpus - 1)}"


def n_layers(tensors: TensorMap) -> int:
    """The model's repeating layers (its block count, else the highest ``blk.N`` + 1)."""
    return tensors.block_count or 1 + max(
        (int(m.group(1)) for n, _, _ in tensors.tensors if (m := LAYER.match(n))), default=-1)


def placed(tensors: TensorMap, p: Placement) -> Iterator[tuple[str, int, str]]:
    """(name, bytes, device) of each tensor where llama.cpp puts it (``ROW``: split by rows
    across the GPUs); a tied output (no ``output.weight``) is the embedding once more, on the
    output layer's device."""
    n_layer = n_layers(tensors)
    output = layer_device(n_layer, n_layer, p)
    for name, size, _ in tensors.tensors:
        layer = LAYER.match(name)
        device = layer_device(int(layer.group(1)), n_layer, p) if layer else \
            output if name.startswith("output") else CPU
        device = next((d for pattern, d in p.overrides if linear(pattern).search(name)), None) \
            or (CPU if p.n_cpu_moe and layer and int(layer.group(1)) < p.n_cpu_moe
                and EXPERTS.search(name) else device)
        yield name, size, device
    if not any(n == "output.weight" for n, _, _ in tensors.tensors):
        embedding = next((size for n, size, _ in tensors.tensors if n == "token_embd.weight"), 0)
        if embedding:
            yield "output.weight (tied)", embedding, output


def spread_rows(device: str, amount: float, p: Placement) -> Iterator[tuple[str, float]]:
    """``amount`` on ``device``; under ``ROW``, each GPU's share of it."""
    if device == ROW:
        yield from ((f"GPU{i}", amount * share) for i, share in enumerate(p.shares))
    else:
        yield device, amount


def bytes_per_token(tensors: TensorMap, p: Placement) -> dict[str, float]:
    """The bytes a generated token reads, per device."""
    used = tensors.expert_used_count / tensors.expert_count \
        if tensors.expert_count and tensors.expert_used_count else 1.0
    rows = {n: r for n, _, r in tensors.tensors}
    read: dict[str, float] = {}
    for name, size, device in placed(tensors, p):
        amount = size / rows[name] if name == "token_embd.weight" else \
            size * used if EXPERTS.search(name) else float(size)  # a token reads its own row
        for where, part in spread_rows(device, amount, p):
            read[where] = read.get(where, 0.0) + part
    return read


def ceiling(read: dict[str, float], bandwidth: dict[str, float], row: bool) -> Ceiling:
    """The ceiling of ``read`` bytes per device at ``bandwidth`` bytes/s per device (every
    device that reads must have one)."""
    seconds = {d: b / bandwidth[d] for d, b in read.items() if b > 0}
    gpu = [s for d, s in seconds.items() if d != CPU]
    total = seconds.get(CPU, 0.0) + (max(gpu, default=0.0) if row else sum(gpu))
    return Ceiling({d: b for d, b in read.items() if b > 0},
                   {d: bandwidth[d] for d in seconds}, seconds, 1 / total,
                   max(seconds, key=lambda d: seconds[d]), row)




def visible_gpus(run: BenchRun) -> list[dict[str, Any]]:
    """The GPUs llama-bench saw, in its own numbering (GPU0 is the first it saw): NVML's
    list, narrowed and ordered by CUDA_VISIBLE_DEVICES where its environment set it (indices
    or UUIDs, as CUDA reads them: the list ends at the first entry that names no GPU)."""
    gpus = [g for g in run.context.get("nvml") or [] if isinstance(g, dict)]
    env = run.context.get("env") or {}
    given = env.get("CUDA_VISIBLE_DEVICES") if isinstance(env, dict) else None
    if given is None:
        return gpus
    rows = ((run.context.get("gpus") or {}).get("rows") or []) \
        if isinstance(run.context.get("gpus"), dict) else []
    uuid = {str(r.get("index")): str(r.get("uuid") or "") for r in rows if isinstance(r, dict)}
    seen: list[dict[str, Any]] = []
    for item in str(given).split(","):
        item = item.strip()
        found = next((g for g in gpus if item and (str(g.get("index")) == item or
                                                   uuid.get(str(g.get("index")), "").startswith(item)
                                                   and item.startswith("GPU-"))), None)
        if found is None or found in seen:
            break
        seen.append(found)
    return seen


def _bandwidths(run: BenchRun, context: dict[str, Any]) -> dict[str, float]:
    """Each device's memory bandwidth in bytes/s, where known (GPUs as llama-bench numbers
    them: ``visible_gpus``)."""
    found = {f"GPU{i}": g["bus_width_bits"] / 8 * g["max_mem_clock_mhz"] * 1e6 * 2
             for i, g in enumerate(visible_gpus(run))
             if g.get("bus_width_bits") and g.get("max_mem_clock_mhz")}
    cpu = [v for v in (context.get(CPU_BANDWIDTH), context.get(CCD_LINKS)) if v]
    if cpu:
        found[CPU] = min(cpu) * 1e9
    return found


def _dense_fallback(run: BenchRun, test: BenchTest) -> dict[str, float] | str:
    """Without the tensor table (a bench recorded before it was read): llama-bench's model
    size, for a dense model with every layer on one GPU."""
    assert run.result is not None
    model_type = (run.result.model_type or "").lower()
    if not run.result.model_size_bytes:
        return "llama-bench did not state the model's size"
    if any(word in model_type for word in MOE_WORDS):
        return "a mixture-of-experts model, and no tensor table to count its active experts"
    ngl = test.params.get("n_gpu_layers")
    gpus = len(visible_gpus(run))
    if not gpus or not isinstance(ngl, int) or 0 <= ngl < ALL_LAYERS:
        return "layers on the CPU, and no tensor table to place them"
    free = [0] * gpus
    where = placement(test.params, free)
    if isinstance(where, str):
        return where
    if where.split_mode == "none" or gpus == 1:
        return {f"GPU{where.main_gpu if gpus > 1 else 0}": float(run.result.model_size_bytes)}
    return {f"GPU{i}": run.result.model_size_bytes * share for i, share in enumerate(where.shares)}


# A device whose bandwidth is unknown but which reads under this per token (the embedding's
# row a token looks up: 4 KiB on a 2048-wide F16 model) takes microseconds at any memory's
# speed: it is left out of the time, never a reason to claim nothing.
NEGLIGIBLE_BYTES = 1 << 20


def _reads(run: BenchRun, test: BenchTest) -> tuple[dict[str, float] | str, str, bool]:
    """(bytes per token per device, or why not; where they came from; split by rows)."""
    free = [int(g.get("memory_free_bytes") or 0) for g in visible_gpus(run)]
    where = placement(test.params, free)
    if isinstance(where, str):
        return where, "", False
    if isinstance(run.tensors, TensorMap):
        return bytes_per_token(run.tensors, where), "the GGUF tensor table", \
            where.split_mode == "row"
    return _dense_fallback(run, test), "llama-bench's model size", where.split_mode == "row"


def _all_cpu_rate(read: dict[str, float], test: BenchTest) -> float | None:
    """Bytes/s the CPU read where a test put every weight on it (its bytes per token x its
    tokens/s: the CPU's effective bandwidth); None for any other placement."""
    if not read.get(CPU) or sum(b for d, b in read.items() if d != CPU) >= NEGLIGIBLE_BYTES:
        return None
    return read[CPU] * test.estimate.center_ts


def _cpu_rate(read: dict[str, float], bandwidth: dict[str, float], test: BenchTest,
              row: bool) -> float | None:
    """Bytes/s the CPU read weights at in a test: an all-CPU test's own rate; else, where the
    CPU's share is not negligible and every GPU's bandwidth is known, what its share reached
    with the GPUs' parts counted at their ceiling (a floor); None otherwise."""
    all_cpu = _all_cpu_rate(read, test)
    if all_cpu is not None or read.get(CPU, 0) < NEGLIGIBLE_BYTES:
        return all_cpu
    gpus = [b / bandwidth[d] if d in bandwidth else math.inf for d, b in read.items()
            if d != CPU and b > 0]
    rest = 1 / test.estimate.center_ts - ((max(gpus) if row else sum(gpus)) if gpus else 0.0)
    return read[CPU] / rest if 0 < rest < math.inf else None


FAR_BELOW = 0.25  # a run under a quarter of its memory ceiling is limited by something else


def limit_words(device: str, *, share: float | None = None, fraction: float | None = None,
                measured: bool = False) -> str:
    """What limits a token, said one way for the bench's ceiling and the plan's prediction
    (issue 63: "tg32 at 2% of its ceiling (CPU memory limits it)" beside the plan's "CPU memory
    (100% of a token's time)"). ``share``: of a token's time, the device's; ``fraction``: of
    the bandwidth ceiling, what the run reached (under FAR_BELOW, memory does not limit it);
    ``measured``: the device's rate is one a test reached (its compute in it), not its
    memory's bandwidth."""
    part = f" ({share:.0%} of a token's time)" if share is not None else ""
    if measured:
        return f"{device} at the rate a bench measured{part} limits it"
    if fraction is not None and fraction < FAR_BELOW:
        return (f"{device} memory would limit it at the ceiling{part}; at {fraction:.0%} of "
                "it, memory bandwidth does not")
    return f"{device} memory{part} limits it"


def test_ceiling(run: BenchRun, test: BenchTest, context: dict[str, Any],
                 measured: tuple[str, float] | None = None) -> dict[str, Any]:
    """What the memory system allows a generation test (bytes per token per device, at each
    device's bandwidth) and what limits it, or why no ceiling is claimed. ``measured``: the
    CPU's rate an all-CPU test of the same run reached (name, bytes/s), used where the
    theoretical one is unknown: then the figure is a prediction, not a ceiling."""
    if run.result is None or test.kind != "tg":
        return {"why_not": "only generation has a bandwidth ceiling"}
    return _judged(test, _reads(run, test), _bandwidths(run, context), context, measured)


def _judged(test: BenchTest, reads: tuple[dict[str, float] | str, str, bool],
            known: dict[str, float], context: dict[str, Any],
            measured: tuple[str, float] | None) -> dict[str, Any]:
    read, source, row = reads
    if isinstance(read, str):
        return {"why_not": read}
    bandwidth = {d: b for d, b in known.items() if math.isfinite(b) and b > 0}
    read = {d: b for d, b in read.items() if d in bandwidth or b >= NEGLIGIBLE_BYTES}
    if sum(read.values()) < NEGLIGIBLE_BYTES:  # a 300 KB model divided by zero here
        return {"why_not": f"a token reads {sum(read.values()) / 1024:.0f} KiB of this model: "
                "too small for a memory-bandwidth ceiling"}
    basis = "theoretical"
    if CPU in read and CPU not in bandwidth and measured is not None \
            and measured[0] != test.name:
        bandwidth[CPU], basis = measured[1], f"the CPU rate {measured[0]} reached"
    per_device = {d: round(b / 1e9, 3) for d, b in read.items() if b > 0}
    unknown = sorted(d for d, b in read.items() if b > 0 and d not in bandwidth)
    cpu_rate = _cpu_rate(read, bandwidth, test, row)
    if unknown:
        why = ("the CPU's memory bandwidth is unknown (memory.channels: dmidecode, as root, "
               "reads it; or add -ngl 0 to the bench's args, to measure it)" if unknown == [CPU]
               else f"no memory bandwidth known for {', '.join(unknown)} (NVML)")
        if measured is not None and measured[0] == test.name:
            why = "this test measures the CPU's rate the others are predicted at"
        out_why: dict[str, Any] = {"why_not": why, "gb_per_token": per_device}
        if cpu_rate is not None:
            out_why["cpu_effective_gbs"] = round(cpu_rate / 1e9, 1)
        return out_why
    c = ceiling(read, bandwidth, row)
    achieved = test.estimate.center_ts  # the verdict's estimator: the warm-up repetition left out
    out: dict[str, Any] = {
        "ceiling_ts": round(c.tokens_per_s, 1), "fraction": round(achieved / c.tokens_per_s, 3),
        "bytes_per_token": round(sum(c.bytes_by_device.values())),
        "bandwidth_gbs": [round(c.gbs_by_device[d] / 1e9, 1) for d in c.gbs_by_device],
        "devices": {d: {"gb_per_token": per_device[d], "gbs": round(c.gbs_by_device[d] / 1e9, 1),
                        "ms": round(c.seconds_by_device[d] * 1e3, 3)} for d in c.seconds_by_device},
        "limit": f"{c.limit} memory", "source": source, "basis": basis}
    if CPU in c.bytes_by_device and basis == "theoretical":
        channels, links = context.get(CPU_BANDWIDTH), context.get(CCD_LINKS)
        out["cpu_bandwidth_from"] = ("the memory channels with DIMMs" if channels and
                                     (not links or channels <= links) else
                                     "the CCD links (~64 GB/s each): an upper bound")
    if cpu_rate is not None:
        out["cpu_effective_gbs"] = round(cpu_rate / 1e9, 1)
    return out


def run_ceilings(run: BenchRun, context: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every generation test's ceiling. Where the CPU's bandwidth is unknown and the run holds
    a test with every weight on the CPU (-ngl 0), the rate that test reached predicts the
    others (its bytes per token x its tokens/s: the CPU's effective bandwidth, same threads,
    same binary, same minutes). Each test is placed once, the bandwidths read once."""
    if run.result is None:
        return {}
    tests = [t for t in run.result.tests if t.kind == "tg"]
    reads = {t.name: _reads(run, t) for t in tests}
    known = _bandwidths(run, context)
    measured = None
    if CPU not in known:
        measured = next(((t.name, rate) for t in tests
                         if isinstance(read := reads[t.name][0], dict)
                         and (rate := _all_cpu_rate(read, t)) is not None), None)
    return {t.name: _judged(t, reads[t.name], known, context, measured) for t in tests}
