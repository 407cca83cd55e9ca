"""A host's bench baseline, found in the report store: what ``omni-host bench`` judges a run
against, and what the audit holds a running server's rate to."""

from __future__ import annotations

from collections.abc import Callable

from omni_host.measure.settle import StoredRun, stored_run
from omni_host.model import Baseline, JudgedSince, Source
from omni_host.report.history import History, HostEntries


def find_baseline(history: History, host: str, warn: Callable[[str], None] = lambda _: None
                  ) -> Baseline | None:
    """The host's baseline in the store (``baseline_in`` of its stored audits)."""
    return baseline_in(history.for_host(host), warn)


def baseline_in(entries: HostEntries, warn: Callable[[str], None] = lambda _: None
                ) -> Baseline | None:
    """The host's newest fit recorded baseline in the store, with the centers of the fit runs
    of the same state judged against it since, in time order (their spread is the noise
    between runs, their modes the host's, their order tells a drift from noise). A
    stored bench whose details do not read is skipped with one warning."""
    later: list[tuple[StoredRun, str, float]] = []
    for audit, entry in entries:
        if audit.report.source is not Source.BENCH:
            continue
        if entry.bench_unread:
            warn(f"{audit.path / 'report.json'}: {entry.host}'s stored bench is malformed "
                 f"({entry.bench_unread}): skipped")
            continue
        if entry.bench is None:  # it failed: nothing measured
            continue
        stored = stored_run(entry.bench)
        if not stored.recorded_baseline:
            later.append((stored, audit.id, audit.started_at))
            continue
        if not stored.fit:  # stored before fitness was checked, and forced: not a baseline
            continue
        centers = {name: [c] for name, c in stored.centers().items()}
        since = []
        for run, run_id, started_at in reversed(later):  # in time order: a slide is told by it
            if run.baseline != audit.id:
                continue
            same = [n for n in run.tests if run.keys.get(n, ()) == stored.keys.get(n, ())]
            judged = {n: c for n, c in run.centers().items() if n in same}
            level: dict[str, tuple[float, ...]] = {}
            if run.fit and not run.changed and len(same) == len(run.tests):
                level = {n: (*((run.first_centers[n],) if n in run.first_centers else ()), c)
                         for n, c in judged.items()}
                for name, values in level.items():  # measured first, then judged
                    centers.setdefault(name, []).extend(values)
            since.append(JudgedSince(run_id, started_at, judged, level, run.changed))
        return Baseline(audit.id, audit.started_at, stored.tests, dict(stored.context), centers,
                        stored.keys, tuple(since))
    return None
