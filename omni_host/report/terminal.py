"""The terminal view: what an operator reads at 80 columns.

For a fleet, a matrix first (hosts x checks, one glyph each, so it reads without colour).
Then per host: failures, errors and warnings first, each with the summary, the evidence that
decided it, its lesson and the whole fix; passes, waivers and skips as one counted line each;
the Strategic layer as the engines blocked here; the Cold Case as what changed. ``verbosity``
-1 (``--quiet``) keeps only failures and the summary line; 1 (``-v``) expands everything.

Pure: a typed report in, styled lines out (``Line``: segments of text and a rich style);
the lines are wrapped here, so the printer never wraps them again.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from typing import TYPE_CHECKING, Any

from omni_host.invocation import command_lines
from omni_host.model import BLOCKED_ENGINE, CheckResult
from omni_host.report.results import KNOB, SERVED, perf_result, served_rates
from omni_host.report.text import (
    ENGINE_WORDS,
    GLYPHS,
    ORDER,
    STYLES,
    check_ids,
    engine_why,
    expected_state_line,
    fix_steps,
    init_command,
    last_bench_line,
    recordable,
    reference_line,
    status_of,
    summary_line,
    target,
    unobserved,
    waiver_line,
)
from omni_host.reports import HostReport, Report
from omni_host.safe_text import each_string, terminal_safe

if TYPE_CHECKING:  # rich is imported only to print
    from rich.console import Console

Line = tuple[tuple[str, str], ...]  # (text, rich style) segments
FINDINGS = ("fail", "error", "warn")
QUIET = ("fail", "error")
LABEL = 12  # "  evidence  " : where a finding's labelled text starts
SKIP_KINDS = ("not evaluated", "not applicable", "no expected state")


def _line(*segments: tuple[str, str]) -> Line:
    return tuple(segments)


def _plain(text: str, style: str = "") -> Line:
    return ((text, style),)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """``text`` wrapped at ``width``; a command in it (``report.text.command``: between
    backticks) starts a line of its own and is broken only between its shell words, with
    `` \\`` (a quoted string wrapped inside its quotes pasted as two commands)."""
    parts = text.split("`") if text.count("`") % 2 == 0 else [text]
    lines = _prose(parts[0].rstrip(), width, first, rest) if parts[0].strip() else []
    for i in range(1, len(parts), 2):
        lead = first if not lines else rest
        lines += command_lines(parts[i], width, lead, rest + "  ")
        after = parts[i + 1].strip()
        if after:
            lines += _prose(after, width, rest, rest)
    return lines or [first.rstrip()]


def _prose(text: str, width: int, first: str, rest: str) -> list[str]:
    # a word longer than the line (a path) overflows rather than breaks
    return textwrap.wrap(text, width=width, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False, break_long_words=False) or [first.rstrip()]


class _Page:
    """The lines of the view, each already fitted to the width."""

    def __init__(self, width: int, verbosity: int) -> None:
        self.width = max(width, 40)
        self.verbose = verbosity > 0
        self.lines: list[Line] = []

    def add(self, line: Line) -> None:
        self.lines.append(line)

    def text(self, text: str, style: str = "", first: str = "", rest: str = "") -> None:
        for i, piece in enumerate(_wrap(text, self.width, first, rest or " " * len(first))):
            self.add(_plain(piece, style) if i or not first else
                     _line((first, ""), (piece[len(first):], style)))

    def packed(self, items: list[str], style: str = "") -> None:
        """Items two spaces apart, a line broken only between items."""
        line = ""
        for item in items:
            if line and len(line) + 2 + len(item) > self.width:
                self.add(_plain(line, style))
                line = ""
            line = f"{line}  {item}" if line else item
        if line:
            self.add(_plain(line, style))

    def one(self, text: str, style: str = "", hint: str = "") -> None:
        """One line, cut to the width unless verbose (then wrapped); ``hint`` (how to see
        more) is never cut."""
        if self.verbose:
            self.text(text + hint, style, rest="    ")
        else:
            self.add(_plain(_fit(text, self.width - len(hint)) + hint, style))

    def labelled(self, label: str, lines: list[str], style: str = "") -> None:
        pad = " " * LABEL
        for i, text in enumerate(lines):
            head = f"  {label:<{LABEL - 2}}" if i == 0 else pad
            hang = pad + (" " * (text.index(" ") + 1) if re.match(r"^\d+\. ", text) else "")
            for j, piece in enumerate(_wrap(text, self.width - LABEL, "", "")):
                lead = head if j == 0 else hang
                self.add(_line((lead, "dim" if j == 0 and i == 0 else ""), (piece, style)))


# -- the fleet matrix ------------------------------------------------------------------------

def _matrix(report: Report, page: _Page) -> None:
    every = check_ids(report)
    legend = "  ".join(f"{GLYPHS[s]} {s}" for s in ORDER)
    page.text(f"Fleet: {len(report.hosts)} hosts x {len(every)} checks   {legend}", "bold")
    # a column of skips on every host says nothing a line cannot: the matrix keeps its width
    judged = {r.id for h in report.hosts if h.reachable for r in h.results
              if status_of(r) != "skip"}
    checks = [c for c in every if c in judged] or every
    name_w = max(8, min(max(len(h.host) for h in report.hosts), page.width - 3 * len(checks)))
    page.add(_plain(" " * name_w + "".join(f"{i:>3}" for i in range(1, len(checks) + 1)), "dim"))
    for host in report.hosts:
        name = _fit(host.host, name_w).ljust(name_w)
        if not host.reachable:
            gone = _fit(f"  UNREACHABLE: {host.error}", page.width - name_w)
            page.add(_line((name, "bold"), (gone, "bold red")))
            continue
        status = {r.id: status_of(r) for r in host.results}
        cells = [("  " + GLYPHS[status[c]] if c in status else "   ", STYLES.get(status.get(c, ""), ""))
                 for c in checks]
        page.add(_line((name, "bold"), *cells))
    page.packed([f"{i} {c}" for i, c in enumerate(checks, 1)], "dim")
    skipped = [c for c in every if c not in checks]
    if skipped:
        page.packed([f"skipped on every host ({len(skipped)}):", *skipped], "dim")


# -- one host --------------------------------------------------------------------------------

def _counts(host: HostReport) -> str:
    counts = host.counts()
    return ", ".join(f"{counts[s]} {s}" for s in ORDER if counts.get(s))


def _evidence(result: CheckResult, verbose: bool) -> list[str]:
    """The evidence that decided it: the first probe's command and lines (every probe and
    every line with -v)."""
    out: list[str] = []
    shown = result.evidence if verbose else result.evidence[:1]
    for ev in shown:
        lines = ev.lines if verbose else ev.lines[:2]
        out += [f"$ {ev.command}", *lines]
        if len(lines) < len(ev.lines):
            out.append(f"(+{len(ev.lines) - len(lines)} more lines: -v)")
    if len(shown) < len(result.evidence):
        out.append(f"(+{len(result.evidence) - len(shown)} more probes: -v)")
    return out


def _one_liner(page: _Page, r: CheckResult, hosts: str = "") -> bool:
    """An info-severity warning is one line (all of it with -v); True when it was."""
    if page.verbose or r.severity.value != "info" or status_of(r) != "warn":
        return False
    label = f"{'WARN':<6}{r.id}  "
    page.add(_line((label[:6], STYLES["warn"]), (label[6:], "bold"),
                   (_fit(f"{hosts}{r.summary}", page.width - len(label)), "")))
    return True


def _finding(page: _Page, r: CheckResult, host: HostReport, inventory: str | None,
             rationale: dict[str, str]) -> None:
    if not _one_liner(page, r):
        _whole(page, r, [host.host], inventory, rationale)


def _whole(page: _Page, r: CheckResult, hosts: list[str], inventory: str | None,
           rationale: dict[str, str], summaries: list[str] | None = None,
           evidence_note: str = "", hit: str = "") -> None:
    """A finding in full: its head, summary (or each host's), evidence, lesson, waiver, fix
    (one command for every host it hit)."""
    status = status_of(r)
    head = " \u00b7 ".join([r.severity.value, *([" ".join(r.lessons)] if r.lessons else [])])
    page.add(_line((f"{status.upper():<6}", STYLES[status]), (r.id, "bold"),
                   (_fit(f"  {head}", page.width - 6 - len(r.id)), "dim")))
    if hit:
        page.labelled("hosts", [hit], "bold")
    for summary in summaries or [r.summary]:
        page.text(summary, first="  ", rest="    " if summaries else "  ")
    if r.evidence:
        page.labelled("evidence", _evidence(r, page.verbose) + ([evidence_note] if evidence_note
                                                                else []), "dim")
    if r.id in rationale:
        page.labelled("lesson", [" ".join(rationale[r.id].split())])
    if r.waiver:
        page.labelled("waived", [waiver_line(r.waiver)], STYLES["waived"])
    steps = fix_steps(r, inventory, ":".join(hosts))
    if steps:
        numbered = steps if len(steps) == 1 else [f"{i}. {s}" for i, s in enumerate(steps, 1)]
        page.labelled("fix", numbered, "cyan")


def _skip_kind(r: CheckResult) -> str:
    if r.details.get("no_expected_state"):
        return "no expected state"
    return next((k for k in SKIP_KINDS if r.summary.startswith(k)), "nothing to check")


def _collapsed(page: _Page, host: HostReport, inventory: str | None) -> None:
    """Passes, waivers and skips: one counted line each (one line per check with -v)."""
    by_status: dict[str, list[CheckResult]] = {}
    for r in host.results:
        by_status.setdefault(status_of(r), []).append(r)
    for status in ("waived", "pass", "skip"):
        results = by_status.get(status) or []
        if not results:
            continue
        label = f"{status.upper():<6}{len(results):>3}  "
        if page.verbose:
            page.add(_plain(label.rstrip(), STYLES[status]))
            for r in results:
                why = f"waived {waiver_line(r.waiver)}" if r.waiver else r.summary
                page.text(f"{r.id}: {why}", first="  ", rest="      ")
            continue
        if status == "skip":  # the counts may be cut, never the hint that says how to see them
            kinds = Counter(_skip_kind(r) for r in results)
            hint = " (-v lists them)"
            body = _fit(", ".join(f"{n} {k}" for k, n in kinds.most_common()),
                        page.width - len(label) - len(hint)) + hint
        elif status == "waived":
            body = ", ".join(f"{r.id} (waived by {r.waiver.approver} until "
                             f"{r.waiver.expires})" for r in results if r.waiver)
        else:
            body = ", ".join(r.id for r in results)
        page.add(_line((label, STYLES[status]), (_fit(body, page.width - len(label)), "")))
    unset = expected_state_line(host, inventory)
    if unset and (page.verbose or host.unconfigured):
        page.text(unset, "bold yellow" if host.unconfigured else "yellow")
    elif unset and recordable(host) and not host.reference:  # wrapped, never cut
        page.text(f"record it: {init_command(host.host, inventory)}", "yellow",
                  first=" " * 11, rest=" " * 13)
    missing = unobserved(host)
    if missing and page.verbose:
        page.text("Not observed: " + "; ".join(missing), "dim")


def _strategic(page: _Page, host: HostReport) -> None:
    engines = host.strategic
    if not engines:
        return
    by = Counter(e.status.value for e in engines)
    blocked = sum(by[s] for s in BLOCKED_ENGINE)
    page.add(_line(("Strategic: ", "bold"), (f"{blocked} blocked here, {by['re-evaluate']} "
                                           f"viable, {by['unknown']} unknown", "")))
    width = max(len(e.engine) for e in engines) + 2
    for e in engines:
        if page.verbose or e.blocked:
            row = f"  {e.engine:<{width}}{ENGINE_WORDS[e.status.value]}: {'; '.join(engine_why(e))}"
            page.one(row, "" if e.status.value != "blocked" else "red")
    if not page.verbose:
        for status in ("re-evaluate", "unknown"):
            names = [e.engine for e in engines if e.status.value == status]
            if names:
                page.one(f"  {ENGINE_WORDS[status]}: {', '.join(names)}", "dim",
                         hint=" (-v: why)" if status == "unknown" else "")


def _cold_case(page: _Page, host: HostReport) -> None:
    cold = host.cold_case
    if cold is None:
        return
    if not cold.previous:
        if page.verbose:
            page.add(_line(("Cold case: ", "bold"), ("first audit of this host", "dim")))
        return
    items = cold.items
    since = f"since audit {cold.previous}"
    if not items:  # the store is this user's, every clone's: the audit may be one this
        # checkout never ran (issue 62), and the line says whose it is
        page.add(_line(("Cold case: ", "bold"),
                       (f"nothing changed {since} (this user's report store)", "dim")))
        return
    page.add(_line(("Cold case: ", "bold"), (since, "dim")))
    width = max(len(i.item) for i in items) + 2
    for i in items:
        page.one(f"  {i.item:<{width}}{i.change or 'changed'}: {i.was} -> {i.now}",
                 "red" if i.change.startswith("newly") else "green")


# -- a fleet in one screen --------------------------------------------------------------------

def _hits(names: list[str], total: int) -> str:
    """The hosts a finding hit, out of the fleet's reachable hosts."""
    if len(names) == total > 1:
        return f"all {total} hosts"
    return ", ".join(names) + (f" ({len(names)} of {total})" if total > 1 else "")


def _shared_findings(page: _Page, report: Report, rationale: dict[str, str],
                     quiet: bool) -> None:
    """Each finding once, with the hosts it hit: the first host's evidence (every host's is in
    the per-host view of -v), each distinct summary with its hosts, one fix for all of them."""
    reachable = [h for h in report.hosts if h.reachable]
    groups: dict[tuple[str, str, tuple[str, ...]], list[tuple[str, CheckResult]]] = {}
    for host in reachable:
        for r in host.results:
            status = status_of(r)
            if status in (QUIET if quiet else FINDINGS):
                steps = r.remediation.steps if r.remediation else ()
                groups.setdefault((r.id, status, steps), []).append((host.host, r))
    for key in sorted(groups, key=lambda k: (ORDER.index(k[1]),
                                             groups[k][0][1].severity.value != "critical", k[0])):
        hits = groups[key]
        names = [name for name, _ in hits]
        first = hits[0][1]
        if _one_liner(page, first, f"{_hits(names, len(reachable))}: "):
            continue
        by_summary: dict[str, list[str]] = {}
        for name, r in hits:
            by_summary.setdefault(r.summary, []).append(name)
        summaries = [f"{', '.join(n)}: {s}" for s, n in by_summary.items()] \
            if len(by_summary) > 1 else None
        note = f"(on {names[0]}; each host's: -v)" if len(hits) > 1 and first.evidence else ""
        _whole(page, first, names, target(report), rationale, summaries, note,
               hit=_hits(names, len(reachable)))


def _alike(page: _Page, report: Report, render: Any) -> None:
    """A section that reads the same on several hosts (their engines, what changed) prints
    once, its first line naming the hosts."""
    reachable = [h for h in report.hosts if h.reachable]
    by_lines: dict[tuple[Line, ...], list[str]] = {}
    for host in reachable:
        sub = _Page(page.width, 0)
        render(sub, host)
        if sub.lines:
            by_lines.setdefault(tuple(sub.lines), []).append(host.host)
    for lines, names in by_lines.items():
        used = sum(len(text) for text, _ in lines[0])
        who = _fit(f"  {_hits(names, len(reachable))}", page.width - used)
        page.add(lines[0] + ((who, "dim"),) if page.width - used > 4 else lines[0])
        for line in lines[1:]:
            page.add(line)


def _unreachable(page: _Page, host: HostReport) -> bool:
    """An unreachable host's one line; True when it was."""
    if host.reachable:
        return False
    page.text(f"{host.host} ({host.address or host.transport}): UNREACHABLE: {host.error}",
              "bold red", rest="  ")
    return True


def _fleet_host(page: _Page, host: HostReport, report: Report) -> None:
    """What is a fleet host's own (its findings are above, its verdicts in the matrix): why
    it is unreachable, its tokens/s, that it has no expected state at all."""
    if _unreachable(page, host):
        return
    perf = perf_result(host)
    if perf is None and not host.last_bench and not host.unconfigured:
        return  # its row of the matrix says it all
    page.add(_line((f"{host.host} ({host.address or host.transport})", "bold"),
                   (f"  {_counts(host)}", "")))
    if perf is not None:
        page.text(f"  Tokens/s: {perf.summary}", STYLES[status_of(perf)], rest="    ")
    if host.last_bench:
        page.text("  " + last_bench_line(host.last_bench, report.started_at, target(report),
                                         host.host), "dim", rest="    ")
    if host.unconfigured:
        page.text("  " + (expected_state_line(host, target(report)) or ""), "bold yellow",
                  rest="    ")


def _unrecorded(page: _Page, report: Report) -> None:
    """One line for the hosts whose missing expected state ``init`` would record."""
    names = [h.host for h in report.hosts if h.reachable and not h.unconfigured
             and recordable(h)]
    if names:
        page.text(f"No expected state recorded for some checks of {', '.join(names)} (-v: "
                  f"which); record it with: {init_command('HOST', target(report))}",
                  "yellow", rest="  ")


def _fleet(page: _Page, report: Report, rationale: dict[str, str], quiet: bool) -> None:
    if not quiet:
        _matrix(report, page)
        page.add(_plain(""))
    _shared_findings(page, report, rationale, quiet)
    if quiet:
        for host in report.hosts:
            if not host.reachable:
                _fleet_host(page, host, report)
        return
    page.add(_plain(""))
    for host in report.hosts:
        _fleet_host(page, host, report)
    _unrecorded(page, report)
    _alike(page, report, _strategic)
    _alike(page, report, _cold_case)


def _host(page: _Page, host: HostReport, report: Report, rationale: dict[str, str],
          quiet: bool) -> None:
    if _unreachable(page, host):
        return
    shown = [r for r in host.results if status_of(r) in (QUIET if quiet else FINDINGS)]
    if quiet and not shown:
        return
    where = target(report)
    page.add(_line((f"{host.host} ({host.address or host.transport})", "bold"),
                   (f"  {_counts(host)}", "")))
    reference = reference_line(host, where)
    if reference and not quiet:  # a command in it: wrapped, never cut
        page.text(reference, "bold yellow", rest="  ")
    shown.sort(key=lambda r: (ORDER.index(status_of(r)), r.severity.value != "critical", r.id))
    for r in shown:
        _finding(page, r, host, where, rationale)
    perf = perf_result(host)
    if perf is not None and perf not in shown:  # a bench's number is never folded away
        page.text(f"Tokens/s: {perf.summary}", STYLES[status_of(perf)], rest="  ")
    knob = host.result(KNOB)
    if knob is not None and knob not in shown:  # an A/B's figure, never folded away either
        page.text(f"Knob A/B: {knob.summary}", STYLES[status_of(knob)], rest="  ")
    served = host.result(SERVED)
    if served is not None and served not in shown and served_rates(host):  # nor a served one
        page.text(f"Served: {served.summary}", STYLES[status_of(served)], rest="  ")
    if host.last_bench:
        page.text(last_bench_line(host.last_bench, report.started_at, where, host.host), "dim",
                  rest="  ")
    if quiet:
        return
    _collapsed(page, host, where)
    _strategic(page, host)
    _cold_case(page, host)


def terminal_lines(report: Report, width: int = 80, verbosity: int = 0,
                   rationale: dict[str, str] | None = None) -> list[Line]:
    """The whole view. ``rationale``: check id -> its lesson (the catalog's rationale). Every
    string of the report is made terminal-safe first: host names and host output are untrusted."""
    report = each_string(report, terminal_safe)
    page = _Page(width, verbosity)
    quiet = verbosity < 0
    if len(report.hosts) > 1 and not page.verbose:
        _fleet(page, report, rationale or {}, quiet)
    else:
        if len(report.hosts) > 1:
            _matrix(report, page)
        for host in report.hosts:
            if page.lines and not quiet:
                page.add(_plain(""))
            _host(page, host, report, rationale or {}, quiet)
    for note in report.twins:
        page.text(f"Twins: {note}", "yellow", rest="  ")
    for note in report.waiver_notes:
        page.text(f"Waiver: {note}", "yellow", rest="  ")
    page.text(summary_line(report), "bold")
    return page.lines


def show(lines: list[Line], console: Console) -> None:
    """Print the lines as they are: fitted already, never wrapped again."""
    from rich.text import Text

    for line in lines:
        console.print(Text.assemble(*line), soft_wrap=True, highlight=False)
