"""serve.tokens-per-s: the generation rate each running llama-server delivers, against the
host's own bench of the same model, with every difference between how the server runs and how
the bench ran named.

* **The served rate** is the server's own counters: tokens generated over the seconds it spent
  generating them (``tokens_predicted_total`` / ``tokens_predicted_seconds_total``), over the
  window since the host's previous stored audit where the same process was seen (the counters
  of one process only grow). A window of fewer than ``MIN_TOKENS`` is too little to judge: a
  probe (one fixed completion to an idle server), where one was timed, measures it now, else
  the counters since the server started do.
* **Comparable** only with a bench of the same model file (its size and fingerprint); another
  model is said, never judged.
* **The verdict**: below ``omni_serve.min_fraction`` (default 0.5) of the bench's generation
  rate fails. Users who report the gap find their server at a third of llama-bench (llama.cpp
  #15297); a matching server on this VM runs at about 0.9 (docs/serve.md). Above it passes;
  the differences are named either way: threads, layers on the GPU, batch sizes, split, cache
  types, parallel slots, the CPUs it may use, its cgroup quota, its binary, its environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_host.documents import load_json
from omni_host.measure.context import ENV, MODEL_FINGERPRINT
from omni_host.model import CheckResult, Evidence, InferenceServer, ServedCounters, Status
from omni_host.outcome import rate
from omni_host.probes.parsers.bench import estimate
from omni_host.remote.procfacts import option_value

if TYPE_CHECKING:  # types only: the check registry imports this module
    from omni_host.evaluate.meta import CheckMeta
    from omni_host.model import Baseline

CHECK_ID = "serve.tokens-per-s"
MIN_TOKENS = 32  # generated tokens a window needs before its rate says anything
DEFAULT_MIN_FRACTION = 0.5
SHARED_DECODE = 1.05  # llamacpp:n_busy_slots_per_decode past this: requests shared decodes
COMMAND = "GET /metrics, /props (llama-server on the loopback)"

# llama-server's options (and their LLAMA_ARG_ variables) -> llama-bench's record field
OPTIONS = (
    ("threads", ("-t", "--threads"), "LLAMA_ARG_THREADS", "n_threads"),
    ("layers on the GPU", ("-ngl", "--gpu-layers", "--n-gpu-layers"), "LLAMA_ARG_N_GPU_LAYERS",
     "n_gpu_layers"),
    ("batch size", ("-b", "--batch-size"), "LLAMA_ARG_BATCH", "n_batch"),
    ("micro-batch size", ("-ub", "--ubatch-size"), "LLAMA_ARG_UBATCH", "n_ubatch"),
    ("split mode", ("-sm", "--split-mode"), "LLAMA_ARG_SPLIT_MODE", "split_mode"),
    ("tensor split", ("-ts", "--tensor-split"), "LLAMA_ARG_TENSOR_SPLIT", "tensor_split"),
    ("flash attention", ("-fa", "--flash-attn"), "LLAMA_ARG_FLASH_ATTN", "flash_attn"),
    ("K cache type", ("-ctk", "--cache-type-k"), "LLAMA_ARG_CACHE_TYPE_K", "type_k"),
    ("V cache type", ("-ctv", "--cache-type-v"), "LLAMA_ARG_CACHE_TYPE_V", "type_v"),
)


@dataclass(frozen=True)
class ServedRate:
    tokens: float
    seconds: float
    window: str  # "since it started" / "since the audit of <id>" / "one probe of N tokens"

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def metrics_on(server: InferenceServer) -> bool:
    """Started with --metrics (or LLAMA_ARG_ENDPOINT_METRICS): a /metrics that did not answer
    is then no matter of how it was started."""
    return "--metrics" in server.argv or (server.env or {}).get(
        "LLAMA_ARG_ENDPOINT_METRICS", "").lower() in ("1", "true", "on", "enabled")


def option(server: InferenceServer, flags: tuple[str, ...], variable: str) -> str | None:
    """The value the server was given for an option, read as the host's helper reads it."""
    return option_value(server.argv, flags, server.env or {}, variable)


def served_rate(server: InferenceServer, previous: InferenceServer | None,
                previous_audit: str | None) -> ServedRate | None:
    """The server's generation rate over the widest window its counters allow; None where
    it is no rate (counters that make it infinite, zero or past any GPU's: a forged or broken
    /metrics is not judged, and never writes Infinity into a report)."""
    found = _window(server, previous, previous_audit)
    if found is None or not found.seconds > 0:
        return None
    return found if rate(found.tokens / found.seconds) is not None else None


def _window(server: InferenceServer, previous: InferenceServer | None,
            previous_audit: str | None) -> ServedRate | None:
    now = server.counters
    if now is None or not now.predicted_tokens or not now.predicted_seconds:
        return _probed(server)
    then = previous.counters if previous is not None and _same_process(server, previous) else None
    generated = generated_between(then, now) if then is not None else None
    if generated is not None:
        return ServedRate(*generated, f"since the audit of {previous_audit}")
    if server.probe is not None:  # quiet since the last audit: the probe is today's rate
        return _probed(server)
    if now.predicted_tokens >= MIN_TOKENS:
        return ServedRate(now.predicted_tokens, now.predicted_seconds, "since it started")
    return _probed(server)


def _probed(server: InferenceServer) -> ServedRate | None:
    probe = server.probe
    if probe is None:
        return None
    return ServedRate(probe.predicted_n, probe.predicted_n / probe.predicted_per_second,
                      f"one probe of {probe.predicted_n} tokens")


def _same_process(a: InferenceServer, b: InferenceServer) -> bool:
    return a.pid == b.pid and a.started_at is not None and a.started_at == b.started_at


def generated_between(then: ServedCounters, now: ServedCounters) -> tuple[float, float] | None:
    """(tokens, seconds spent generating them) between two reads of one process's counters;
    None where they did not grow by ``MIN_TOKENS`` (too few to judge) or went back."""
    if then.predicted_tokens is None or then.predicted_seconds is None or \
            now.predicted_tokens is None or now.predicted_seconds is None:
        return None
    tokens = now.predicted_tokens - then.predicted_tokens
    seconds = now.predicted_seconds - then.predicted_seconds
    return (tokens, seconds) if tokens >= MIN_TOKENS and seconds > 0 else None


def _bench_value(baseline: Baseline, test: str, field: str) -> str | None:
    for name, value in baseline.keys.get(test, ()):
        if name == field:
            decoded = load_json(value)
            return None if decoded is None else str(decoded)
    return None


_SWITCH = {"on": "1", "true": "1", "enabled": "1", "off": "0", "false": "0", "disabled": "0"}


def _normal(value: str) -> str:
    """One spelling per value: on/true/1 and off/false/0 alike; a split (75,25 or
    0.75/0.25) as its proportions."""
    text = value.strip().lower()
    parts = [p for p in text.replace("/", ",").split(",") if p]
    if len(parts) > 1:
        try:
            shares = [float(p) for p in parts]
        except ValueError:
            return text
        total = sum(shares)
        return ",".join(f"{s / total:.2f}" for s in shares) if total > 0 else text
    try:
        return f"{float(text):g}"
    except ValueError:
        return _SWITCH.get(text, text)


def _same_value(server_value: str, bench_value: str) -> bool:
    return _normal(server_value) == _normal(bench_value)


def cotenants(server: InferenceServer) -> list[str]:
    """Other processes on the server's GPUs, named first: the bench's gate refuses them, a
    server shares its GPUs with them."""
    if not server.gpu_cotenants:
        return []
    return [f"other processes on its GPUs: {', '.join(server.gpu_cotenants)} (the bench ran "
            "with none)"]


def differences(server: InferenceServer, baseline: Baseline, test: str) -> list[str]:
    """How the server runs where the bench ran otherwise: each as "what: bench X, server Y"."""
    found = []
    for what, flags, variable, field in OPTIONS:
        given, bench = option(server, flags, variable), _bench_value(baseline, test, field)
        if given is not None and bench is not None and not _same_value(given, bench):
            found.append(f"{what}: the bench ran {bench}, the server runs {given}")
    shared = server.counters.busy_slots_per_decode if server.counters else None
    if shared is not None and shared > SHARED_DECODE:
        found.append(f"concurrent requests: the bench decoded 1 sequence, the server "
                     f"{shared:.2f} requests at once on average (each one's tokens/s is its "
                     f"share of the decode)")
    if "--no-mmap" in server.argv and _bench_value(baseline, test, "use_mmap") not in ("False", None):
        found.append("mmap: the bench mapped the model, the server reads it in (--no-mmap)")
    ctx = baseline.context
    bench_cpus = ctx.get("cpus_allowed")
    if server.cpus_allowed is not None and isinstance(bench_cpus, int) and \
            server.cpus_allowed != bench_cpus:
        found.append(f"CPUs allowed: the bench had {bench_cpus}, the server has "
                     f"{server.cpus_allowed} ({server.cpus_allowed_list})")
    bench_quota = ctx.get("cpu_quota")
    server_quota = (f"{server.quota_cpus:g} CPUs ({server.quota_cgroup})"
                    if server.quota_cpus is not None else "none")
    if bench_quota is not None and _quota_cpus(str(bench_quota)) != server.quota_cpus:
        found.append(f"CPU quota (cgroup): the bench had {bench_quota}, the server has "
                     f"{server_quota}")
    if server.bench_server_sha256 is not None and server.sha256 is not None and \
            server.sha256 != server.bench_server_sha256:
        found.append(f"binary: the server runs {server.exe} (sha256 {server.sha256[:16]}), not "
                     f"the llama-server built beside the benched llama-bench "
                     f"({server.bench_server_path}, sha256 {server.bench_server_sha256[:16]})")
    bench_env = {k[len(ENV):]: v for k, v in ctx.items()
                 if k.startswith(ENV) and _speed(k[len(ENV):])}
    if server.env is not None:
        for name in sorted(set(bench_env) | {n for n in server.env if _speed(n)}):
            if bench_env.get(name) != server.env.get(name):
                found.append(f"environment {name}: the bench had "
                             f"{_shown(bench_env.get(name))}, the server has "
                             f"{_shown(server.env.get(name))}")
    return found


# The environment that changes llama.cpp's speed: compared. Where the toolkit lives, its
# version label and the library path are recorded with the bench, not compared (a server under
# systemd or Docker has other values there; on the lent H100 they were all a matching server
# differed in); LLAMA_ARG_* are its options, compared as those.
SPEED_ENV_PREFIXES = ("GGML_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_")
SPEED_ENV_NAMES = ("GLIBC_TUNABLES", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                   "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "CUDA_SCALE_LAUNCH_QUEUES")


def _speed(name: str) -> bool:
    return name.startswith(SPEED_ENV_PREFIXES) or name in SPEED_ENV_NAMES


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(value)


def _quota_cpus(text: str) -> float | None:
    head = text.split()[0] if text.split() else ""
    try:
        return float(head)
    except ValueError:
        return None



def _tg_test(baseline: Baseline) -> str | None:
    """The bench's generation test (tg128 and the like; the first where there are several)."""
    return next((name for name in baseline.tests if name.startswith("tg")), None)


def _name(server: InferenceServer) -> str:
    where = server.address or f"pid {server.pid}"
    inside = f" in container {server.container[:12]}" if server.container else ""
    return f"llama-server {where}{inside}"


def judge_server(server: InferenceServer, baseline: Baseline | None, min_fraction: float,
                 previous: InferenceServer | None = None, previous_audit: str | None = None,
                 moved: str | None = None) -> tuple[Status, str, dict[str, Any]]:
    """One server's verdict, its line, and its details. ``moved``: how its placement moved
    since the previous audit (``placement_moved``): the first difference named where it runs
    below its bench, else a warning of its own."""
    status, line, details = _judge_server(server, baseline, min_fraction, previous,
                                          previous_audit, moved)
    if moved and status in (Status.PASS, Status.SKIP):
        return (Status.WARN, line if moved in line else f"{line}; {moved}",
                details | {"placement_moved": moved})
    return status, line, details | ({"placement_moved": moved} if moved else {})


def _judge_server(server: InferenceServer, baseline: Baseline | None, min_fraction: float,
                  previous: InferenceServer | None, previous_audit: str | None,
                  moved: str | None) -> tuple[Status, str, dict[str, Any]]:
    name = _name(server)
    details: dict[str, Any] = {"server": name, "pid": server.pid, "model": server.model_path}
    if server.counters is None and server.probe is None:
        why = server.metrics_error or "no /metrics"
        hint = " (start it with --metrics)" if not metrics_on(server) and \
            "API key" not in why else ""
        return Status.SKIP, f"{name}: not evaluated: {why}{hint}", details
    rate = served_rate(server, previous, previous_audit)
    if rate is None:
        served = server.counters.predicted_tokens if server.counters else 0
        note = f"; probe: {server.probe_note}" if server.probe_note else ""
        return (Status.SKIP, f"{name}: {served or 0:.0f} tokens served so far: too few to judge "
                f"(send it requests, or audit with a probe){note}", details)
    details.update(served_ts=round(rate.tokens_per_s, 3), window=rate.window,
                   tokens=rate.tokens)
    counted = "" if rate.window.startswith("one probe") else f", {rate.tokens:.0f} tokens"
    line = f"{name} serves {rate.tokens_per_s:.2f} t/s ({rate.window}{counted})"
    if baseline is None:
        return (Status.SKIP, f"{line}; no bench baseline of this host to compare with "
                "(omni-host bench --baseline)", details)
    bench_fp = baseline.context.get(MODEL_FINGERPRINT)
    if server.model_fingerprint is None or bench_fp != server.model_fingerprint:
        return (Status.SKIP, f"{line}; not comparable with the bench: the server's model "
                f"{server.model_path} ({server.model_fingerprint or 'unread'}) is not the "
                f"benched one ({bench_fp})", details)
    test = _tg_test(baseline)
    if test is None:
        return Status.SKIP, f"{line}; the baseline has no generation test", details
    bench_ts = estimate(baseline.tests[test]).center_ts
    fraction = rate.tokens_per_s / bench_ts
    diffs = cotenants(server) + ([moved] if moved else []) + differences(server, baseline, test)
    details.update(bench_ts=round(bench_ts, 3), bench_test=test, bench_audit=baseline.audit,
                   fraction=round(fraction, 3), differences=diffs, min_fraction=min_fraction)
    text = f"{line}, {fraction:.0%} of the bench's {test} ({bench_ts:.2f} t/s)"
    if fraction < min_fraction:
        why = "; ".join(diffs) if diffs else \
            "no difference in how it runs was found: the load it serves (long contexts, " \
            "concurrent requests) or the host since the bench"
        return Status.FAIL, f"{text}, below {min_fraction:.0%}: {why}", details
    tail = f"; differs from the bench in: {'; '.join(diffs)}" if diffs else ""
    return Status.PASS, text + tail, details


MOVED_MIB = 512  # a GPU's share of a restarted server that moved by more (and 5%) moved


def placement_moved(server: InferenceServer, earlier: tuple[InferenceServer, ...],
                    previous_audit: str | None) -> str | None:
    """Where a server restarted with the same args and model since the previous audit (another
    pid) holds its GPU memory elsewhere than it did: llama.cpp's ``--fit`` (no ``-ngl`` or
    ``-ot``) places by the memory free at the start, so another process holding GPU memory then
    moves layers to the CPU. The GPUs named by UUID, as nvidia-smi names them."""
    from omni_host.measure.placement import FIT_DECIDES

    now = dict(server.gpu_memory_by_gpu or ())
    for before in earlier:
        if before.pid == server.pid or before.argv != server.argv or \
                before.model_fingerprint != server.model_fingerprint or \
                before.gpu_memory_by_gpu is None or server.gpu_memory_by_gpu is None:
            continue
        then = dict(before.gpu_memory_by_gpu)
        moved = [g for g in sorted(set(now) | set(then))
                 if abs(now.get(g, 0) - then.get(g, 0)) > max(MOVED_MIB, 0.05 * then.get(g, 0))]
        if not moved:
            return None
        words = ", ".join(f"{g[:12]} {then.get(g, 0) / 1024:.1f} -> {now.get(g, 0) / 1024:.1f} GiB"
                          for g in moved)
        why = "llama.cpp's --fit placed it (no -ngl or -ot in its args) by the GPU memory free " \
              "at its start: another process held some then, or held more before" \
            if not any(a in FIT_DECIDES for a in server.argv) else \
            "its args are the same: the model, the context or another GPU's memory differs"
        return (f"its GPU memory moved since the audit of {previous_audit or 'before'} (pid "
                f"{before.pid}, the same args and model, restarted as pid {server.pid}): "
                f"{words}; {why}")
    return None


def judge_served(meta: CheckMeta, servers: tuple[InferenceServer, ...],
                 baseline: Baseline | None, *, min_fraction: float = DEFAULT_MIN_FRACTION,
                 previous: Mapping[int, InferenceServer] | None = None,
                 previous_audit: str | None = None) -> CheckResult:
    """serve.tokens-per-s of a host's servers (the worst verdict of its servers)."""
    if not servers:
        return meta.result(Status.SKIP, "no inference server (llama-server) is running",
                           evidence=(Evidence("serve.servers", COMMAND, ()),),
                           details={"servers": [], "min_fraction": min_fraction})
    earlier = tuple((previous or {}).values())
    verdicts = [judge_server(s, baseline, min_fraction, (previous or {}).get(s.pid),
                             previous_audit, placement_moved(s, earlier, previous_audit))
                for s in servers]
    order = (Status.FAIL, Status.WARN, Status.PASS, Status.SKIP)
    status = next((s for s in order if any(v[0] is s for v in verdicts)), Status.SKIP)
    lines = tuple(line for _, line, _ in verdicts)
    unread = getattr(servers, "unread", 0)
    if unread:  # never a silent skip: the servers left unjudged are counted, and warned of
        lines += (f"{unread} more llama-server process(es) left unread (the helper reads "
                  f"{len(servers)}, listening servers first)",)
        status = Status.WARN if status in (Status.PASS, Status.SKIP) else status
    return meta.result(status, "; ".join(lines), evidence=(Evidence("serve.servers", COMMAND, lines),),
                       details={"servers": [d | {"status": s.value, "line": line}
                                            for s, line, d in verdicts],
                                "min_fraction": min_fraction})
