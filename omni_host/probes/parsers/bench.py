"""llama-bench's ``-o json`` records, and the bench helper's document around them
(``omni_host/remote/bench.py``: the idle gate, the host context, the run, what happened during
it).

A llama-bench record is one test (``pp512``: a 512-token prompt; ``tg128``: 128 generated
tokens; ``pp512+tg128``) under one set of parameters, with every repetition's tokens/s in
``samples_ts``: the noise is read from those, never assumed. Lessons S-005, F-003, F-002.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any

from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt, na

# Parameters that tell two records of one run apart (llama-bench takes lists for each).
VARYING = ("n_threads", "n_gpu_layers", "split_mode", "tensor_split", "flash_attn", "n_batch",
           "n_ubatch", "type_k", "type_v", "n_cpu_moe", "main_gpu", "no_kv_offload")
SHORT = {"n_threads": "t", "n_gpu_layers": "ngl", "split_mode": "sm", "tensor_split": "ts",
         "flash_attn": "fa", "n_batch": "b", "n_ubatch": "ub", "type_k": "ctk", "type_v": "ctv",
         "n_cpu_moe": "ncmoe", "main_gpu": "mg", "no_kv_offload": "nkvo"}


@dataclass(frozen=True)
class BenchTest:
    """One llama-bench test: its name, every repetition's tokens/s, and what it ran on."""

    name: str  # pp512, tg128, pp512+tg128, with @d<depth> and the parameters that vary
    kind: str  # "pp" (prompt processing), "tg" (generation) or "pg" (both)
    samples_ts: tuple[float, ...]
    params: dict[str, Any]

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


def spread(samples: list[float] | tuple[float, ...]) -> tuple[float, float]:
    """(mean, relative standard deviation) of tokens/s samples: the one noise measure."""
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


def _name(rec: dict[str, Any]) -> tuple[str, str]:
    n_prompt, n_gen = int(rec.get("n_prompt") or 0), int(rec.get("n_gen") or 0)
    if n_prompt and n_gen:
        kind, name = "pg", f"pp{n_prompt}+tg{n_gen}"
    elif n_gen:
        kind, name = "tg", f"tg{n_gen}"
    elif n_prompt:
        kind, name = "pp", f"pp{n_prompt}"
    else:
        raise ParseError("a llama-bench record with neither n_prompt nor n_gen")
    depth = int(rec.get("n_depth") or 0)
    return kind, name + (f"@d{depth}" if depth else "")


def _samples(rec: dict[str, Any]) -> tuple[float, ...]:
    samples = rec.get("samples_ts")
    if not isinstance(samples, list) or not samples:
        if isinstance(rec.get("avg_ts"), (int, float)):
            return (float(rec["avg_ts"]),)
        raise ParseError("a llama-bench record without samples_ts or avg_ts")
    values = tuple(float(s) for s in samples if isinstance(s, (int, float)))
    if len(values) != len(samples) or any(not math.isfinite(v) or v <= 0 for v in values):
        raise ParseError(f"samples_ts holds something other than positive numbers: "
                         f"{excerpt(json.dumps(samples), 80)}")
    return values


def parse_llama_bench_json(text: str) -> LlamaBench:
    """``llama-bench -o json``: a JSON array of records (one per test and parameter set)."""
    try:
        records = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"llama-bench output is not JSON ({exc}): {excerpt(text, 120)!r}") from exc
    if not isinstance(records, list) or not records or not all(isinstance(r, dict) for r in records):
        raise ParseError(f"llama-bench JSON is not a list of records: {excerpt(text, 120)!r}")
    varying = [k for k in VARYING if len({json.dumps(r.get(k)) for r in records}) > 1]
    tests = []
    for rec in records:
        kind, name = _name(rec)
        if varying:
            name += " " + " ".join(f"{SHORT[k]}={rec.get(k)}" for k in varying)
        params = {k: rec.get(k) for k in VARYING if k in rec}
        tests.append(BenchTest(name, kind, _samples(rec), params))
    first = records[0]

    def text_of(key: str) -> str | None:
        value = first.get(key)
        return na(str(value)) if value is not None else None

    def int_of(key: str) -> int | None:
        value = first.get(key)
        return int(value) if isinstance(value, (int, float)) else None

    return LlamaBench(tuple(tests), text_of("build_commit"), int_of("build_number"),
                      text_of("backends"), text_of("model_type"), int_of("model_size"),
                      int_of("model_n_params"), text_of("cpu_info"), text_of("gpu_info"))


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


def parse_bench_run(text: str) -> BenchRun:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"bench helper output is not JSON: {excerpt(text, 120)!r}") from exc
    if not isinstance(doc, dict) or doc.get("helper") != 1:
        raise ParseError(f"not the bench helper's document: {excerpt(text, 120)!r}")
    context = doc.get("context") if isinstance(doc.get("context"), dict) else {}
    gate = doc.get("gate") if isinstance(doc.get("gate"), dict) else {}
    if doc.get("refused"):
        return BenchRun(str(doc["refused"]), context, gate)
    run = doc.get("run")
    if not isinstance(run, dict):
        raise ParseError("bench helper document without a run")
    error = _run_error(run)
    result = None
    if error is None:
        try:
            result = parse_llama_bench_json(str(run.get("stdout") or ""))
        except ParseError as exc:
            error = f"llama-bench exited 0 but {exc}"
    return BenchRun(None, context, gate, tuple(str(a) for a in run.get("argv") or ()),
                    run.get("exit_code"), bool(run.get("timed_out")), run.get("duration_s"),
                    error, result, tuple(str(x) for x in run.get("stderr_tail") or ()),
                    doc.get("during") if isinstance(doc.get("during"), dict) else None)
