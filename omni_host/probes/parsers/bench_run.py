"""The bench helper's document (``omni_host/remote/bench.py``: the idle gate, the host context,
the run, what happened during it; an A/B's runs; the plan's facts), its shape checked field by
field before a judge reads it, and the model's tensor table it carries. The llama-bench records
inside it are read by ``bench.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shlex
from dataclasses import dataclass
from typing import Any

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt
from omni_host.probes.parsers.bench import (
    LlamaBench,
    argv_key,
    completed_records,
    llama_bench_records,
    parse_llama_bench_json,
)


@dataclass(frozen=True)
class TensorMap:
    """The model's GGUF tensor table, as the bench helper read it on the host: what each
    generated token can read. ``tensors``: (name, bytes, rows)."""

    architecture: str
    block_count: int
    expert_count: int
    expert_used_count: int
    tensors: tuple[tuple[str, int, int], ...]
    context_length: int = 0  # the context it was trained for (0: not said)


def tensor_map(raw: Any) -> TensorMap | str:
    """The helper's tensor table, typed, or why there is none (one line)."""
    if not isinstance(raw, dict):
        return "the bench helper read no tensor table (an older helper)"
    if raw.get("error"):
        return f"the model's tensor table could not be read: {excerpt(str(raw['error']), 160)}"
    try:
        rows = tuple((str(n), int(b), int(r)) for n, b, r in raw["tensors"])
        counts = [int(raw.get(k) or 0) for k in ("block_count", "expert_count",
                                                  "expert_used_count", "context_length")]
    except (KeyError, TypeError, ValueError) as exc:
        return f"the model's tensor table is malformed: {exc}"
    if not rows or any(b < 0 or r < 1 for _, b, r in rows) or min(counts) < 0:
        return "the model's tensor table is empty or holds negative sizes"
    return TensorMap(str(raw.get("architecture") or "unknown"), counts[0], counts[1], counts[2],
                     rows, counts[3])


@dataclass(frozen=True)
class ArmRun:
    """One run of an A/B (``bench --knob``): which arm, which pair, what it measured."""

    arm: str
    pair: int
    error: str | None
    result: LlamaBench | None
    other_cpu_load: float | None = None  # CPUs other processes used during it (on average)
    # the resource limits the kernel held for it, by knob (/proc/PID/limits: "8388608")
    limits: tuple[tuple[str, str], ...] = ()
    seconds: float | None = None  # how long the run took, start to exit


@dataclass(frozen=True)
class ServerLoad:
    """One placement loaded as a real llama-server before the proof's rounds
    (``remote/serverload.py``): whether it loaded and in how long, each GPU's free memory
    while it held what it loaded (NVML index, bytes), and why it did not load."""

    loaded: bool
    seconds: float | None
    free: tuple[tuple[int, int], ...] = ()
    error: str | None = None
    tried: bool = True  # False: no server was started (the build has none); it was benched


@dataclass(frozen=True)
class KnobAB:
    """The runs of an A/B in the order they ran, the knobs' values before, and how each was
    restored (``ok`` or why not); ``error``: why the A/B stopped; ``loads``: arm -> its
    placement loaded as a server (``plan --prove``)."""

    arms: tuple[str, ...]
    runs: tuple[ArmRun, ...]
    before: dict[str, str]
    restored: dict[str, str]
    error: str | None = None
    loads: dict[str, ServerLoad] = dataclasses.field(default_factory=dict)
    shed: dict[str, int] = dataclasses.field(default_factory=dict)  # arm -> rounds it ran
    stopped_after: int | None = None  # the rounds run where the budget ended them
    budget_s: float | None = None


@dataclass(frozen=True)
class EngineEstimate:
    """llama-fit-params' memory estimate for one args list (-fitp on): per device (``CUDA0``,
    ``Host``), MiB of model, context and compute buffers; ``error``: why there is none."""

    args: tuple[str, ...]
    rows: tuple[tuple[str, int, int, int], ...]
    error: str | None = None


@dataclass(frozen=True)
class PlanFacts:
    """What ``omni-host plan`` read on the host beside the bench's context: the CPUs this
    process may use and their physical cores, the host's memory, and llama.cpp's own answers
    where the build has llama-fit-params (its --fit placement as args, its memory estimates)."""

    cpus: int
    physical_cores: int | None
    mem_total_kib: int | None
    mem_available_kib: int | None
    fit_params: str | None  # the binary, or None: the build has none
    fit_args: tuple[str, ...] | None = None
    fit_error: str | None = None
    estimates: tuple[EngineEstimate, ...] = ()
    # each GPU's free and total memory as llama.cpp's CUDA backend saw them in a process of
    # its own, after its context (llama-fit-params --log-jsonl: its memory breakdown), MiB:
    # device name (CUDA0) -> (free, total); empty where the build did not say
    engine_free: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True)
class BenchRun:
    """The helper's document: refused (why), or run (llama-bench parsed, or why not)."""

    refused: str | None
    context: dict[str, Any]
    gate: dict[str, Any]
    argv: tuple[str, ...] = ()
    exit_code: int | None = None
    timed_out: bool = False
    duration_s: float | None = None
    error: str | None = None  # llama-bench could not start, crashed, was killed, timed out
    result: LlamaBench | None = None
    stderr_tail: tuple[str, ...] = ()
    during: dict[str, Any] | None = None
    tensors: TensorMap | str = "not read"  # the model's tensor table, or why there is none
    ab: KnobAB | None = None  # bench --knob: its A/B runs instead of one run
    plan: PlanFacts | None = None  # omni-host plan: what it read instead of a run


def _run_error(run: dict[str, Any]) -> str | None:
    """Why a run gave no records, in one line, or None when it exited 0."""
    if run.get("error"):
        return str(run["error"])
    if run.get("timed_out"):
        return f"timed out after {run.get('duration_s')} s (the bench's budget): killed"
    code = run.get("exit_code")
    if code == 0:
        return None
    tail = [line for line in run.get("stderr_tail") or () if line.strip()]
    last = tail[-1].strip() if tail else ""
    if isinstance(code, int) and code < 0:
        hint = " (the OOM killer?)" if code == -9 else ""
        return f"killed by signal {-code}{hint}" + (f": {last}" if last else "")
    return f"exit {code}" + (f": {last}" if last else "")


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# The bench helper's document as remote/bench.py writes it: every field a judge reads, typed.
# A mapping lists its fields (each optional; others are passed over, a newer helper may add
# some), "*" types every value of a mapping, a list types its items, a tuple gives the
# alternatives. A host that sends another shape gets one line naming the field.
NUM, INT, TEXT = "number", "integer", "text"
REQUIRED = ("required",)  # a mapping spec's key: the fields it must hold (a tuple: no field name)
_ROWS = [{"*": TEXT}]
HELPER_DOC: dict[str, Any] = {
    "refused": (None, TEXT),
    "gate": {"compute_apps": (None, _ROWS), "max_busy_pct": NUM, "forced": bool},
    "context": {
        "cpus_allowed": (None, INT), "cpu_list": (None, TEXT), "knobs": {"*": TEXT},
        "cpu_quota": (None, {"cpus": NUM, "cgroup": TEXT, REQUIRED: ("cpus", "cgroup")}),
        "loadavg": [TEXT], "env": {"*": TEXT}, "busy_before": [TEXT],
        "model": {"path": TEXT, "size_bytes": (None, INT), "fingerprint": TEXT, "error": TEXT},
        "gpus": (None, {"rows": _ROWS, "error": TEXT}), "nvml": [{"*": (None, INT)}],
        "binary": (None, {"path": TEXT, "sha256": TEXT, "libs": {"*": TEXT}}),
        "tensor_map": object},
    "timing": {"*": NUM},
    "run": {"argv": [TEXT], "exit_code": (None, INT), "timed_out": bool, "duration_s": NUM,
            "stdout": TEXT, "stderr_tail": [TEXT], "orphans_killed": object},
    "during": (None, {"samples": [[[TEXT]]], "event_reasons": [TEXT],
                      "other_gpu_processes": [TEXT], "own_cpu_s": NUM, "other_cpu_load": NUM,
                      "sampled_with": TEXT}),
}
HELPER_DOC["plan"] = {
    "cpus": INT, "physical_cores": (None, INT), "meminfo_kib": {"*": (None, INT)},
    "fit_params": (None, TEXT),
    "fit": {"code": INT, "stdout": TEXT, "stderr_tail": [TEXT], "error": TEXT,
            "breakdown": [{"kind": TEXT, "name": TEXT, "description": TEXT, "total": INT,
                           "free": INT, "self": INT, "model": INT, "context": INT,
                           "compute": INT, "unaccounted": INT}]},
    "estimates": [{"args": [TEXT], "code": INT, "stdout": TEXT, "stderr_tail": [TEXT],
                   "error": TEXT}]}
HELPER_DOC["ab"] = {"arms": [TEXT], "before": {"*": TEXT}, "restored": {"*": TEXT},
                    "error": TEXT,
                    "loads": {"*": {"loaded": bool, "seconds": NUM, "exit_code": (None, INT),
                                    "timed_out": bool, "free": [{"*": (None, INT)}],
                                    "stderr_tail": [TEXT], "argv": [TEXT], "error": TEXT}},
                    "shed": {"*": INT}, "stopped": {"rounds": INT, "budget_s": NUM},
                    "runs": [{"arm": TEXT, "pair": INT, "run": HELPER_DOC["run"],
                              "during": HELPER_DOC["during"]}]}
MAX_ITEMS = 100_000  # of any list in the document
_MISSING = object()


def _fits(value: Any, spec: Any) -> bool:
    if spec is object:
        return True
    if spec is None:
        return value is None
    if isinstance(spec, tuple):
        return any(_fits(value, alternative) for alternative in spec)
    if spec is bool:
        return isinstance(value, bool)
    if spec == TEXT:
        return isinstance(value, str)
    if spec in (NUM, INT):
        return not isinstance(value, bool) and (isinstance(value, int) or spec == NUM and
                                                isinstance(value, float) and math.isfinite(value))
    return isinstance(value, dict if isinstance(spec, dict) else list)


def shape_error(value: Any, spec: Any, where: str) -> str | None:
    """Where ``value`` departs from ``spec`` (HELPER_DOC's notation), or None. It recurses only
    as deep as the spec: what lies below an ``object`` is not walked."""
    if isinstance(spec, tuple):
        found = next((s for s in spec if _fits(value, s)), _MISSING)
        if found is _MISSING:
            return f"{where}: {type(value).__name__} where the helper writes " \
                   f"{' or '.join(_spec_name(s) for s in spec)}"
        spec = found
    elif not _fits(value, spec):
        return f"{where}: {type(value).__name__} where the helper writes {_spec_name(spec)}"
    if isinstance(spec, dict):
        missing = next((k for k in spec.get(REQUIRED, ()) if k not in value), None)
        if missing is not None:
            return f"{where}.{missing}: missing"
        for key, item in value.items():
            sub = spec.get(key, spec.get("*", object))
            why = shape_error(item, sub, f"{where}.{key}")
            if why:
                return why
    elif isinstance(spec, list):
        if len(value) > MAX_ITEMS:
            return f"{where}: {len(value)} items"
        for i, item in enumerate(value):
            why = shape_error(item, spec[0], f"{where}[{i}]")
            if why:
                return why
    return None


def _spec_name(spec: Any) -> str:
    return ("null" if spec is None else "a mapping" if isinstance(spec, dict) else
            "a list" if isinstance(spec, list) else "true/false" if spec is bool else
            "anything" if spec is object else f"an {spec}" if spec == INT else f"a {spec}")


def _arm_run(entry: dict[str, Any]) -> ArmRun:
    run = _object(entry.get("run"))
    error = _run_error(run)
    result = None
    if error is None:
        try:
            result = parse_llama_bench_json(str(run.get("stdout") or ""))
        except ParseError as exc:
            error = f"llama-bench exited 0 but {exc}"
    during = _object(entry.get("during"))
    load = during.get("other_cpu_load")
    limits = tuple((str(k), str(v)[:40]) for k, v in sorted(_object(run.get("limits")).items()))
    took = run.get("duration_s")
    return ArmRun(str(entry.get("arm")), int(entry.get("pair") or 0), error, result,
                  _amount(load), limits, _amount(took))


def _amount(value: Any) -> float | None:
    """A finite non-negative number from the helper's document, else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value >= 0 else None


# the words of the server's lines that say why a placement did not load, the most telling
# first (its last line, "exiting due to model loading error", says only that it did not)
_CAUSES = ("out of memory", "failed to allocate", "unable to allocate", "couldn't bind", "error")


def _load(entry: dict[str, Any]) -> ServerLoad:
    seconds = entry.get("seconds")
    free = tuple((int(g["index"]), int(g["memory_free_bytes"])) for g in entry.get("free") or ()
                 if isinstance(g.get("index"), int) and isinstance(g.get("memory_free_bytes"), int))
    took = float(seconds) if isinstance(seconds, (int, float)) else None
    if entry.get("loaded") is True:
        return ServerLoad(True, took, free)
    if entry.get("error"):
        return ServerLoad(False, took, error=excerpt(str(entry["error"]), 200), tried=False)
    tail = [str(line) for line in entry.get("stderr_tail") or () if str(line).strip()]
    cause = next((line for c in _CAUSES for line in tail if c in line.lower()),
                 tail[-1] if tail else "")
    head = (f"not loaded in {took:g} s" if entry.get("timed_out") else
            f"llama-server exited {entry.get('exit_code')}")
    return ServerLoad(False, took, error=head + (f": {excerpt(cause.strip(), 200)}" if cause
                                                 else ""))


def _knob_ab(ab: dict[str, Any]) -> KnobAB:
    return KnobAB(tuple(str(a) for a in ab.get("arms") or ()),
                  tuple(_arm_run(e) for e in ab.get("runs") or () if isinstance(e, dict)),
                  {str(k): str(v) for k, v in _object(ab.get("before")).items()},
                  {str(k): str(v) for k, v in _object(ab.get("restored")).items()},
                  str(ab["error"]) if ab.get("error") else None,
                  {str(k): _load(v) for k, v in _object(ab.get("loads")).items()},
                  {str(k): int(v) for k, v in _object(ab.get("shed")).items()},
                  _object(ab.get("stopped")).get("rounds"),
                  _object(ab.get("stopped")).get("budget_s"))


def _fit_failure(answer: dict[str, Any]) -> str | None:
    if answer.get("error"):
        return f"llama-fit-params: {answer['error']}"
    if answer.get("code"):
        tail = [str(x) for x in answer.get("stderr_tail") or () if str(x).strip()]
        return f"llama-fit-params exited {answer['code']}" + \
            (f": {excerpt(tail[-1], 200)}" if tail else "")
    return None


def _estimate(answer: dict[str, Any]) -> EngineEstimate:
    args = tuple(str(a) for a in answer.get("args") or ())
    why = _fit_failure(answer)
    if why:
        return EngineEstimate(args, (), why)
    rows = []
    for line in str(answer.get("stdout") or "").splitlines():
        parts = line.split()
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            rows.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    return EngineEstimate(args, tuple(rows), None if rows else
                          "llama-fit-params printed no estimate (device model context compute)")


def _plan_facts(plan: dict[str, Any]) -> PlanFacts:
    """The plan's facts; llama-fit-params' answer is its stdout's last line, its own CLI args
    (``-c 4096 -ngl 48 -ot "..."``), split as a shell would."""
    meminfo = _object(plan.get("meminfo_kib"))
    fit = _object(plan.get("fit"))
    fit_args, fit_error = None, None
    if plan.get("fit_params"):
        fit_error = _fit_failure(fit)
        lines = [x for x in str(fit.get("stdout") or "").splitlines() if x.strip()]
        if fit_error is None and lines:
            try:
                fit_args = tuple(shlex.split(lines[-1]))
            except ValueError as exc:
                fit_error = f"llama-fit-params' answer does not split: {exc}"
        elif fit_error is None:
            fit_error = "llama-fit-params printed no arguments"
    engine_free = tuple((str(r["name"]), int(r["free"]), int(r["total"]))
                        for r in fit.get("breakdown") or () if r.get("kind") == "device"
                        and isinstance(r.get("free"), int) and isinstance(r.get("total"), int)
                        and 0 <= r["free"] <= r["total"])
    return PlanFacts(int(plan.get("cpus") or 0), plan.get("physical_cores"),
                     meminfo.get("MemTotal"), meminfo.get("MemAvailable"),
                     str(plan["fit_params"]) if plan.get("fit_params") else None, fit_args,
                     fit_error,
                     tuple(_estimate(e) for e in plan.get("estimates") or ()
                           if isinstance(e, dict)), engine_free)


def parse_bench_run(text: str) -> BenchRun:
    try:
        doc = load_json(text)
    except ValueError as exc:
        raise ParseError(f"bench helper output is not JSON: {excerpt(text, 120)!r}") from exc
    except RecursionError:
        raise ParseError("bench helper output is nested too deeply to be its document") from None
    if not isinstance(doc, dict) or doc.get("helper") != 1:
        raise ParseError(f"not the bench helper's document: {excerpt(text, 120)!r}")
    why = shape_error(doc, HELPER_DOC, "bench helper document")
    if why:
        raise ParseError(why)
    context = _object(doc.get("context"))
    tensors = tensor_map(context.pop("tensor_map", None))
    gate = _object(doc.get("gate"))
    if doc.get("refused"):
        return BenchRun(str(doc["refused"]), context, gate, tensors=tensors)
    if isinstance(doc.get("ab"), dict):
        return BenchRun(None, context, gate, tensors=tensors, ab=_knob_ab(doc["ab"]))
    if isinstance(doc.get("plan"), dict):
        return BenchRun(None, context, gate, tensors=tensors, plan=_plan_facts(doc["plan"]))
    run = doc.get("run")
    if not isinstance(run, dict):
        raise ParseError("bench helper document without a run")
    error = _run_error(run)
    result = None
    stdout = str(run.get("stdout") or "")
    if error is None:
        try:
            result = parse_llama_bench_json(stdout)
        except ParseError as exc:
            error = f"llama-bench exited 0 but {exc}"
    elif done := completed_records(stdout):
        with contextlib.suppress(ParseError):  # what it finished before it failed: evidence
            result = llama_bench_records(done)
    argv = tuple(str(a) for a in run.get("argv") or ())
    if result is not None and argv and (options := argv_key(argv)):
        result = dataclasses.replace(result, tests=tuple(
            dataclasses.replace(t, key=tuple(sorted((*t.key, *options)))) for t in result.tests))
    return BenchRun(None, context, gate, argv,
                    run.get("exit_code"), bool(run.get("timed_out")), run.get("duration_s"),
                    error, result, tuple(str(x) for x in run.get("stderr_tail") or ()),
                    doc.get("during") if isinstance(doc.get("during"), dict) else None,
                    tensors)
