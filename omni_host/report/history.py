"""The report store read back: stored audits, what changed between two of them, and the
cold cases (what changed state since a host's previous audit).

Stored reports are read back as the typed report (``Report.from_dict``): one of a newer
schema, a corrupt or truncated one, or one whose fields do not fit is skipped with a warning
naming the file and the field. Everything here reads the typed reports.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from omni_host import __version__
from omni_host.codec import FormatError, to_dict
from omni_host.model import BLOCKED_ENGINE, REPORT_SCHEMA, ColdCase, ColdCaseItem, Source, Status
from omni_host.outcome import BenchOutcome, JudgedTest, LastBench, rate
from omni_host.plan.policy import check_readers
from omni_host.report.plots import Point, Series
from omni_host.report.results import (
    KNOB,
    PLACEMENT,
    PROOF,
    WHY,
    perf_result,
    served_rates,
)
from omni_host.report.store import audit_dirs
from omni_host.report.text import target
from omni_host.reports import Change, HostDiff, HostReport, Report
from omni_host.resources import TooLarge, atomic_write, cache_home, not_own, read_json

BAD = ("fail", "error")
COMPARED_FACTS = ("numa_nodes", "sockets", "driver_version", "cuda_version", "gpus", "swap_total_mib",
                  "mem_total_mib", "kernel", "cpu", "nvlink")


@dataclass(frozen=True)
class StoredAudit:
    """One stored audit: its id, its directory, and the typed report it holds (decoded from
    its JSON once, when first read)."""

    id: str
    path: Path
    stored: dict[str, Any] = field(repr=False, compare=False)  # report.json as read

    @cached_property
    def report(self) -> Report:
        return Report.from_dict(self.stored)

    @property
    def started_at(self) -> float:
        return self.report.started_at

    def host(self, name: str) -> HostReport | None:
        return next((h for h in self.report.hosts if h.host == name), None)

    def host_names(self) -> list[str]:
        return [h.host for h in self.report.hosts if h.reachable]


@dataclass(frozen=True)
class History:
    audits: list[StoredAudit]  # newest first
    warnings: list[str] = field(default_factory=list)
    unreadable: str | None = None  # why the whole store was not read (another user can write it)

    def resolve(self, ref: str) -> StoredAudit:
        from omni_host.errors import UsageError

        if not self.audits:
            raise UsageError("the report store holds no audit yet")
        if ref == "latest":
            return self.audits[0]
        found = [a for a in self.audits if a.id == ref or a.id.startswith(ref)]
        if len(found) != 1:
            raise UsageError(f"no single stored audit matches {ref!r}" +
                             (f" ({len(found)} do)" if found else ""))
        return found[0]

    def for_host(self, host: str) -> list[tuple[StoredAudit, HostReport]]:
        """(audit, host entry) newest first, reachable entries only, and never a stability
        watch's report (one check, no facts): the Cold Case, the served window and the
        timelines compare audits."""
        return [(a, h) for a in self.audits if a.report.source is not Source.WATCH
                and (h := a.host(host)) is not None and h.reachable]


MAX_REPORT_BYTES = 512 * 1024 * 1024  # a stored report: its results, never its bundles


def load_history(root: Path) -> History:
    """The stored audits, read only from directories this user owns: a store (or an audit in
    it) that another account owns or could write is not trusted (a planted audit would become
    the "latest" that diffs, baselines and the Cold Case compare with). Each report is checked
    against the typed report once per change of its file (and of omni-host); one checked before
    is decoded when it is first read."""
    audits, warnings = [], []
    foreign = not_own(root)
    if foreign:
        why = f"{root}: {foreign}: the report store is not read"
        return History([], [why], why)
    checked = _checked(root)
    known = dict(checked)
    for directory in audit_dirs(root):
        foreign = not_own(directory)
        if foreign:
            warnings.append(f"{directory}: {foreign}: skipped")
            continue
        path = directory / "report.json"
        stamp = _stamp(path)
        try:  # one checked before, unchanged since, passed the reader's bounds then
            doc = read_json(path, MAX_REPORT_BYTES, known=checked.get(directory.name) == stamp)
        except TooLarge as exc:
            warnings.append(f"{path}: {exc}: not a report omni-host wrote, skipped")
            continue
        except FileNotFoundError:
            warnings.append(f"{directory}: no report.json, skipped")
            continue
        except (OSError, ValueError) as exc:
            warnings.append(f"{path}: corrupt or truncated report, skipped ({exc})")
            continue
        version = doc.get("schema_version") if isinstance(doc, dict) else None
        if not isinstance(version, int) or version > REPORT_SCHEMA:
            warnings.append(f"{path}: report schema {version!r} is newer than this omni-host "
                            f"reads ({REPORT_SCHEMA}): skipped; upgrade omni-host to read it")
            continue
        audit = StoredAudit(str(doc.get("id") or directory.name), directory, doc)
        if checked.get(directory.name) != stamp:
            try:
                audit.report  # noqa: B018  the stored form, checked field by field, and kept
            except FormatError as exc:
                warnings.append(f"{path}: not a report omni-host wrote, skipped ({exc})")
                continue
            checked[directory.name] = stamp
        audits.append(audit)
    if checked != known:
        _keep_checked(root, checked)
    return History(audits, warnings)


def _checked_path(root: Path) -> Path:
    """Where this user's record of the store's checked reports lies: the user's cache (the
    store's layout stays one directory per audit)."""
    import hashlib

    # another omni-host may read the stored form otherwise: it checks the store again
    key = hashlib.sha256(f"{root.resolve()}\0{__version__}".encode()).hexdigest()[:16]
    return cache_home() / f"checked-{key}.json"


def _stamp(path: Path) -> list[int]:
    """What any change to a file moves: inode, size, mtime and ctime (which no user can set
    back), so a report edited since it was checked is checked again."""
    try:
        st = path.stat()
    except OSError:
        return []
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _checked(root: Path) -> dict[str, list[int]]:
    """The store's own record of checked reports (checking every stored report on every run
    cost a bench 10 ms a report); {} where it is missing, foreign or unreadable."""
    path = _checked_path(root)
    if not_own(path):
        return {}
    try:
        doc = read_json(path, 16 * 1024 * 1024)
    except (OSError, ValueError, TooLarge):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {k: v for k, v in doc.items() if isinstance(v, list)}


def _keep_checked(root: Path, checked: dict[str, list[int]]) -> None:
    path = _checked_path(root)
    with contextlib.suppress(OSError):  # costs the next run its time, never a result
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(path, json.dumps(checked), mode=0o600)


def _statuses(host: HostReport) -> dict[str, str]:
    return {r.id: r.effective_status.value for r in host.results}


def _facts(host: HostReport) -> dict[str, Any]:
    """The host's summary of facts in its stored form (the values a diff shows)."""
    return to_dict(host.facts) if host.facts is not None else {}


def diff_hosts(old: HostReport, new: HostReport,
               earlier: Sequence[HostReport] = ()) -> HostDiff:
    """What changed for one host between two audits, and only between them: a check that
    failed then and passes now is fixed (and resurrected, unless its verdict moved with the
    expected state); ``earlier`` (older host entries) is kept for callers and not read."""
    before, after = _statuses(old), _statuses(new)
    new_failures = sorted(c for c, s in after.items() if s in BAD and before.get(c) not in BAD)
    passes = sorted(c for c, s in after.items() if s == "pass" and before.get(c) in BAD)
    still = sorted(c for c, s in after.items() if s in BAD and before.get(c) in BAD)
    warned = sorted(c for c, s in after.items() if s == "warn" and before.get(c) not in
                    ("warn", *BAD))
    old_facts, new_facts = _facts(old), _facts(new)
    facts = {k: Change(old_facts.get(k), new_facts.get(k)) for k in COMPARED_FACTS
             if old_facts.get(k) != new_facts.get(k) and (k in old_facts or k in new_facts)}
    policy = policy_changes(old, new)
    moved_by_policy = moved_with(policy)
    moved = sorted(c for c, s in after.items() if c in before and before[c] != s
                   and c in moved_by_policy)
    # fixed on the host: a check that passes because its expected state moved is no fix (it
    # is among ``moved``: verdicts that moved with the expected state, not the host)
    fixed = [c for c in passes if c not in moved_by_policy]
    resurrected = fixed
    blocked_then = {e.engine for e in old.strategic if e.blocked}
    unblocked = sorted(e.engine for e in new.strategic
                       if e.status.value == "re-evaluate" and e.engine in blocked_then)
    return HostDiff(tuple(new_failures), tuple(fixed), tuple(still), policy, facts,
                    tuple(resurrected), tuple(unblocked), tokens_changes(old, new), tuple(moved),
                    tuple(warned), new.bench.changed if new.bench is not None else (),
                    series_words(new.bench),
                    f"{proved.status.value}: {proved.summary}"
                    if (proved := new.result(WHY)) is not None else None)


def series_words(bench: BenchOutcome | None) -> tuple[str, ...]:
    """What a bench read in its tests' history: each drift (a slide, a step down that stayed)
    and each step under the tolerance, in words."""
    out = []
    for name, v in (bench.verdicts if bench is not None else {}).items():
        if v.drift is not None:
            out.append(f"{name}: its runs since the baseline fell {v.drift:.0%} and stayed down")
        if v.step:
            out.append(f"{name}: a step, its last runs {v.step:.1%} below the runs before them")
    return tuple(out)


def moved_with(policy: dict[str, Change]) -> frozenset[str]:
    """The checks that read a variable of the expected state that changed."""
    readers = check_readers()
    return frozenset(c for var in policy for c in readers.get(var, ()))


def tokens_changes(old: HostReport, new: HostReport) -> dict[str, Change]:
    """Each test both entries measured (two benches), and each server whose served rate both
    read (``served by <server>``): its tokens/s then and now, where it moved (the same
    stored counters judged twice, a recheck, are no change)."""
    before: dict[str, float | None] = dict(old.bench.centers()) if old.bench else {}
    after: dict[str, float | None] = dict(new.bench.centers()) if new.bench else {}
    served = {f"served by {n}": rate(s["served_ts"]) for n, s in served_rates(new).items()}
    before |= {f"served by {n}": rate(s["served_ts"]) for n, s in served_rates(old).items()}
    after |= served
    tolerance = served_tolerance(new)
    return {name: Change(before[name], now) for name, now in after.items()
            if now is not None and (was := before.get(name)) is not None and now != was
            and not (name in served and abs(now / was - 1) < tolerance if was else False)}


def served_tolerance(host: HostReport) -> float:
    """How far a served rate may move between two audits and be no change: the generation
    tolerance of the host's bench (omni_bench.tolerance_pct, a number or by kind; 5%), the
    noise the bench itself is judged within (an idle server read 80.6 -> 80.6, "+0%")."""
    bench = (host.policy.values if host.policy else {}).get("omni_bench") or {}
    given = bench.get("tolerance_pct", 5) if isinstance(bench, dict) else 5
    pct = given.get("tg", 5) if isinstance(given, dict) else given
    return float(pct) / 100 if isinstance(pct, (int, float)) and pct > 0 else 0.05


def policy_changes(old: HostReport, new: HostReport) -> dict[str, Change]:
    """The expected-state values that differ between two audits of a host: a verdict that
    changed with them says the policy changed, not that the host drifted."""
    before = old.policy.values if old.policy else {}
    after = new.policy.values if new.policy else {}
    return {k: Change(before.get(k), after.get(k))
            for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}


HostEntries = Sequence[tuple[StoredAudit, HostReport]]  # History.for_host: newest first


def knob_ledger(entries: HostEntries) -> dict[str, tuple[str, str]]:
    """The host's ledger: per audit check, its knob's newest A/B stored (``bench --knob``), as
    (the stored bench's id, what it measured)."""
    from omni_host.plan.knobs import KNOBS

    found: dict[str, tuple[str, str]] = {}
    for audit, entry in entries:
        knob = entry.result(KNOB)
        if knob is None or knob.status not in (Status.PASS, Status.WARN):
            continue
        check = getattr(KNOBS.get(str(knob.details.get("knob"))), "check", None)
        if check and check not in found:
            found[check] = (audit.id, knob.summary)
    return found


def last_bench(entries: HostEntries) -> LastBench | None:
    """The host's newest stored bench and its tokens/s verdict, with what the newest
    ``bench --why`` since it proved."""
    why = None
    for audit, entry in entries:
        if audit.report.source is Source.BENCH:
            proved = entry.result(WHY)
            if proved is not None and why is None:
                why = f"{proved.status.value} ({audit.id}): {proved.summary}"
            perf = perf_result(entry)
            if perf is not None:
                bench = entry.bench
                of_baseline, of_ceiling = bench.figures() if bench else (None, None)
                return LastBench(audit.id, audit.started_at, perf.status, perf.summary,
                                 of_baseline, of_ceiling, bench.links if bench else (),
                                 target(audit.report), why)
    return None


def cold_case(entries: HostEntries, current: HostReport) -> ColdCase:
    """The Cold Case layer of a host's audit newer than everything in ``history``: only what
    changed state since the host's previous audit. A check that failed then and passes now
    (resolved), one that did not fail then and fails now (newly failing), an engine blocked
    then and viable now (resurrected), an engine viable or undecided then and blocked now
    (newly blocked). Empty when nothing changed; ``entries``: the host's stored audits."""
    if not entries:
        return ColdCase(previous=None)
    prev, old = entries[0]
    before, now = _statuses(old), _statuses(current)
    resolved = sorted(c for c, s in now.items() if s == "pass" and before.get(c) in BAD)
    failing = sorted(c for c, s in now.items() if s in BAD and c in before and before[c] not in BAD)
    engines_then = {e.engine: e.status.value for e in old.strategic}
    engines_now = {e.engine: e.status.value for e in current.strategic}
    resurrected = sorted(e for e, s in engines_now.items()
                         if s == "re-evaluate" and engines_then.get(e) in BLOCKED_ENGINE)
    newly_blocked = sorted(e for e, s in engines_now.items() if s in BLOCKED_ENGINE
                           and e in engines_then and engines_then[e] not in BLOCKED_ENGINE)
    moved = moved_with(policy_changes(old, current))

    def change(check: str, word: str) -> str:
        return "expected state changed" if check in moved else word

    items = ([ColdCaseItem(c, before[c], now[c], change(c, "resolved")) for c in resolved]
             + [ColdCaseItem(c, before[c], now[c], change(c, "newly failing")) for c in failing]
             + [ColdCaseItem(e, engines_then[e], engines_now[e], "resurrected") for e in resurrected]
             + [ColdCaseItem(e, engines_then[e], engines_now[e], "newly blocked")
                for e in newly_blocked])
    return ColdCase(prev.id, tuple(items))


def _when(ts: Any) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(float(ts or 0), dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def _entries(history: History, report: Report, host: HostReport) -> list[tuple[float, HostReport]]:
    """(started, host entry) of the host's stored audits older than ``report``, oldest first,
    then ``report``'s own: a stored audit's timeline ends with itself."""
    past = [(a.started_at, h) for a, h in reversed(history.for_host(host.host))
            if a.started_at < report.started_at]
    return [*past, (report.started_at, host)]


def timelines(history: History, report: Report) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """host -> check -> [(when, status)], oldest first, ending with ``report`` itself."""
    out: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for host in report.hosts:
        per_check: dict[str, list[tuple[str, str]]] = {}
        for started, entry in _entries(history, report, host):
            for check_id, status in _statuses(entry).items():
                per_check.setdefault(check_id, []).append((_when(started), status))
        out[host.host] = per_check
    return out


NO_BENCH = BenchOutcome({})  # an entry that holds no bench: no tests


def _mark(bench: BenchOutcome, name: str) -> str:
    """What a stored bench's point of one test is, for a plot."""
    verdict = bench.verdicts.get(name)
    if bench.recorded_baseline:
        return "baseline"
    if not bench.verdicts and bench.baseline:
        return "not comparable"
    if bench.disturbances:
        return "disturbed"
    if verdict is not None and verdict.status is Status.FAIL:
        return "failing"
    # a drift (a slide, a step down that stayed) or a step under the tolerance: the run where
    # the series is read as falling, marked where it is said (issue 67)
    return "drift" if verdict is not None and (verdict.drift is not None or verdict.step) \
        else "judged"


def tokens_series(history: History, report: Report) -> dict[str, list[Series]]:
    """host -> each bench test's tokens/s over its stored benches, oldest first, with the
    baseline and the band its newest verdict judged within, each point marked (baseline run,
    judged, not comparable, disturbed, failing); the served rate of each server the host runs
    now is drawn beside the generation test where it serves the benched model (compared with
    the bench), else in a plot of its own; a server gone is no plot."""
    out: dict[str, list[Series]] = {}
    for host in report.hosts:
        points: dict[str, list[Point]] = {}
        kinds: dict[str, str] = {}
        judged: dict[str, JudgedTest] = {}
        now = served_rates(host)
        served: dict[str, list[Point]] = {n: [] for n in now}
        benched = {n for n, s in now.items() if rate(s.get("fraction")) is not None}
        for at, entry in _entries(history, report, host):
            for name, test in (bench := entry.bench or NO_BENCH).tests.items():
                verdict = bench.verdicts.get(name)
                # the figure the verdict judged (the first of two runs, where that one decided
                # it): the point, its mark and the summary tell one story (issue 63)
                judged_ts = rate(verdict.measured_ts) if verdict else None
                points.setdefault(name, []).append(Point(
                    at, judged_ts or test.rate, _mark(bench, name),
                    verdict.status.value if verdict else ""))
                kinds[name] = test.kind
                if verdict is not None:
                    judged[name] = verdict
            for name, server in served_rates(entry).items():
                if name in served:
                    served[name].append(Point(at, float(server["served_ts"]), "judged"))
        series = []
        for name, line in points.items():
            verdict = judged.get(name)
            beside = tuple(Series(f"served by {n}", tuple(p)) for n, p in served.items()
                           if p and n in benched) if kinds.get(name) == "tg" else ()
            series.append(Series(name, tuple(line),
                                 baseline=verdict.reference_ts if verdict else None,
                                 band=rate(verdict.threshold) if verdict else None,
                                 beside=beside))
        drawn = {b.name for s in series for b in s.beside}  # the rest: a plot of their own
        series += [Series(f"served by {n}", tuple(p)) for n, p in served.items()
                   if p and f"served by {n}" not in drawn]
        if series:
            out[host.host] = series
    return out


def last_plan(entries: HostEntries) -> tuple[str, dict[str, Any], dict[str, Any] | None] | None:
    """The host's newest stored placement plan (``omni-host plan``): (its id, perf.placement's
    details, perf.placement-proof's details where it was proved)."""
    for audit, entry in entries:
        planned = entry.result(PLACEMENT)
        if planned is not None and planned.details.get("plan"):
            proof = entry.result(PROOF)
            return audit.id, planned.details, proof.details if proof is not None else None
    return None
