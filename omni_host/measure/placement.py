"""Placement plans (issue 46), pure: where each tensor of a model goes under a placement, the
memory that takes on each device at the context a server will serve, and the generation rate
it should give.

* **Memory per device**: the weights where llama.cpp's loader puts them (``ceiling.placed``:
  ``-ngl``, ``-ts``, ``-sm``, ``-ot``, ``-ncmoe``, from the model's own tensor table); the KV
  cache of each layer on its layer's device, at the context (``-c``, padded to 256 cells as
  llama.cpp pads it) and cache types (``attn_k``/``attn_v`` rows: the KV heads x head size;
  ``attn_kv_a_mqa`` for a latent-attention model); the compute buffer llama-fit-params
  estimated for the same build and model (or ``COMPUTE_ASSUMED`` where the build has no
  llama-fit-params, said as assumed); and on each GPU the margin ``--fit`` leaves
  (``MARGIN``, 1 GiB). A candidate fits where every GPU's need is within its free memory now;
  otherwise it says by how much, on which device.
* **Predicted generation** (tg at the workload's depth): the bytes a token reads on each
  device (the weights it reads, the routed experts at ``expert_used_count`` of
  ``expert_count``, and the KV cache up to the depth) at each device's rate, the devices in
  turn (``ceiling.ceiling``). A GPU's rate is its memory bandwidth (NVML) times the fraction of
  its ceiling this host's own GPU benches reached; the CPU's is the rate a bench of this host
  measured it reading weights at (an all-CPU or hybrid run), else its memory channels' (a
  ceiling, said so). Prompt processing is not modelled: ``--prove`` measures it.
* **The stated error** (issue 63): a prediction is given with the range the measured rate is
  expected in, ``Host.ratio`` (measured / predicted) times the prediction: the lowest and the
  highest ratio of the placements this host's stored proofs measured (three or more), else of
  the 44 placements proved on a lent H100 (``LENT_RATIO``: 0.80-1.12, every cell of
  tests/fixtures/captures/plan-h100), said as not yet calibrated here; widened by how far
  the rates it used wander between runs (``Host.wander``: the relative spread of the stored
  runs of the test each rate came from, three or more, ``WANDER_Z`` of them each way). One
  stored run cannot tell that (runs of tg8 minutes apart on a 2-vCPU VM: 240-293 t/s): the
  row then says its range holds the model's error only. A prediction at the channels'
  ceiling is an upper bound and has no range.
* **Candidates** are enumerated by ``measure/candidates.py`` and assessed here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from omni_host.measure.ceiling import (
    ALL_LAYERS,
    CPU,
    NEGLIGIBLE_BYTES,
    Placement,
    bytes_per_token,
    ceiling,
    layer_device,
    limit_words,
    n_layers,
    placed,
    placement,
    spread_rows,
)
from omni_host.plan.knobs import without_options
from omni_host.probes.parsers.bench_run import TensorMap

MIB = 1 << 20
MARGIN = 1024 * MIB  # what --fit leaves free on each GPU (its default -fitt)
COMPUTE_ASSUMED = 512 * MIB  # a GPU's compute buffer where llama-fit-params gave none
CTX_PAD = 256  # llama.cpp pads the KV cache to this many cells
# measured / predicted generation over the 44 placements proved on the lent H100 (its 8 cells,
# tests/fixtures/captures/plan-h100; test_the_lent_ratio_is_the_h100_cells_own): the stated
# error of a host whose own proofs are not yet three
LENT_RATIO = (0.798, 1.12)
LENT_FROM = "not yet calibrated on this host: 44 placements proved on a lent H100 measured " \
    "0.80-1.12x their prediction"
WANDER_Z = 2.0  # how many of a rate's between-run spreads the range allows each way
UPPER_BOUND = ": an upper bound"  # how a limit says its prediction is a ceiling, not a rate


def upper_bound(limit: str | None) -> bool:
    """Whether a prediction's limit (as said and stored) makes it an upper bound: no rate,
    no stated error, nothing to calibrate it by."""
    return str(limit).endswith(UPPER_BOUND)
KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32,
                 "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}


@dataclass(frozen=True)
class Gpu:
    total: int  # bytes
    free: int  # bytes free now
    gbs: float | None  # memory bandwidth, bytes/s (NVML)


@dataclass(frozen=True)
class Host:
    gpus: tuple[Gpu, ...]
    cpu_gbs: float | None  # the rate the CPU reads weights at, bytes/s
    cpu_basis: str  # where cpu_gbs comes from, in words
    gpu_efficiency: float | None  # of the ceiling, as this host's GPU benches reached it
    physical_cores: int | None
    compute: dict[str, int] = field(default_factory=dict)  # GPU<n> -> bytes (llama-fit-params)
    # the host's memory available now (MemAvailable), bytes: what the CPU's weights and KV cache
    # must fit in; None where not read. Swap is not counted: a model in swap froze the host (F-022)
    cpu_free: int | None = None
    # the threads cpu_gbs was measured at (a stored bench's n_threads): a CPU read rate holds
    # only for the threads it was measured with (issue 63: a -t 1 rate predicted -t 2 args 3.5x
    # off); None where it is not a measurement (the channels' theoretical rate)
    cpu_threads: int | None = None
    cpu_ceiling_gbs: float | None = None  # the channels' theoretical rate, where read
    # measured / predicted generation, lowest and highest, and what it was learned from
    ratio: tuple[float, float] = LENT_RATIO
    ratio_from: str = LENT_FROM
    # how far each rate wanders between runs (CPU, GPU -> relative spread of the stored runs
    # of the test it came from); a kind missing: not known yet (fewer than three runs)
    wander: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Workload:
    ctx: int  # the context the server serves (-c): what the KV cache holds
    depth: int = 0  # the context a generated token reads (llama-bench -d)
    type_k: str = "f16"
    type_v: str = "f16"
    cache_given: bool = False  # the args set a cache type: the plan does not set another
    flash_attn: bool = False  # the args turn flash attention on (a quantized V cache needs it)


@dataclass(frozen=True)
class Candidate:
    key: str
    words: str
    origin: str  # plan, current (the operator's args), fit (llama.cpp's --fit)
    ngl: int = ALL_LAYERS
    ncmoe: int = 0
    split: tuple[int, ...] = ()  # -ts, as integers
    mode: str = "layer"
    main: int = 0
    threads: int | None = None
    overrides: tuple[tuple[str, str], ...] = ()  # (pattern, buffer), as -ot gives them
    cache: str | None = None  # the KV cache's type for K and V (-ctk/-ctv), else the args'

    def params(self) -> dict[str, Any]:
        """The placement as a llama-bench record states it (what ``ceiling.placement`` reads)."""
        return {"n_gpu_layers": self.ngl, "split_mode": self.mode, "main_gpu": self.main,
                "tensor_split": "/".join(str(s) for s in self.split),
                "tensor_buft_overrides": ";".join(f"{p}={b}" for p, b in self.overrides)
                or "none", "n_cpu_moe": self.ncmoe}

    def _flags(self, server: bool) -> Iterator[str]:
        yield from ("--n-gpu-layers" if server else "-ngl", str(self.ngl))
        if self.ncmoe:
            yield from ("--n-cpu-moe" if server else "-ncmoe", str(self.ncmoe))
        if self.mode != "layer":
            yield from ("--split-mode" if server else "-sm", self.mode)
        if self.main:
            yield from ("--main-gpu" if server else "-mg", str(self.main))
        if self.split:
            yield from ("--tensor-split", ",".join(map(str, self.split))) if server else \
                ("-ts", "/".join(map(str, self.split)))
        if self.overrides:
            yield from ("--override-tensor" if server else "-ot",
                        ("," if server else ";").join(f"{p}={b}" for p, b in self.overrides))
        if self.threads:
            yield from ("--threads" if server else "-t", str(self.threads))
        if self.cache:
            yield from ("--cache-type-k" if server else "-ctk", self.cache,
                        "--cache-type-v" if server else "-ctv", self.cache)

    def bench_flags(self) -> tuple[str, ...]:
        """As llama-bench spells them (``-ts 3/1``; ``;`` between -ot patterns)."""
        return tuple(self._flags(False))

    def server_flags(self) -> tuple[str, ...]:
        """As llama-server spells them (``--tensor-split 3,1``; ``,`` between -ot patterns)."""
        return tuple(self._flags(True))


@dataclass(frozen=True)
class Assessed:
    candidate: Candidate
    need: dict[str, dict[str, int]]  # device -> weights, kv, compute, margin (bytes)
    short: dict[str, int]  # device -> bytes it lacks; empty: it fits
    tg: float | None  # predicted generation, tokens/s
    limit: str  # what limits it (the slowest device), or why there is no prediction
    read: dict[str, float]  # bytes a token reads per device, at the depth
    # the range the measured rate is expected in (Host.ratio x tg, widened by the rates'
    # wander); None for an upper bound
    tg_range: tuple[float, float] | None = None
    wander_known: bool = False  # whether every rate it used knows how far it wanders

    @property
    def fits(self) -> bool:
        return not self.short


PlanItem = Assessed | tuple[Candidate, str]  # a candidate assessed, or with why it cannot be


def candidate_of(item: PlanItem) -> Candidate:
    return item.candidate if isinstance(item, Assessed) else item[0]


def kv_cells(ctx: int) -> int:
    return max(CTX_PAD, -(-ctx // CTX_PAD) * CTX_PAD)


def kv_row_bytes(tensors: TensorMap, work: Workload) -> dict[int, float]:
    """Bytes one context cell takes in each layer's KV cache."""
    rows = {n: r for n, _, r in tensors.tensors}
    bk, bv = KV_TYPE_BYTES.get(work.type_k, 2.0), KV_TYPE_BYTES.get(work.type_v, 2.0)
    out: dict[int, float] = {}
    for il in range(n_layers(tensors)):
        k, v = rows.get(f"blk.{il}.attn_k.weight"), rows.get(f"blk.{il}.attn_v.weight")
        if k is None and v is None:  # latent attention: the compressed KV and the rope part
            k = rows.get(f"blk.{il}.attn_kv_a_mqa.weight")
        out[il] = (k or 0) * bk + (v or 0) * bv
    return out


def where(cand: Candidate, host: Host) -> Placement | str:
    return placement(cand.params(), [g.free for g in host.gpus])


def memory_need(tensors: TensorMap, p: Placement, host: Host,
                work: Workload) -> dict[str, dict[str, int]]:
    """Per device: the weights, the KV cache at the context, the compute buffer and the
    margin (GPUs), in bytes."""
    need: dict[str, dict[str, int]] = {}

    def add(device: str, part: str, amount: float) -> None:
        for dev, share in spread_rows(device, amount, p):
            slot = need.setdefault(dev, {"weights": 0, "kv": 0, "compute": 0, "margin": 0})
            slot[part] += round(share)

    for _, size, device in placed(tensors, p):
        add(device, "weights", size)
    n_layer, cells = n_layers(tensors), kv_cells(work.ctx)
    for il, row in kv_row_bytes(tensors, work).items():
        add(layer_device(il, n_layer, p), "kv", row * cells)
    for dev, slot in need.items():
        if dev != CPU and (slot["weights"] or slot["kv"]):
            slot["compute"] = host.compute.get(dev, COMPUTE_ASSUMED)
            slot["margin"] = MARGIN
    return need


def shortfall(need: dict[str, dict[str, int]], host: Host) -> dict[str, int]:
    """The bytes each device lacks, the CPU included (against the host's available memory,
    where it was read): "fits" only where every device has room."""
    out = {}
    for dev, slot in need.items():
        if dev == CPU:
            if host.cpu_free is None:
                continue
            free = host.cpu_free
        else:
            index = int(dev[3:])
            free = host.gpus[index].free if index < len(host.gpus) else 0
        lack = sum(slot.values()) - free
        if lack > 0:
            out[dev] = lack
    return out


def cpu_rate(host: Host, threads: int | None) -> tuple[float | None, str]:
    """The rate the CPU reads weights at for a candidate run at ``threads`` (None: llama.cpp's
    default, the physical cores), and what it is: the measured rate only at the threads it
    was measured at; else the channels' theoretical rate, a ceiling; else none."""
    threads = threads or host.physical_cores
    if host.cpu_gbs and (host.cpu_threads is None or host.cpu_threads == threads):
        return host.cpu_gbs, ""
    unmeasured = f"no stored bench measured the CPU at -t {threads} (the rate known is at " \
        f"-t {host.cpu_threads})" if host.cpu_gbs else "no stored bench measured the CPU"
    if host.cpu_ceiling_gbs:
        return host.cpu_ceiling_gbs, f"the CPU at its channels' ceiling: {unmeasured}"
    return None, unmeasured


def predict(tensors: TensorMap, p: Placement, host: Host, work: Workload,
            threads: int | None = None) -> tuple[float | None, str, dict[str, float]]:
    """(tokens/s, what limits it or why there is none, bytes per token per device); the CPU's
    rate is the one measured at the candidate's ``threads`` (``cpu_rate``)."""
    read = bytes_per_token(tensors, p)
    n_layer = n_layers(tensors)
    for il, row in kv_row_bytes(tensors, work).items():
        for dev, share in spread_rows(layer_device(il, n_layer, p), row * work.depth, p):
            read[dev] = read.get(dev, 0.0) + share
    rate: dict[str, float] = {}
    for i, gpu in enumerate(host.gpus):
        if gpu.gbs:
            rate[f"GPU{i}"] = gpu.gbs * (host.gpu_efficiency or 1.0)
    cpu, caveat = cpu_rate(host, threads)
    if cpu:
        rate[CPU] = cpu
    read = {d: b for d, b in read.items() if b >= NEGLIGIBLE_BYTES or (b > 0 and d in rate)}
    unknown = sorted(d for d in read if d not in rate)
    if unknown:
        at = f"{caveat}; " if host.cpu_gbs else ""  # a rate known, at other threads
        return None, f"no read rate known for {', '.join(unknown)}" + (
            f" ({at}memory.channels: dmidecode as root; or a bench with -ngl 0)"
            if unknown == [CPU] else ""), read
    c = ceiling(read, rate, p.split_mode == "row")
    share = c.seconds_by_device[c.limit] / sum(c.seconds_by_device.values())
    said = f"; {caveat}{UPPER_BOUND}" if caveat and CPU in read else ""
    # the words the bench's ceiling says it in (one function): a CPU predicted at a rate a
    # bench measured is limited by that rate (its compute in it), not by its memory alone
    measured = c.limit == CPU and not caveat and host.cpu_basis.startswith("measured")
    words = limit_words(c.limit, share=share, measured=measured).removesuffix(" limits it")
    return c.tokens_per_s, f"{words}{said}", read


def assess(tensors: TensorMap, cand: Candidate, host: Host, work: Workload) -> Assessed | str:
    if cand.cache:  # its own cache type: the KV cache's bytes, held and read
        work = replace(work, type_k=cand.cache, type_v=cand.cache)
    p = where(cand, host)
    if isinstance(p, str):
        return p
    need = memory_need(tensors, p, host, work)
    tg, limit, read = predict(tensors, p, host, work, cand.threads)
    ranged, known = stated_range(tg, limit, read, host)
    return Assessed(cand, need, shortfall(need, host), tg, limit, read, ranged, known)


def stated_range(tg: float | None, limit: str, read: dict[str, float], host: Host
                 ) -> tuple[tuple[float, float] | None, bool]:
    """The range a prediction's measurement is expected in, and whether every rate it used
    knows how far it wanders (else the range holds the model's error alone)."""
    if tg is None or upper_bound(limit):
        return None, False
    kinds = {CPU if d == CPU else "GPU" for d in read}
    known = [host.wander[k] for k in kinds if k in host.wander]
    spread = WANDER_Z * max(known, default=0.0)
    low, high = host.ratio
    return (tg * low * max(0.0, 1 - spread), tg * high * (1 + spread)), len(known) == len(kinds)



FIT_DECIDES = ("-ngl", "--n-gpu-layers", "--gpu-layers", "-ot", "--override-tensor")  # else --fit
PLACEMENT_OPTIONS = {
    "-ngl": "ngl", "--n-gpu-layers": "ngl", "--gpu-layers": "ngl",
    "-ncmoe": "ncmoe", "--n-cpu-moe": "ncmoe", "-ts": "split", "--tensor-split": "split",
    "-sm": "mode", "--split-mode": "mode", "-mg": "main", "--main-gpu": "main",
    "-ot": "overrides", "--override-tensor": "overrides", "-t": "threads", "--threads": "threads",
}


def without_placement(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` with every placement and thread option (and its value) taken out."""
    return tuple(without_options(args, frozenset(PLACEMENT_OPTIONS)))


def from_args(args: tuple[str, ...], key: str, words: str, origin: str, *,
              server: bool) -> Candidate | str:
    """The placement a command line asks for (llama-bench's spelling, or llama-server's where
    ``server``: ``-ts 3,1`` and ``-ot a=CPU,b=CPU``), or why it cannot be read. A llama-bench
    list (``-ngl 10,20``: several tests) is read at its first value."""
    values: dict[str, str] = {}
    for i, arg in enumerate(args[:-1]):
        if arg in PLACEMENT_OPTIONS:
            values[PLACEMENT_OPTIONS[arg]] = args[i + 1]
    if "-cmoe" in args or "--cpu-moe" in args:  # every layer's experts on the CPU
        values["ncmoe"] = str(10**4)
    first = {k: v if server or k in ("overrides",) else v.split(",")[0] for k, v in values.items()}
    try:
        ngl = int(first.get("ngl", str(ALL_LAYERS)))
        ncmoe = int(first.get("ncmoe", "0"))
        main = int(first.get("main", "0"))
        threads = int(first["threads"]) if "threads" in first else None
        split = tuple(int(float(x)) for x in
                      first.get("split", "").replace("/", ",").split(",") if x.strip())
    except ValueError as exc:
        return f"{words}: a placement option is not a number ({exc})"
    if ngl < 0:
        ngl = ALL_LAYERS
    overrides: list[tuple[str, str]] = []
    for item in first.get("overrides", "").replace(",", ";").split(";") if server else \
            first.get("overrides", "").split(",")[0].split(";"):
        pattern, _, buffer = item.rpartition("=")
        if pattern:
            overrides.append((pattern, buffer))
    return Candidate(key, words, origin, ngl=ngl if ngl <= 10**5 else ALL_LAYERS, ncmoe=ncmoe,
                     split=split, mode=first.get("mode", "layer"), main=main, threads=threads,
                     overrides=tuple(overrides))


def engine_seen(gpus: tuple[Gpu, ...], engine_free: tuple[tuple[str, int, int], ...]
                ) -> tuple[Gpu, ...]:
    """Each GPU's free memory as a server will find it: the lower of NVML's and what
    llama.cpp's CUDA backend saw in a process of its own (``CUDA<n>``, MiB; its context and
    the driver's share already taken). NVML's free counts memory the server's own CUDA
    context then takes: a plan of "1.1 GiB left" loaded to 568 MiB left on the H200."""
    seen = {int(d): free * MIB for name, free, _ in engine_free
            if name.startswith("CUDA") and (d := name[4:]).isdigit()}
    return tuple(replace(g, free=min(g.free, seen[i])) if i in seen else g
                 for i, g in enumerate(gpus))


def engine_compute(rows: tuple[tuple[str, int, int, int], ...]) -> dict[str, int]:
    """llama-fit-params' compute buffers per GPU (``CUDA0`` -> ``GPU0``), in bytes."""
    out = {}
    for device, _model, _context, compute in rows:
        digits = "".join(c for c in device if c.isdigit())
        if device != "Host" and digits:
            out[f"GPU{int(digits)}"] = compute * MIB
    return out
