"""serve.stability: a window of samples of the running servers (``omni-host serve watch``),
judged as the ik_llama.cpp plan's "1-hour continuous stability" gate asks.

* **A restart** (the process on a server's port changed: another pid or start time) or a
  sample where the server did not answer fails: a service that restarts under load is not
  stable, whatever its rate.
* **The rate over time**: each interval between two samples of the same process in which it
  generated at least ``MIN_TOKENS`` gives a rate (the counters' own tokens over the seconds
  spent generating them). An interval below ``DROP`` times the window's median rate is a drop;
  the median of the last third below ``DRIFT`` times the first third's is a drift. Either warns:
  requests of other lengths or more of them at once move the rate too (the finding says how
  many were decoded together), so it is a lead, not a proof.
* **Memory**: the process's resident memory or GPU memory growing by more than ``GROWTH`` and
  ``GROWTH_MIB`` from its sample a third of the way through its samples to its last warns (a
  leak shows as growth that does not stop). The first third is its warm-up: on the lent H100 a
  server under its first requests grew from 635 to 1,004 MiB resident in 25 s and stopped.
  Fewer than ``MEMORY_SAMPLES`` samples of a process say nothing of its memory.
* No tokens generated in the window: the rate is not measured (said, never a green).
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from omni_host.measure.asked import Sample
from omni_host.measure.serve import generated_between
from omni_host.model import CheckResult, Evidence, InferenceServer, Status

if TYPE_CHECKING:
    from omni_host.evaluate.meta import CheckMeta

CHECK_ID = "serve.stability"
DROP = 0.5
DRIFT = 0.8
GROWTH, GROWTH_MIB = 0.10, 256
MEMORY_SAMPLES = 6
COMMAND = "GET /metrics of each llama-server, every --every seconds"



def _key(server: InferenceServer) -> str:
    return server.address or f"pid {server.pid}"


def _when(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at))


def _process(server: InferenceServer) -> tuple[int, float | None]:
    return server.pid, server.started_at


def judge_server(key: str, seen: list[tuple[float, InferenceServer | None]]
                 ) -> tuple[list[str], list[str], dict[str, Any]]:
    """(failures, warnings, details) of one server's samples (None: absent that round). A
    server whose /metrics never answered in the window (one that asks for an API key, one
    started without --metrics) is not watched, and says why: it did not stop answering."""
    present = [s for _, s in seen if s is not None]
    if present and all(s.counters is None for s in present):
        why = present[-1].metrics_error or "no /metrics"
        return [], [], {"server": key, "samples": len(seen),
                        "not_watched": f"{key} not watched: {why}"}
    failures: list[str] = []
    warnings: list[str] = []
    rates: list[tuple[float, float, float]] = []  # (at, t/s, tokens)
    previous: tuple[float, InferenceServer] | None = None
    processes: list[list[InferenceServer]] = []  # each process's samples, in order
    down: list[tuple[float, str]] = []  # samples since the last answer where it did not answer
    for at, server in seen:
        if server is None or server.counters is None:
            why = "gone" if server is None else (server.metrics_error or "no /metrics")
            down.append((at, why))
            continue
        if previous is not None and _process(previous[1]) != _process(server):
            gap = f", {len(down)} sample(s) without an answer" if down else ""
            failures.append(f"{key} restarted between {_when(previous[0])} and {_when(at)} "
                            f"(pid {previous[1].pid} -> {server.pid}, "
                            f"{at - previous[0]:.0f} s{gap})")
            down = []
        elif previous is not None:
            rate = _interval(previous[1], server)
            if rate is not None:
                rates.append((at, *rate))
        failures += _unanswered(key, down)
        down = []
        if not processes or _process(processes[-1][-1]) != _process(server):
            processes.append([])
        processes[-1].append(server)
        previous = (at, server)
    failures += _unanswered(key, down, previous[1].pid if previous else None)
    for process in processes:
        growth = _growth(process[len(process) // 3], process[-1]) \
            if len(process) >= MEMORY_SAMPLES else None
        if growth:
            warnings.append(f"{key} memory grew: {growth} (pid {process[-1].pid})")
    details: dict[str, Any] = {
        "server": key, "samples": len(seen),
        "rates": [[round(a, 1), round(r, 3), t] for a, r, t in rates],
        # each answered sample's memory (MiB): what the report's plot draws
        "memory": [[round(at, 1), round(s.rss_kib / 1024, 1) if s.rss_kib else None,
                    s.gpu_memory_mib] for at, s in seen if s is not None and s.counters]}
    if rates:
        last = previous[1] if previous is not None else None
        first, said, figures = _rates_said(key, seen, rates, last, bool(warnings))
        warnings = [*first, *warnings, *said]
        details.update(figures)
    return failures, warnings, details


def _rates_said(key: str, seen: list[tuple[float, InferenceServer | None]],
                rates: list[tuple[float, float, float]], last: InferenceServer | None,
                warned: bool) -> tuple[list[str], list[str], dict[str, Any]]:
    """What one server's rates say: who shared its GPUs while it fell (said before any other
    warning), then the fall, a drift and a load that moves its rate; and the figures the report
    keeps (the median, the drift)."""
    first: list[str] = []
    warnings: list[str] = []
    values = [r for _, r, _ in rates]
    median = statistics.median(values)
    details: dict[str, Any] = {"median_ts": round(median, 3)}
    drops = [(a, r) for a, r, _ in rates if r < DROP * median]
    if drops:
        at, low = drops[0]
        warnings.append(f"{key} t/s fell to {low:.1f} at {_when(at)} (median {median:.1f}; "
                        f"{len(drops)} of {len(rates)} intervals below {DROP:.0%})")
        fell = {a for a, _ in drops}  # an interval's rate is stamped with its later sample
        tenants = sorted({c for when, s in seen if when in fell and s is not None
                          for c in s.gpu_cotenants or ()})
        if tenants:  # what shared its GPUs while it fell: named first
            first.append(f"{key}: other processes on its GPUs while it fell: "
                         f"{', '.join(tenants)}")
    third = len(values) // 3
    if third >= 2:
        early, late = statistics.median(values[:third]), statistics.median(values[-third:])
        details["drift"] = round(late / early, 3)
        if late < DRIFT * early:
            warnings.append(f"{key} t/s drifted from {early:.1f} to {late:.1f} "
                            f"(last third against the first)")
    shared = last.counters.busy_slots_per_decode if last and last.counters else None
    if shared is not None and shared > 1.05 and (warned or warnings or first):
        warnings.append(f"{key} decoded {shared:.2f} requests at once on average: the "
                        "load moves its rate too")
    return first, warnings, details


def _unanswered(key: str, down: list[tuple[float, str]], pid: int | None = None) -> list[str]:
    """The samples in a row where a server did not answer, said once: from when to when and
    why (the last), and, where the window ended so, that its process was not seen back."""
    if not down:
        return []
    (first, _), (last, why) = down[0], down[-1]
    span = _when(first) if first == last else f"{_when(first)} to {_when(last)}"
    end = f"; pid {pid} not seen answering again" if pid is not None else ""
    return [f"{key} did not answer at {span} ({len(down)} sample(s): {why}){end}"]


def _interval(a: InferenceServer, b: InferenceServer) -> tuple[float, float] | None:
    """(t/s, tokens) of one process between two samples, where it generated enough."""
    if a.counters is None or b.counters is None:
        return None
    generated = generated_between(a.counters, b.counters)
    return (generated[0] / generated[1], generated[0]) if generated else None


def _growth(first: InferenceServer, now: InferenceServer) -> str | None:
    for what, before, after in (("resident", first.rss_kib and first.rss_kib / 1024,
                                 now.rss_kib and now.rss_kib / 1024),
                                ("GPU", first.gpu_memory_mib, now.gpu_memory_mib)):
        if before and after and after - before > max(GROWTH * before, GROWTH_MIB):
            return f"{what} {before:.0f} -> {after:.0f} MiB"
    return None


def judge_watch(meta: CheckMeta, samples: list[Sample], *, interrupted: bool = False,
                asked_s: float | None = None) -> CheckResult:
    """serve.stability of a watch's samples (a partial window when ``interrupted``: what it
    saw go wrong stands, but a window cut short passes no stability gate; ``asked_s``: the
    window asked for)."""
    keys: list[str] = []
    for sample in samples:
        keys += [k for k in map(_key, sample.servers) if k not in keys]
    span = (samples[-1].at - samples[0].at) if samples else 0.0
    asked = f" of the {asked_s:.0f} s asked" if asked_s else ""
    head = (f"{len(samples)} samples over {span:.0f} s" +
            (f" (interrupted: a partial window{asked})" if interrupted else ""))
    lost = [f"the host did not answer at {_when(s.at)}: {s.error}" for s in samples if s.error]
    if not keys:
        return meta.result(Status.FAIL if lost else Status.SKIP,
                           f"{head}: no llama-server running" + (f"; {'; '.join(lost)}" if lost
                                                                 else ""),
                           evidence=(Evidence("serve.servers", COMMAND, tuple(lost)),),
                           details={"servers": [], "interrupted": interrupted})
    failures, warnings, parts = list(lost), [], []
    for key in keys:
        seen = [(s.at, next((v for v in s.servers if _key(v) == key), None))
                for s in samples if not s.error]
        f, w, d = judge_server(key, seen)
        failures += f
        warnings += w
        parts.append(d)
    measured = [d for d in parts if d.get("rates")]
    rates = "; ".join(f"{d['server']} median {d['median_ts']:.1f} t/s over "
                      f"{len(d['rates'])} intervals" for d in measured)
    unwatched = [d["not_watched"] for d in parts if "not_watched" in d]
    if failures:
        status, lines = Status.FAIL, failures + warnings
    elif warnings:
        status, lines = Status.WARN, warnings
    elif not measured:
        status, lines = Status.SKIP, ["no tokens generated in the window: the rate is not "
                                      "measured (no restart, memory steady)"]
    elif interrupted:  # the gate was not watched through: no pass
        status, lines = Status.SKIP, ["partial: no stability verdict (no restart, no drop, "
                                      "memory steady while it ran)"]
    else:
        status, lines = Status.PASS, ["no restart, no drop, memory steady"]
    lines += unwatched
    summary = f"{head}: " + "; ".join(lines) + (f" ({rates})" if rates else "")
    return meta.result(status, summary, evidence=(Evidence("serve.servers", COMMAND,
                                                           tuple(lines)),),
                       details={"servers": parts, "interrupted": interrupted})
