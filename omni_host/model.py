"""The small shared vocabulary: command results, probe outcomes, check results, reports.

Everything here is a frozen dataclass so that a bundle, once collected, cannot drift while the
checks read it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from omni_host import codec
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
    # every run judged against it since, whatever its state, in time order: a step is read
    # over these (a job that started and stayed leaves its runs changed, issue 67)
    since: tuple[JudgedSince, ...] = ()


@dataclass(frozen=True)
class JudgedSince:
    """A stored run judged against the baseline, as the step reads it: its judged centre per
    comparable test, the centres it adds to the level (its first run's and its own, where it
    was fit and unchanged; none otherwise) and what had changed since the baseline."""

    audit: str
    started_at: float
    centers: dict[str, float]
    level: dict[str, tuple[float, ...]]
    changed: tuple[str, ...]


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
