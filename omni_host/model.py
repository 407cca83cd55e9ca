"""The small shared vocabulary: command results, probe outcomes, check results, reports.

Everything here is a frozen dataclass so that a bundle, once collected, cannot drift while the
checks read it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from omni_host import __version__, codec
from omni_host.safe_text import each_string


@dataclass(frozen=True)
class CommandResult:
    """One command as it ran on the host. A non-zero exit code is data, not an error.

    ``status`` is the collector's word on whether the command ran at all: ``ran``, ``missing``
    (not installed), ``denied`` (not executable for us), ``timeout`` (killed at its deadline) or
    ``error`` (anything else that kept it from starting).
    """

    probe_id: str
    argv: tuple[str, ...]
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    reason: str = ""


@dataclass(frozen=True)
class Bundle:
    """One host's raw outputs, as collected: the evidence every verdict is judged from
    (written and read by ``collect/bundle.py``, kept with each stored report)."""

    host: str
    collected_at: float
    transport: str
    meta: dict[str, Any]
    results: dict[str, CommandResult]
    # The expected state the host was collected under ({"values", "origins"}); None in
    # bundles of omni-host versions that did not record it.
    policy: dict[str, Any] | None = None

    def scrubbed(self, secrets: tuple[str, ...]) -> Bundle:
        """The bundle without the clear text of any secret in any output: the one bundle
        scrub, for what is stored and what is shown."""
        return scrub(self, secrets) if secrets else self


class Outcome(str, enum.Enum):
    OBSERVED = "observed"
    UNAVAILABLE = "unavailable"
    UNPARSEABLE = "unparseable"


@dataclass(frozen=True)
class ProbeResult:
    """What a probe yielded: a typed fact, or why there is none (never a silent None)."""

    probe_id: str
    command: str
    outcome: Outcome
    fact: Any = None
    reason: str = ""
    excerpt: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OBSERVED

    @property
    def not_collected(self) -> bool:
        """The bundle holds no output of it (an older collector, another engine, another
        policy): nothing was observed, so nothing may be concluded from its absence."""
        return self.outcome is Outcome.UNAVAILABLE and self.reason.startswith("not collected")

    def why_not(self) -> str:
        """One line saying why there is no fact: for skip and error summaries."""
        if self.outcome is Outcome.UNPARSEABLE:
            return f"{self.command}: unparseable output ({self.reason})"
        return f"{self.command}: {self.reason}"


class Status(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    ERROR = "error"


class Verdict(str, enum.Enum):
    """What a finding counts as in a report: its status, or ``waived`` where a waiver accepts
    a failure, a warning or an error (``CheckResult.effective_status``)."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    ERROR = "error"
    WAIVED = "waived"


class Source(str, enum.Enum):
    """How a report's host reports were obtained (``Report.source``)."""

    LIVE = "live"  # an audit of the hosts now
    BUNDLE = "bundle"  # an audit of collected bundles (--from-bundle)
    RECHECK = "recheck"  # a stored audit's bundles judged again
    BENCH = "bench"  # omni-host bench or plan
    WATCH = "serve-watch"  # omni-host serve watch
    PRE_REMEDIATION = "pre-remediation"  # the audit a remediation started from
    REMEDIATION = "remediation"  # the audit after a remediation
    BOOTSTRAP = "bootstrap"  # the audit after bootstrap, kept as the baseline


class Severity(str, enum.Enum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"


@dataclass(frozen=True)
class Evidence:
    """The probe, the exact command and the output lines that decided a result."""

    probe: str
    command: str
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Remediation:
    """A playbook to run, or manual steps when the fix is outside the tool (BIOS, flags)."""

    kind: str  # "playbook" or "manual"
    playbook: str | None = None
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class AppliedWaiver:
    """The waiver that accepts a finding: who accepted it, why, until when, and where."""

    check: str
    hosts: str
    justification: str
    approver: str
    expires: str  # ISO 8601 date
    line: int


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict on one host. The single finding shape of every report."""

    id: str
    title: str
    status: Status
    severity: Severity
    lessons: tuple[str, ...]
    summary: str
    expected: Any = None
    actual: Any = None
    evidence: tuple[Evidence, ...] = ()
    remediation: Remediation | None = None
    details: dict[str, Any] = field(default_factory=dict)
    waiver: AppliedWaiver | None = None  # the waiver that accepts this finding, if any

    DERIVED: ClassVar[dict[str, Any]] = {"effective_status": Verdict}

    @property
    def effective_status(self) -> Verdict:
        """``waived`` for an accepted failure, warning or error; the status otherwise."""
        waivable = (Status.FAIL, Status.WARN, Status.ERROR)
        return Verdict.WAIVED if self.waiver and self.status in waivable \
            else Verdict(self.status.value)

    def noted(self, words: str, key: str, value: Any) -> CheckResult:
        """This verdict with ``words`` added to its summary and ``value`` to its details under
        ``key``: what the host's past adds to a check's own finding (the stored plan, the
        knob ledger)."""
        return dataclasses.replace(self, summary=f"{self.summary}; {words}",
                                   details={**self.details, key: value})

    def to_dict(self) -> dict[str, Any]:
        return codec.document(self)


BENCH_CHECK = "perf.tokens-per-s"  # the check whose details hold a bench's outcome


# -- reports ---------------------------------------------------------------------------------
REPORT_SCHEMA = 1


@dataclass(frozen=True)
class ProbeNote:
    """What a probe yielded on a host, in a word, and why not when it yielded no fact."""

    outcome: Outcome
    reason: str = ""


@dataclass(frozen=True)
class GpuSummary:
    name: str
    vram_mib: int | None = None
    arch: str | None = None


@dataclass(frozen=True)
class MemorySummary:
    """The CPU's memory system (dmidecode, sysfs): the channels its slots name and how many hold
    a DIMM, the slowest configured speed, the theoretical bandwidth they give, the L3 domains
    (one per CCD on AMD Zen 3 and later) and what their links allow (about 64 GB/s each)."""

    channels: int | None = None
    channels_populated: int | None = None
    mts: int | None = None
    bandwidth_gbs: float | None = None
    l3_domains: int | None = None
    ccd_links_gbs: float | None = None


@dataclass(frozen=True)
class ModelSummary:
    """A model the host's policy serves (omni_models), as examined on the host."""

    path: str
    size_bytes: int | None = None
    architecture: str | None = None  # GGUF general.architecture; None for other formats


@dataclass(frozen=True)
class ServedCounters:
    """What a llama-server's ``/metrics`` (started with --metrics) counts since it started."""

    prompt_tokens: float | None = None
    prompt_seconds: float | None = None
    predicted_tokens: float | None = None
    predicted_seconds: float | None = None  # time spent generating them, summed per request
    decode_calls: float | None = None
    requests_processing: float | None = None
    requests_deferred: float | None = None
    busy_slots_per_decode: float | None = None  # requests decoded together, on average


@dataclass(frozen=True)
class ServedProbe:
    """One fixed, short completion sent to an idle server, and the timings it answered."""

    predicted_n: int
    predicted_per_second: float
    prompt_n: int | None = None
    prompt_per_second: float | None = None


@dataclass(frozen=True)
class InferenceServer:
    """An inference server running on the host: how it runs and what it says of itself. Of
    its argv, a value is kept only where llama.cpp's table says the option's value is safe
    (numbers, paths, devices, tensor overrides); any other is ``(not kept)``."""

    kind: str  # "llama-server"
    pid: int
    argv: tuple[str, ...]
    exe: str | None = None
    sha256: str | None = None
    env: dict[str, str] | None = None  # the variables that change its speed; None: unreadable
    cpus_allowed: int | None = None
    cpus_allowed_list: str | None = None
    quota_cpus: float | None = None  # its cgroup's CPU quota; None: unlimited
    quota_cgroup: str | None = None
    started_at: float | None = None
    rss_kib: int | None = None
    threads: int | None = None
    container: str | None = None
    address: str | None = None  # where it was asked (host:port)
    swap_kib: int | None = None  # its pages on swap (VmSwap)
    locked_kib: int | None = None  # memory it holds locked (VmLck: --mlock that took)
    anon_kib: int | None = None  # its anonymous memory (smaps_rollup), KV cache and buffers
    anon_huge_kib: int | None = None  # of which in transparent huge pages (AnonHugePages)
    file_pmd_kib: int | None = None  # file pages mapped 2 MiB at a time (FilePmdMapped)
    model_path: str | None = None
    # the model file's pages it maps, per NUMA node, KiB (numa_maps); None where not read
    model_pages_by_node: tuple[tuple[int, int], ...] | None = None
    model_bytes: int | None = None
    model_fingerprint: str | None = None
    counters: ServedCounters | None = None
    metrics_error: str | None = None
    n_ctx: int | None = None
    build: str | None = None
    slots: int | None = None
    props_error: str | None = None
    probe: ServedProbe | None = None
    probe_note: str | None = None  # why no probe was timed (busy, no metrics, an error)
    gpu_memory_mib: int | None = None  # held on the GPUs (None: nvidia-smi not read)
    # held on each GPU (its UUID, MiB), where nvidia-smi was read: where llama.cpp placed it
    gpu_memory_by_gpu: tuple[tuple[str, int], ...] | None = None
    # the other compute processes on its GPUs ("pid name (N MiB)"), None where not read
    gpu_cotenants: tuple[str, ...] | None = None
    # the llama-server built beside the benchmarked llama-bench (omni_bench.llama_bench)
    bench_server_path: str | None = None
    bench_server_sha256: str | None = None


class Servers(tuple[InferenceServer, ...]):
    """The servers the helper read, and how many more llama-server processes it left unread
    (its limit reached: said, never silently skipped)."""

    unread: int = 0

    def __new__(cls, servers: Iterable[InferenceServer] = (), unread: int = 0) -> Servers:
        made = super().__new__(cls, servers)
        made.unread = unread
        return made


@dataclass(frozen=True)
class FactSummary:
    """The facts a diff and the Strategic layer compare; None where not observed."""

    numa_nodes: int | None = None
    sockets: int | None = None
    cpu: str | None = None
    zen5: bool | None = None
    kernel: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[GpuSummary, ...] | None = None
    nvlink: bool | None = None
    mem_total_mib: int | None = None
    swap_total_mib: int | None = None
    containers: tuple[str, ...] | None = None
    models: tuple[ModelSummary, ...] | None = None  # None: no omni_models, or not examined
    servers: tuple[InferenceServer, ...] | None = None  # None: not looked for (older bundles)
    memory: MemorySummary | None = None  # None: neither dmidecode nor the L3 topology read


class EngineStatus(str, enum.Enum):
    BLOCKED = "blocked"  # a host condition holds
    BLOCKED_UPSTREAM = "blocked-upstream"  # only an upstream condition (re-check upstream)
    UNKNOWN = "unknown"  # the facts (or the policy) to decide are missing
    RE_EVALUATE = "re-evaluate"  # viable: no blocking condition holds on this host


BLOCKED_ENGINE = frozenset({EngineStatus.BLOCKED.value, EngineStatus.BLOCKED_UPSTREAM.value})


@dataclass(frozen=True)
class EngineVerdict:
    """The Strategic layer's word on one alternative engine for this host."""

    engine: str
    lessons: tuple[str, ...]
    status: EngineStatus
    reasons: tuple[str, ...] = ()  # the conditions that hold or cannot be decided, with facts
    cleared: tuple[str, ...] = ()  # the conditions that do not hold here, with facts

    @property
    def blocked(self) -> bool:
        return self.status.value in BLOCKED_ENGINE


@dataclass(frozen=True)
class ColdCaseItem:
    item: str  # a check id or an engine
    was: str  # its status at the previous audit
    now: str
    # "resolved", "newly failing" (a check); "resurrected", "newly blocked" (an engine);
    # "expected state changed" (a check whose verdict moved with a variable it reads)
    change: str = ""


@dataclass(frozen=True)
class ColdCase:
    """What changed state since the previous audit of a host: checks that failed then and pass
    now or the reverse, engines blocked then and viable now or the reverse. Empty when nothing
    changed."""

    previous: str | None  # the id of the audit compared with
    items: tuple[ColdCaseItem, ...] = ()

    # Written for readers of the JSON, derived from the items: checks failing at the previous
    # audit and passing now; engines blocked then and viable now.
    DERIVED: ClassVar[dict[str, Any]] = {"resurrected": tuple[str, ...],
                                         "resurrected_engines": tuple[str, ...]}

    @property
    def resurrected(self) -> tuple[str, ...]:
        return tuple(i.item for i in self.items if i.change == "resolved")

    @property
    def resurrected_engines(self) -> tuple[str, ...]:
        return tuple(i.item for i in self.items if i.change == "resurrected")


@dataclass(frozen=True)
class Baseline:
    """A host's recorded baseline, as stored in the details of its perf.tokens-per-s result."""

    audit: str  # the stored bench that recorded it
    recorded_at: float
    tests: dict[str, list[float]]  # test name -> every repetition's tokens/s
    context: dict[str, Any]
    # test name -> the center of the baseline and of each fit, comparable run since whose host
    # state did not change: their spread is the noise between runs
    run_centers: dict[str, list[float]] = field(default_factory=dict)
    # test name -> what it measured (llama-bench's record less the results): the
    # comparability key; empty for a baseline stored before keys were recorded
    keys: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class LinkUnderLoad:
    """One GPU's PCIe link over the samples a bench took while llama-bench ran."""

    index: str
    typical: str  # the median link, "gen5 x16"
    lowest: str
    samples: int
    changes: int  # between consecutive samples

    def line(self) -> str:
        moved = (f"; lowest {self.lowest}, {self.changes} change(s) between samples"
                 if self.changes else "")
        return (f"GPU{self.index} PCIe link during the run: {self.typical} ({self.samples} "
                f"samples){moved}")

    @property
    def generation(self) -> int | None:
        """The median link's generation (``typical`` as "gen5 x16")."""
        head = self.typical.split(" ", 1)[0]
        return int(head[3:]) if head.startswith("gen") and head[3:].isdigit() else None


# -- a bench's outcome (issue 45) -------------------------------------------------------------
# What ``omni-host bench`` measured and judged, typed. Its JSON form is what the perf.tokens-per-s
# result keeps in its details (the form every view shows and the store keeps, unchanged since
# the keys were first stored); ``HostReport.bench`` reads it back into these types, and no code
# reads those details by key. Every field has a default: a bench stored by an earlier omni-host
# lacks some of them.
MAX_TS = 1e9  # tokens/s past this is not a measurement (samples_ts of 1e308 overflowed the mean)


def rate(value: Any) -> float | None:
    """A tokens/s value, or None where it is not one (a bool, NaN, infinite, <= 0, absurd)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and 0 < number < MAX_TS else None


@dataclass(frozen=True)
class MeasuredTest:
    """One llama-bench test as measured: every repetition's tokens/s and what it measured."""

    kind: str = ""  # "pp", "tg" or "pg"
    samples_ts: tuple[float, ...] = ()
    mean_ts: float = 0.0
    cv: float = 0.0
    center_ts: float | None = None  # the estimator judged (None in benches stored before it)
    spread: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    key: dict[str, Any] = field(default_factory=dict)  # what it measured: the comparability key

    @property
    def rate(self) -> float:
        """Its tokens/s as judged: the median after the warm-up repetition (the mean in benches
        stored before that)."""
        return self.center_ts if self.center_ts is not None else self.mean_ts

    def key_items(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((str(k), str(v)) for k, v in self.key.items()))


@dataclass(frozen=True)
class JudgedTest:
    """One test's verdict against the baseline, as the bench said it."""

    status: Status
    drop: float = 0.0  # fraction below the reference (negative: faster)
    threshold: float = 0.0
    noise: float = 0.0
    detectable: float = 0.0
    reference_ts: float | None = None
    modes: tuple[float, ...] = ()
    drift: float | None = None
    dropped: bool = False
    blind: bool = False
    line: str = ""
    # the rate judged (the run's median); None in benches stored before it was kept
    measured_ts: float | None = None
    # which of two runs decided it ("first" or "second"; None where one run was judged): the
    # stored verdict is the one the summary says, the plot and the JSON read it (issue 63)
    run: str | None = None
    step: float | None = None  # a step under the tolerance its last runs sit at (issue 67)


@dataclass(frozen=True)
class DeviceShare:
    """One device's part of a token: the bytes it reads, its bandwidth, its milliseconds."""

    gb_per_token: float = 0.0
    gbs: float = 0.0
    ms: float = 0.0


@dataclass(frozen=True)
class Ceiling:
    """A generation test's memory-bandwidth ceiling and how near the run came to it."""

    ceiling_ts: float
    fraction: float
    limit: str = ""
    basis: str = "theoretical"  # or the measured rate it was predicted at
    bytes_per_token: int = 0
    bandwidth_gbs: tuple[float, ...] = ()
    devices: dict[str, DeviceShare] = field(default_factory=dict)
    source: str = ""
    cpu_bandwidth_from: str | None = None
    cpu_effective_gbs: float | None = None


@dataclass(frozen=True)
class FirstRun:
    """The first of two runs, that a second run is judged with (a drop or a scattered run is
    measured once more before it is said)."""

    verdicts: dict[str, JudgedTest] = field(default_factory=dict)
    centers: dict[str, float] = field(default_factory=dict)
    fit: bool = False
    disturbed: str | None = None


@dataclass(frozen=True)
class BenchRef:
    """The stored bench a run was judged against."""

    audit: str
    recorded_at: float = 0.0


@dataclass(frozen=True)
class BenchOutcome:
    """A bench: its tests, the host state it ran in (the context, by key), its ceilings, and
    its verdicts against the baseline (none where it recorded one or was not comparable)."""

    tests: dict[str, MeasuredTest]
    context: dict[str, Any] = field(default_factory=dict)
    ceiling: dict[str, Ceiling] = field(default_factory=dict)
    no_ceiling: dict[str, str] = field(default_factory=dict)
    cpu_rates: dict[str, float] = field(default_factory=dict)  # the rate the CPU read weights at
    recorded_baseline: bool = False
    forced: bool = False
    fit: bool = True
    unfit: tuple[str, ...] = ()
    disturbances: tuple[str, ...] = ()
    links: tuple[LinkUnderLoad, ...] = ()  # each GPU's PCIe link while it ran
    resolution: dict[str, float] | None = None  # a recorded baseline's, by test
    baseline: BenchRef | None = None
    not_comparable: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()  # what moved since the baseline, the causes first
    verdicts: dict[str, JudgedTest] = field(default_factory=dict)
    first_run: FirstRun | None = None

    def centers(self) -> dict[str, float]:
        return {name: t.rate for name, t in self.tests.items()}

    def generation(self) -> str | None:
        """The test an operator reads first: the generation test, else the first."""
        return next((n for n, t in self.tests.items() if t.kind == "tg"), next(iter(self.tests), None))

    def figures(self) -> tuple[float | None, float | None]:
        """Its generation test against the baseline it was judged with and against its
        ceiling, as fractions (None where not known)."""
        name = self.generation()
        if name is None:
            return None, None
        verdict, ceiling = self.verdicts.get(name), self.ceiling.get(name)
        reference = verdict.reference_ts if verdict is not None else None
        center = self.tests[name].rate
        return (center / reference if center and reference else None), \
            (ceiling.fraction if ceiling is not None else None)


def _known(cls: type, doc: Any, what: str) -> dict[str, Any]:
    """``doc``'s keys that ``cls`` stores (a key an earlier omni-host wrote and this one does
    not is left behind); ValueError where ``doc`` is not a mapping."""
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a mapping")
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in doc.items() if k in names}


def _rates(values: Any) -> bool:
    return isinstance(values, list) and bool(values) and all(rate(v) is not None for v in values)


def read_bench(details: Any) -> BenchOutcome:
    """A perf.tokens-per-s result's details as the typed outcome, from any omni-host that
    stored one. ValueError naming what is wrong (a hand-edited or foreign report costs its
    host one warning, never its bench)."""
    doc = _known(BenchOutcome, details, "the details")
    if not isinstance(doc.get("tests"), dict) or not doc["tests"]:
        raise ValueError("no tests")
    tests = {}
    for name, test in doc["tests"].items():
        one = _known(MeasuredTest, test, str(name))
        if not _rates(one.get("samples_ts")):
            raise ValueError(f"{name}: samples_ts is not a list of positive numbers")
        one.setdefault("mean_ts", math.fsum(one["samples_ts"]) / len(one["samples_ts"]))
        tests[str(name)] = one
    doc["tests"] = tests
    for part, cls in (("verdicts", JudgedTest), ("ceiling", Ceiling)):
        if isinstance(doc.get(part), dict):
            doc[part] = {n: _known(cls, v, f"{part}.{n}") for n, v in doc[part].items()}
    if isinstance(doc.get("first_run"), dict):
        first = doc["first_run"] = _known(FirstRun, doc["first_run"], "first_run")
        if isinstance(first.get("verdicts"), dict):
            first["verdicts"] = {n: _known(JudgedTest, v, f"first_run.verdicts.{n}")
                                 for n, v in first["verdicts"].items()}
    if isinstance(doc.get("baseline"), dict):
        doc["baseline"] = _known(BenchRef, doc["baseline"], "baseline")
    if isinstance(doc.get("links"), list):
        doc["links"] = [_known(LinkUnderLoad, v, "links") for v in doc["links"]]
    # a run stored before fitness was recorded: fit unless it was forced
    doc["fit"] = details.get("fit", not details.get("forced")) is True
    return codec.from_dict(BenchOutcome, doc)


@dataclass(frozen=True)
class LastBench:
    """An audit's word on the host's newest stored bench (an audit never runs one)."""

    audit: str  # the stored bench
    at: float  # when it ran
    status: Status  # its perf.tokens-per-s verdict
    summary: str
    # its generation test against the baseline it was judged with, and against its ceiling
    of_baseline: float | None = None
    of_ceiling: float | None = None
    links: tuple[LinkUnderLoad, ...] = ()  # each GPU's PCIe link while it ran
    # how the bench reached the host (-i INVENTORY and its connection options, shell-quoted):
    # measuring again is run as it was, not with the audit's inventory
    reach: str | None = None


@dataclass(frozen=True)
class PolicyRecord:
    """The expected state a host was judged under: omni_* values and where each came from."""

    values: dict[str, Any]
    origins: dict[str, str]


@dataclass(frozen=True)
class HostReport:
    host: str
    address: str | None
    transport: str
    reachable: bool
    error: str | None
    duration_s: float = field(metadata={"round": 4})
    results: tuple[CheckResult, ...] = ()
    bundle: Bundle | None = field(default=None, compare=False, metadata={"stored": False})
    # What could not be observed on this host, and why (every probe of the plan).
    probes: dict[str, ProbeNote] = field(default_factory=dict)
    facts: FactSummary | None = None
    strategic: tuple[EngineVerdict, ...] = ()
    cold_case: ColdCase | None = None  # history.cold_case, once the store is known
    policy: PolicyRecord | None = None
    collected_at: float | None = None  # when its bundle was collected (an offline audit: then)
    last_bench: LastBench | None = None  # the newest stored bench of this host, for audits
    # The omni_* variables ``omni-host init`` would record from this audit's facts that the
    # inventory leaves unset: the "record it" hint is printed only while there are some.
    recordable: tuple[str, ...] = ()

    DERIVED: ClassVar[dict[str, Any]] = {
        "counts": dict[str, int], "no_expected_state": dict[str, str], "unconfigured": bool,
        "reference": bool}

    def result(self, check_id: str) -> CheckResult | None:
        """This host's result of one check, None where it has none."""
        return next((r for r in self.results if r.id == check_id), None)

    @cached_property
    def _bench(self) -> BenchOutcome | str | None:
        perf = self.result(BENCH_CHECK)
        if perf is None or perf.status is Status.ERROR:
            return None
        try:
            return read_bench(perf.details)
        except ValueError as exc:
            return str(exc)

    @property
    def bench(self) -> BenchOutcome | None:
        """What this host's bench measured and judged, typed (None for an audit, a bench that
        failed, or one whose stored details do not read: ``bench_unread`` says why)."""
        return self._bench if isinstance(self._bench, BenchOutcome) else None

    @property
    def bench_unread(self) -> str | None:
        """Why this host's stored bench does not read, None where it does or there is none."""
        return self._bench if isinstance(self._bench, str) else None

    def no_expected_state(self) -> dict[str, str]:
        """Check id -> the unset variable, for checks skipped for want of expected state."""
        return {r.id: r.details["no_expected_state"] for r in self.results
                if r.status is Status.SKIP and r.details.get("no_expected_state")}

    @property
    def unconfigured(self) -> bool:
        """Judged under role defaults alone: the inventory describes nothing of this host."""
        origins = self.policy.origins if self.policy else {}
        return self.reachable and bool(origins) and all(
            str(o).startswith("default: ") for o in origins.values())

    @property
    def reference(self) -> bool:
        """Judged against the built-in reference box (no inventory): not this machine's own
        expected state."""
        origins = self.policy.origins if self.policy else {}
        return self.reachable and any(str(o).startswith("built-in reference: ")
                                      for o in origins.values())

    def counts(self) -> dict[str, int]:
        counts = {v.value: 0 for v in Verdict}
        for r in self.results:
            counts[r.effective_status.value] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return codec.document(self)


class FixVerdict(str, enum.Enum):
    FIXED = "fixed"
    STILL_FAILING = "still failing"
    ERROR = "error"  # the apply failed on this host, or the re-audit did not run


@dataclass(frozen=True)
class FixOutcome:
    """One (host, check) of a remediation: the status before, after, and why."""

    host: str
    check: str
    playbook: str
    before: str
    changed_tasks: tuple[str, ...]
    after: str | None
    outcome: FixVerdict
    detail: str


@dataclass(frozen=True)
class Change:
    before: Any
    after: Any


@dataclass(frozen=True)
class HostDiff:
    """What changed for one host between two audits."""

    new_failures: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()
    still_failing: tuple[str, ...] = ()
    policy_changed: dict[str, Change] = field(default_factory=dict)
    changed_facts: dict[str, Change] = field(default_factory=dict)
    resurrected: tuple[str, ...] = ()
    resurrected_engines: tuple[str, ...] = ()
    tokens_per_s: dict[str, Change] = field(default_factory=dict)  # test -> mean t/s, 2 benches
    # checks whose verdict moved with the expected state (a variable they read changed)
    expected_state_changed: tuple[str, ...] = ()
    new_warnings: tuple[str, ...] = ()  # warn now, neither warn nor failing before
    # what the newer bench found changed on the host since its baseline (its own attribution)
    bench_changed: tuple[str, ...] = ()
    # the tests the newer bench read as falling over its history: a slide, a step down that
    # stayed, a step under the tolerance (issue 67)
    series: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    """An audit of one or more hosts, as stored in report.json (schema in
    omni_host/report/report.schema.json)."""

    started_at: float
    finished_at: float
    source: Source
    inventory: str | None
    hosts: tuple[HostReport, ...]
    interrupted: bool = False
    id: str | None = None  # set when stored
    waiver_notes: tuple[str, ...] = ()  # expired and stale waivers
    twins: tuple[str, ...] = ()  # a fleet bench's hosts slower than their twins (measure.twins)
    rechecked: str | None = None  # the stored audit a recheck re-evaluated
    remediation: tuple[FixOutcome, ...] = ()
    pre_state: str | None = None  # the audit stored before a remediation
    baseline: bool = False
    # the run's connection options a pasted hint needs (--known-hosts, --ssh-config,
    # --vault-password-file and their values): report.text.target
    hint_args: tuple[str, ...] = ()

    DERIVED: ClassVar[dict[str, Any]] = {
        "schema_version": int, "tool": dict[str, str], "summary": dict[str, int]}
    schema_version: ClassVar[int] = REPORT_SCHEMA
    tool: ClassVar[dict[str, str]] = {"name": "omni-host", "version": __version__}

    @property
    def unreachable(self) -> list[HostReport]:
        return [h for h in self.hosts if not h.reachable]

    def summary(self) -> dict[str, int]:
        total = {v.value: 0 for v in Verdict}
        for h in self.hosts:
            for k, v in h.counts().items():
                total[k] += v
        return {"hosts": len(self.hosts), "unreachable": len(self.unreachable), **total}

    def to_dict(self) -> dict[str, Any]:
        return codec.document(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Report:
        """The report a stored report.json holds; codec.FormatError says where it does not fit."""
        return codec.from_dict(cls, doc)


def make_report(hosts: list[HostReport], *, started_at: float, source: Source,
                inventory: str | None, interrupted: bool = False,
                hint_args: tuple[str, ...] = ()) -> Report:
    return Report(started_at, time.time(), source, inventory, tuple(hosts), interrupted,
                  hint_args=hint_args)


# -- scrubbing: the clear text of vaulted values never leaves memory ------------------------
SCRUBBED = "<vaulted>"


def scrub(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` (JSON-like, or a model dataclass) with every occurrence of each secret
    replaced in its strings, in every field (the raw bundle too); enum members (statuses,
    outcomes) are words of ours, kept."""
    if not secrets:
        return value

    def clear(text: str) -> str:
        for secret in secrets:
            text = text.replace(secret, SCRUBBED)
        return text

    return each_string(value, clear, keys=False, unstored=True)


def scrub_host(host: HostReport, secrets: tuple[str, ...]) -> HostReport:
    """A host report (its findings, evidence, summaries, engines, past and raw bundle)
    without the secrets: every string it holds, whatever field it sits in."""
    return scrub(host, secrets) if secrets else host
