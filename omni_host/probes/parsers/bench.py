"""llama-bench's ``-o json`` records, and the bench helper's document around them
(``omni_host/remote/bench.py``: the idle gate, the host context, the run, what happened during
it).

A llama-bench record is one test (``pp512``: a 512-token prompt; ``tg128``: 128 generated
tokens; ``pp512+tg128``) under one set of parameters, with every repetition's tokens/s in
``samples_ts``: the noise is read from those, never assumed. Lessons S-005, F-003, F-002.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import shlex
import statistics
from dataclasses import dataclass
from typing import Any

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.outcome import rate
from omni_host.probes.parsers import excerpt, na

# Parameters that tell two records of one run apart (llama-bench takes lists for each).
VARYING = ("n_threads", "n_gpu_layers", "split_mode", "tensor_split", "flash_attn", "n_batch",
           "n_ubatch", "type_k", "type_v", "n_cpu_moe", "main_gpu", "no_kv_offload",
           "tensor_buft_overrides")
SHORT = {"tensor_buft_overrides": "ot",
         "n_threads": "t", "n_gpu_layers": "ngl", "split_mode": "sm", "tensor_split": "ts",
         "flash_attn": "fa", "n_batch": "b", "n_ubatch": "ub", "type_k": "ctk", "type_v": "ctv",
         "n_cpu_moe": "ncmoe", "main_gpu": "mg", "no_kv_offload": "nkvo"}


# llama-bench's record fields that are not what was measured: the results, when, where the
# model file lies (its identity is the helper's fingerprint) and what the binary and hardware
# are (those are attributed changes: a rebuild is F-003, not "not comparable"). Every other
# field (threads, layers, split, batch, types, devices, the model's type/size/parameters, and
# any field a newer llama-bench adds) is part of the comparability key.
NOT_KEY = frozenset({"build_commit", "build_number", "cpu_info", "gpu_info", "backends",
                     "model_filename", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
                     "samples_ns", "samples_ts"})
WARM_UP = 1  # repetitions dropped first: llama-bench's first is slow on both machines measured
MAD_TO_SD = 1.4826  # a normal distribution's standard deviation from its median absolute deviation


@dataclass(frozen=True)
class Estimate:
    """A test's tokens/s as judged: the median of the repetitions after the warm-up one, and
    their spread (1.4826 x the median absolute deviation, relative: a standard deviation that
    one outlier cannot widen). Chosen on real runs (docs/bench.md, "The estimator")."""

    center_ts: float
    spread: float  # relative
    used: int  # repetitions it stands on


def estimate(samples: tuple[float, ...] | list[float]) -> Estimate:
    values = sorted(samples[WARM_UP:] if len(samples) >= 2 + WARM_UP else samples)
    center = statistics.median(values)
    if len(values) < 2 or center <= 0:
        return Estimate(center, 0.0, len(values))
    mad = statistics.median(abs(v - center) for v in values)
    return Estimate(center, MAD_TO_SD * mad / center, len(values))


def robust_spread(centers: list[float]) -> float:
    """The relative spread of several runs' centers (1.4826 x MAD / median)."""
    mid = statistics.median(centers)
    return MAD_TO_SD * statistics.median(abs(c - mid) for c in centers) / mid if mid > 0 else 0.0


@dataclass(frozen=True)
class BenchTest:
    """One llama-bench test: its name, every repetition's tokens/s, and what it ran on."""

    name: str  # pp512, tg128, pp512+tg128, with @d<depth> and the parameters that vary
    kind: str  # "pp" (prompt processing), "tg" (generation) or "pg" (both)
    samples_ts: tuple[float, ...]
    params: dict[str, Any]
    key: tuple[tuple[str, str], ...] = ()  # what was measured: (field, JSON value), sorted

    @property
    def mean_ts(self) -> float:
        return statistics.fmean(self.samples_ts)

    @property
    def stdev_ts(self) -> float:
        """The sample standard deviation, as llama-bench's own stddev_ts (0 for one run)."""
        return statistics.stdev(self.samples_ts) if len(self.samples_ts) > 1 else 0.0

    @property
    def cv(self) -> float:
        """Relative spread of the repetitions (stdev / mean)."""
        return spread(self.samples_ts)[1]

    @property
    def estimate(self) -> Estimate:
        return estimate(self.samples_ts)


def spread(samples: list[float] | tuple[float, ...]) -> tuple[float, float]:
    """(mean, relative standard deviation) of tokens/s samples, as llama-bench reports them."""
    mean = statistics.fmean(samples)
    sd = statistics.stdev(samples) if len(samples) > 1 else 0.0
    return mean, sd / mean if mean else 0.0


@dataclass(frozen=True)
class LlamaBench:
    tests: tuple[BenchTest, ...]
    build_commit: str | None
    build_number: int | None
    backends: str | None
    model_type: str | None
    model_size_bytes: int | None
    model_n_params: int | None
    cpu_info: str | None
    gpu_info: str | None


def _count(rec: dict[str, Any], key: str) -> int:
    value = rec.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParseError(f"llama-bench's {key} is not a count: {excerpt(str(value), 40)!r}")
    return value


def _name(rec: dict[str, Any]) -> tuple[str, str]:
    n_prompt, n_gen = _count(rec, "n_prompt"), _count(rec, "n_gen")
    if n_prompt and n_gen:
        kind, name = "pg", f"pp{n_prompt}+tg{n_gen}"
    elif n_gen:
        kind, name = "tg", f"tg{n_gen}"
    elif n_prompt:
        kind, name = "pp", f"pp{n_prompt}"
    else:
        raise ParseError("a llama-bench record with neither n_prompt nor n_gen")
    depth = _count(rec, "n_depth")
    return kind, name + (f"@d{depth}" if depth else "")


def _samples(rec: dict[str, Any]) -> tuple[float, ...]:
    """Every repetition's tokens/s, each a finite positive number below model.MAX_TS (checked here,
    at the boundary: a 0 baseline divided every later bench by zero)."""
    samples = rec.get("samples_ts")
    if samples is not None and not isinstance(samples, list):  # never a silent ±0% baseline
        raise ParseError(f"samples_ts is not a list: {excerpt(json.dumps(samples, default=str), 60)}")
    if not samples:
        if "avg_ts" not in rec:
            raise ParseError("a llama-bench record without samples_ts or avg_ts")
        samples = [rec["avg_ts"]]
    values = tuple(v for v in (rate(s) for s in samples) if v is not None)
    if len(values) != len(samples):
        raise ParseError(f"tokens/s holds something other than positive numbers: "
                         f"{excerpt(json.dumps(samples, default=str), 80)}")
    return values


# llama-bench's options its record echoes (each spelling; -m, -o and -r are omni-host's):
# every other option it was run with (--numa, --prio, --delay...) joins each test's
# comparability key from the argv as run, or a change of it would be blamed on a cause.
ECHOED = frozenset({
    "-m", "--model", "-o", "--output", "-oe", "--output-err", "-r", "--repetitions",
    "-p", "--n-prompt", "-n", "--n-gen", "-pg", "-d", "--n-depth", "-b", "--batch-size",
    "-ub", "--ubatch-size", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "-t",
    "--threads", "-C", "--cpu-mask", "--cpu-strict", "--poll", "-ngl", "--n-gpu-layers",
    "-ncmoe", "--n-cpu-moe", "-sm", "--split-mode", "-mg", "--main-gpu", "-nkvo",
    "--no-kv-offload", "-fa", "--flash-attn", "-dev", "--device", "-mmp", "--mmap", "-embd",
    "--embeddings", "-ts", "--tensor-split", "-ot", "--override-tensor", "-dio", "--direct-io"})


OPTIONS_KEY = "llama-bench options"


def argv_key(argv: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """The options of a llama-bench command line its record does not echo, as one key field
    (``llama-bench options: {"--numa": "distribute"}``; a flag without a value is ``true``;
    ``{}`` when there are none, so that one appearing is a difference too)."""
    found: dict[str, str] = {}
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or _is_number(arg):
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            following = args[i] if i < len(args) else None
            if following is not None and (not following.startswith("-") or _is_number(following)):
                value, i = following, i + 1
            else:
                value = "true"
        if name not in ECHOED:
            found[name] = value
    return ((OPTIONS_KEY, json.dumps(dict(sorted(found.items())))),)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _key(rec: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, json.dumps(v, sort_keys=True, default=str))
                        for k, v in rec.items() if k not in NOT_KEY))


def completed_records(text: str) -> list[dict[str, Any]]:
    """The records a llama-bench that died mid-run had finished: it writes its JSON array one
    record at a time, so a configuration that failed (a model -sm row cannot load) leaves
    the ones before it whole."""
    decoder = json.JSONDecoder()
    body = text.lstrip()
    records: list[dict[str, Any]] = []
    if not body.startswith("["):
        return records
    at = 1
    while True:
        while at < len(body) and body[at] in " \t\r\n,":
            at += 1
        try:
            record, at = decoder.raw_decode(body, at)
        except ValueError:
            break
        if not isinstance(record, dict):
            break
        records.append(record)
    return records


def parse_llama_bench_json(text: str) -> LlamaBench:
    """``llama-bench -o json``: a JSON array of records (one per test and parameter set)."""
    try:
        records = load_json(text)
    except (ValueError, RecursionError) as exc:
        raise ParseError(f"llama-bench output is not JSON ({exc}): {excerpt(text, 120)!r}") from exc
    if not isinstance(records, list) or not records or not all(isinstance(r, dict) for r in records):
        raise ParseError(f"llama-bench JSON is not a list of records: {excerpt(text, 120)!r}")
    return llama_bench_records(records)


def llama_bench_records(records: list[dict[str, Any]]) -> LlamaBench:
    """llama-bench's records (at least one), as parsed from its JSON."""
    varying = [k for k in VARYING if len({json.dumps(r.get(k)) for r in records}) > 1]
    tests = []
    for rec in records:
        kind, name = _name(rec)
        if varying:
            name += " " + " ".join(f"{SHORT[k]}={rec.get(k)}" for k in varying)
        params = {k: rec.get(k) for k in VARYING if k in rec}
        tests.append(BenchTest(name, kind, _samples(rec), params, _key(rec)))
    first = records[0]

    def text_of(key: str) -> str | None:
        value = first.get(key)
        return na(str(value)) if value is not None else None

    def int_of(key: str) -> int | None:
        value = first.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return LlamaBench(tuple(tests), text_of("build_commit"), int_of("build_number"),
                      text_of("backends"), text_of("model_type"), int_of("model_size"),
                      int_of("model_n_params"), text_of("cpu_info"), text_of("gpu_info"))


def split_values(params: dict[str, Any]) -> list[float]:
    """A record's ``tensor_split`` ("0.75/0.25", "75.00/25.00", "0.00") as numbers."""
    return [float(x) for x in re.findall(r"[\d.]+", str(params.get("tensor_split") or ""))]


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


@dataclass(frozen=True)
class KnobAB:
    """The runs of an A/B in the order they ran, the knobs' values before, and how each was
    restored (``ok`` or why not); ``error``: why the A/B stopped."""

    arms: tuple[str, ...]
    runs: tuple[ArmRun, ...]
    before: dict[str, str]
    restored: dict[str, str]
    error: str | None = None


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
        "cpus_allowed": (None, INT),
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
    "fit": {"code": INT, "stdout": TEXT, "stderr_tail": [TEXT], "error": TEXT},
    "estimates": [{"args": [TEXT], "code": INT, "stdout": TEXT, "stderr_tail": [TEXT],
                   "error": TEXT}]}
HELPER_DOC["ab"] = {"arms": [TEXT], "before": {"*": TEXT}, "restored": {"*": TEXT},
                    "error": TEXT,
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
            "anything" if spec is object else f"a {spec}")


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
    return ArmRun(str(entry.get("arm")), int(entry.get("pair") or 0), error, result,
                  float(load) if isinstance(load, (int, float)) and not isinstance(load, bool)
                  and math.isfinite(load) and load >= 0 else None, limits)


def _knob_ab(ab: dict[str, Any]) -> KnobAB:
    return KnobAB(tuple(str(a) for a in ab.get("arms") or ()),
                  tuple(_arm_run(e) for e in ab.get("runs") or () if isinstance(e, dict)),
                  {str(k): str(v) for k, v in _object(ab.get("before")).items()},
                  {str(k): str(v) for k, v in _object(ab.get("restored")).items()},
                  str(ab["error"]) if ab.get("error") else None)


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
    return PlanFacts(int(plan.get("cpus") or 0), plan.get("physical_cores"),
                     meminfo.get("MemTotal"), meminfo.get("MemAvailable"),
                     str(plan["fit_params"]) if plan.get("fit_params") else None, fit_args,
                     fit_error,
                     tuple(_estimate(e) for e in plan.get("estimates") or ()
                           if isinstance(e, dict)))


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
