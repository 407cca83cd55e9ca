"""llama-bench's ``-o json`` records: its tests, their repetitions and what each measured (the
comparability key). The bench helper's document around them is read by ``bench_run.py``.

A llama-bench record is one test (``pp512``: a 512-token prompt; ``tg128``: 128 generated
tokens; ``pp512+tg128``) under one set of parameters, with every repetition's tokens/s in
``samples_ts``: the noise is read from those, never assumed. Lessons S-005, F-003, F-002.
"""

from __future__ import annotations

import json
import re
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

