"""The inference servers of a host, from the serve helper's document (``remote/serve.py``):
how each runs, and what its ``/metrics`` (Prometheus text), ``/props`` and a timed probe say.

A server's own answers are untrusted input: a garbled or hostile one costs that server its
counters (an error line), never the document.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.model import InferenceServer, ServedCounters, ServedProbe, Servers
from omni_host.probes.parsers import excerpt
from omni_host.remote.procfacts import bench_env, redacted_argv

# llama-server's counters (tools/server/server.cpp, ``llamacpp:`` family) -> our names
MAX_SERVERS = 64  # the helper reads 16; a forged document does not make the controller judge more
COUNTERS = {
    "llamacpp:prompt_tokens_total": "prompt_tokens",
    "llamacpp:prompt_seconds_total": "prompt_seconds",
    "llamacpp:tokens_predicted_total": "predicted_tokens",
    "llamacpp:tokens_predicted_seconds_total": "predicted_seconds",
    "llamacpp:n_decode_total": "decode_calls",
    "llamacpp:requests_processing": "requests_processing",
    "llamacpp:requests_deferred": "requests_deferred",
    "llamacpp:n_busy_slots_per_decode": "busy_slots_per_decode",
}
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text exposition (name -> value); comments, labelled
    samples and lines that are not samples are passed over."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or match.group(2):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[match.group(1)] = value
    return out


def counters(text: str) -> ServedCounters:
    """llama-server's counters from its /metrics; ParseError when it holds none of them."""
    samples = parse_prometheus(text)
    found = {ours: samples[name] for name, ours in COUNTERS.items() if name in samples}
    if not found:
        raise ParseError(f"no llama.cpp counters in /metrics: {excerpt(text, 80)!r}")
    if any(v < 0 for v in found.values()):
        raise ParseError("a llama.cpp counter in /metrics is negative")
    return ServedCounters(**found)


def redacted(argv: list[Any]) -> tuple[str, ...]:
    """The argv with every value not known safe replaced (``procfacts.redacted_argv``, by
    llama.cpp's own table): the host's helper does it first, and its very rule runs again
    here (a forged document does not get one through either)."""
    return tuple(redacted_argv([str(a) for a in argv]))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _int(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


def _text(value: Any, cap: int = 512) -> str | None:
    return str(value)[:cap] if isinstance(value, (str, int, float)) else None


def _props(server: InferenceServer, text: str) -> dict[str, Any]:
    try:
        doc = load_json(text)
    except ValueError:
        return {"props_error": f"/props is not JSON: {excerpt(text, 60)!r}"}
    if not isinstance(doc, dict):
        return {"props_error": "/props is not a JSON object"}
    settings = doc.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return {"n_ctx": _int(n_ctx), "build": _text(doc.get("build_info"), 120),
            "slots": _int(doc.get("total_slots")),
            "model_path": server.model_path or _text(doc.get("model_path"))}


def _probe(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        return {}
    if "skipped" in doc or "error" in doc:
        return {"probe_note": _text(doc.get("skipped") or doc.get("error"), 300)}
    timings = doc.get("timings")
    if not isinstance(timings, dict):
        return {"probe_note": "the probe's answer has no timings"}
    n, rate = _int(timings.get("predicted_n")), _number(timings.get("predicted_per_second"))
    if n is None or rate is None or n <= 0 or rate <= 0:
        return {"probe_note": "the probe's timings hold no generation rate"}
    return {"probe": ServedProbe(n, rate, _int(timings.get("prompt_n")),
                                 _number(timings.get("prompt_per_second")))}


def _pages(raw: Any) -> tuple[tuple[int, int], ...] | None:
    """(NUMA node, KiB of the model resident there) from the helper's numa_maps sum; None
    where it was not read."""
    if not isinstance(raw, dict) or not isinstance(raw.get("nodes"), dict):
        return None
    page = _int(raw.get("page_kib")) or 4
    found = []
    for node, pages in raw["nodes"].items():
        if str(node).isdigit() and (count := _int(pages)) is not None:
            found.append((int(node), count * page))
    return tuple(sorted(found))[:1024]


def _by_gpu(raw: Any) -> tuple[tuple[str, int], ...] | None:
    """{GPU UUID: MiB} as sorted pairs (at most 64 GPUs); None where not read."""
    if not isinstance(raw, dict):
        return None
    return tuple(sorted((str(k)[:64], mib) for k, v in raw.items()
                        if (mib := _int(v)) is not None))[:64]


def _server(doc: dict[str, Any], beside: dict[str, Any]) -> InferenceServer:
    quota = doc.get("cpu_quota")
    found = doc.get("model")
    model: dict[str, Any] = found if isinstance(found, dict) else {}
    env = doc.get("env")
    huge = doc.get("huge_pages_kib")
    huge = huge if isinstance(huge, dict) else {}
    server = InferenceServer(
        kind=str(doc.get("kind", "llama-server"))[:40],
        pid=_int(doc.get("pid")) or 0,
        argv=redacted(argv if isinstance(argv := doc.get("argv"), list) else []),
        exe=_text(doc.get("exe")),
        sha256=_text(doc.get("sha256"), 80),
        env=bench_env({str(k): str(v) for k, v in env.items()})  # the helper's rule, again
        if isinstance(env, dict) else None,
        cpus_allowed=_int(doc.get("cpus_allowed")),
        cpus_allowed_list=_text(doc.get("cpus_allowed_list"), 200),
        quota_cpus=_number(quota.get("cpus")) if isinstance(quota, dict) else None,
        quota_cgroup=_text(quota.get("cgroup")) if isinstance(quota, dict) else None,
        started_at=_number(doc.get("started_at")),
        rss_kib=_int(doc.get("rss_kib")),
        threads=_int(doc.get("threads")),
        swap_kib=_int(doc.get("swap_kib")), locked_kib=_int(doc.get("locked_kib")),
        anon_kib=_int(huge.get("Anonymous")), anon_huge_kib=_int(huge.get("AnonHugePages")),
        file_pmd_kib=_int(huge.get("FilePmdMapped")),
        gpu_memory_mib=_int(doc.get("gpu_memory_mib")),
        gpu_memory_by_gpu=_by_gpu(doc.get("gpu_memory_by_gpu")),
        gpu_cotenants=tuple(str(c)[:120] for c in cotenants[:32])
        if isinstance(cotenants := doc.get("gpu_cotenants"), list) else None,
        container=_text(doc.get("container"), 64),
        address=_text(doc.get("address"), 120),
        model_path=_text(model.get("path")),
        model_pages_by_node=_pages(doc.get("model_pages")),
        model_bytes=_int(model.get("size_bytes")),
        model_fingerprint=_text(model.get("fingerprint"), 64),
        metrics_error=_text(doc.get("metrics_error"), 300),
        props_error=_text(doc.get("props_error"), 300),
        bench_server_path=_text(beside.get("path")),
        bench_server_sha256=_text(beside.get("sha256"), 80),
    )
    changes: dict[str, Any] = {}
    if isinstance(doc.get("metrics"), str):
        try:
            changes["counters"] = counters(doc["metrics"])
        except ParseError as exc:
            changes["metrics_error"] = str(exc)
    if isinstance(doc.get("props"), str):
        changes.update(_props(server, doc["props"]))
    changes.update(_probe(doc.get("probe")))
    return dataclasses.replace(server, **changes)


def parse_servers(text: str) -> Servers:
    try:
        doc = load_json(text)
    except ValueError as exc:
        raise ParseError(f"serve helper output is not JSON: {excerpt(text, 120)!r}") from exc
    if not isinstance(doc, dict) or doc.get("helper") != 1 or not isinstance(doc.get("servers"), list):
        raise ParseError(f"not the serve helper's document: {excerpt(text, 120)!r}")
    found = doc.get("bench_server")
    beside: dict[str, Any] = found if isinstance(found, dict) else {}
    unread = doc.get("unread")
    return Servers((_server(s, beside) for s in doc["servers"][:MAX_SERVERS] if isinstance(s, dict)),
                   unread if isinstance(unread, int) and 0 < unread < 1 << 31 else 0)
