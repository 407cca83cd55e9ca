"""Report formats for people and machines beyond the terminal: a self-contained HTML Sentinel
report (layers, history timelines, no external asset), JUnit XML (for CI) and a Prometheus
textfile (for node_exporter's textfile collector). Pure: a typed report (+ history) -> text."""

from __future__ import annotations

import datetime as dt
from typing import Any
from xml.etree import ElementTree as ET

from omni_host.model import CheckResult, Status
from omni_host.report.plots import Bar, Point, Series, bars, svg
from omni_host.report.results import (
    STABILITY,
    details_of,
    perf_result,
    served_rates,
    why_effects,
)
from omni_host.report.text import (
    ENGINE_WORDS,
    GLYPHS,
    ORDER,
    check_ids,
    cold_case_lines,
    engine_why,
    expected_state_line,
    fix_steps,
    plain,
    reference_line,
    status_of,
    summary_line,
    target,
)
from omni_host.reports import HostReport, Report
from omni_host.safe_text import each_string, xml_safe

COLORS = {"pass": "#2e7d32", "fail": "#c62828", "warn": "#b35900", "skip": "#757575",
          "error": "#6a1b9a", "waived": "#1565c0"}
SEVERITIES = ("critical", "high", "medium", "low", "info")
ENGINE_COLORS = {"blocked": "fail", "blocked-upstream": "warn", "re-evaluate": "pass",
                 "unknown": "skip"}

Timelines = dict[str, dict[str, list[tuple[str, str]]]]  # host -> check -> [(when, status)]
Trends = dict[str, list[Series]]  # host -> tokens/s series (history.tokens_series)
# The HTML lists findings worst first, then passes before skips (a clean host's twenty skips
# came before its passes).
HTML_ORDER = ("fail", "error", "warn", "waived", "pass", "skip")


def _watch_series(host: HostReport) -> list[Series]:
    """A watch report's own samples, per server: its rate over each interval, and its resident
    and GPU memory at each sample."""
    out = []
    for part in details_of(host, STABILITY).get("servers") or []:
        name = str(part.get("server"))
        rates = tuple(Point(float(at), float(r)) for at, r, *_ in part.get("rates") or [])
        if rates:
            out.append(Series(f"{name} rate per interval", rates,
                              baseline=part.get("median_ts"), reference="median"))
        memory = part.get("memory") or []
        resident = tuple(Point(float(m[0]), float(m[1])) for m in memory if m[1] is not None)
        gpu = tuple(Point(float(m[0]), float(m[2])) for m in memory if m[2] is not None)
        if resident or gpu:
            first, *rest = [s for s in (Series(f"{name} resident", resident, unit="MiB"),
                                        Series(f"{name} GPU memory", gpu, unit="MiB"))
                            if s.points]
            out.append(Series(first.name, first.points, unit="MiB", beside=tuple(rest)))
    return out


def _why_bars(host: HostReport) -> list[str]:
    """A ``bench --why``'s drop split by factor, one plot a test (bench --why, issue 65)."""
    out = []
    for test, arms in why_effects(host).items():
        rows = tuple(Bar(arm.removesuffix(" back"), float(e.get("effect") or 0.0),
                         float(e.get("uncertainty") or 0.0), bool(e.get("measurable")))
                     for arm, e in arms.items())
        out.append(bars(f"{test}: each change since the baseline set back (bench --why)", rows))
    return out


def _bench_cell(host: HostReport) -> dict[str, str] | None:
    """The fleet matrix's tokens/s cell: the latest bench verdict, its generation test against
    the baseline and against the ceiling, where known."""
    perf = perf_result(host)
    if perf is not None:
        status = status_of(perf)
        figures = host.bench.figures() if host.bench else (None, None)
    elif host.last_bench:
        last = host.last_bench
        status, figures = last.status.value, (last.of_baseline, last.of_ceiling)
    else:
        return None
    words = [f"{figures[0]:.0%} of baseline" if figures[0] else "",
             f"{figures[1]:.0%} of ceiling" if figures[1] else ""]
    return {"status": status, "text": ", ".join(w for w in words if w) or status}


def _utc(ts: float | None) -> dt.datetime | None:
    """A stored time as a date, None where it is none a calendar has (1e300, -1e12, NaN in a
    hand-edited report: an OverflowError in the JUnit view)."""
    try:
        return dt.datetime.fromtimestamp(float(ts or 0), dt.timezone.utc)
    except (OverflowError, OSError, ValueError, TypeError):
        return None


def _when(ts: float | None) -> str:
    when = _utc(ts) if ts else None
    return when.strftime("%Y-%m-%d %H:%M UTC") if when else "?"


def _junit_time(ts: float | None) -> str:
    """ISO 8601 in UTC, in the form the JUnit (Ant) schema allows: no zone designator."""
    return (_utc(ts) or _utc(0)).strftime("%Y-%m-%dT%H:%M:%S")  # type: ignore[union-attr]


def _finding(r: CheckResult, layer: str, timeline: list[tuple[str, str]],
             fix: list[str]) -> dict[str, Any]:
    return {"id": r.id, "title": r.title, "status": status_of(r), "severity": r.severity.value,
            "layer": layer, "lessons": ", ".join(r.lessons), "summary": r.summary,
            "waiver": r.waiver, "fix": fix, "evidence": r.evidence, "timeline": timeline}


def _host_view(host: HostReport, inventory: str | None, layers: dict[str, str],
               timelines: Timelines, trends: Trends) -> dict[str, Any]:
    where = host.address or host.transport
    if not host.reachable:
        return {"name": host.host, "address": where, "reachable": False, "error": host.error}
    import markupsafe  # the plots are SVG drawn by plots.svg, every text in it escaped there

    timeline = timelines.get(host.host, {})
    results = sorted(host.results, key=lambda r: (
        HTML_ORDER.index(status_of(r)), SEVERITIES.index(r.severity.value), r.id))
    return {
        "name": host.host, "address": where,
        "reachable": True, "expected_state": plain(reference_line(host, inventory)
                                                        or expected_state_line(host, inventory)
                                                        or "") or None,
        "previous": host.cold_case.previous if host.cold_case else None,
        "status_by_check": {r.id: status_of(r) for r in host.results},
        "findings": [_finding(r, layers.get(r.id, "system"), timeline.get(r.id, []),
                              [plain(s) for s in fix_steps(r, inventory, host.host)])
                     for r in results],
        "engines": [{"engine": e.engine, "lessons": e.lessons,
                     "color": ENGINE_COLORS.get(e.status.value, "skip"),
                     "word": ENGINE_WORDS[e.status.value], "why": engine_why(e)}
                    for e in host.strategic],
        "cold_case": cold_case_lines(host),
        "plots": [markupsafe.Markup(svg(s)) for s in [*trends.get(host.host, []), *_watch_series(host)]]
        + [markupsafe.Markup(p) for p in _why_bars(host)],
        "bench": _bench_cell(host)}


def render_html(report: Report, layers: dict[str, str], timelines: Timelines,
                trends: Trends | None = None) -> str:
    """The Sentinel report (templates/report.html.j2, autoescaped): for a fleet, a matrix of
    hosts by checks first; then per host its findings, failures first, each expandable to its
    evidence, whole fix, waiver and history; the Strategic and Cold Case layers."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("omni_host.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    checks = check_ids(report)
    hosts = [_host_view(h, target(report), layers, timelines, trends or {})
             for h in report.hosts]
    return env.get_template("report.html.j2").render(
        when=_when(report.started_at), summary=summary_line(report),
        interrupted=report.interrupted, waiver_notes=report.waiver_notes, twins=report.twins,
        hosts=hosts, checks=checks, colors=COLORS, glyphs=GLYPHS, statuses=ORDER,
        severities=SEVERITIES)


def render_junit(report: Report) -> str:
    """One testsuite per host, one testcase per check: fail -> failure, error -> error,
    skip and waived -> skipped; an unreachable host is one errored testcase. Every string is
    made XML-safe first: a control character in a host name made the whole file invalid."""
    report = each_string(report, xml_safe)
    root = ET.Element("testsuites", name="omni-host")
    for host in report.hosts:
        suite = ET.SubElement(root, "testsuite", name=host.host,
                              timestamp=_junit_time(host.collected_at or report.started_at),
                              time=f"{host.duration_s:.3f}")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if not host.reachable:
            case = ET.SubElement(suite, "testcase", classname=host.host, name="reachability")
            ET.SubElement(case, "error", message=str(host.error), type="unreachable")
            counts.update(tests=1, errors=1)
        for r in host.results:
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=host.host, name=r.id, time="0")
            status = status_of(r)
            evidence = "\n".join(f"$ {ev.command}\n" + "\n".join(ev.lines) for ev in r.evidence)
            if status == Status.FAIL.value:
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=r.summary,
                              type=r.severity.value).text = evidence
            elif status == Status.ERROR.value:
                counts["errors"] += 1
                ET.SubElement(case, "error", message=r.summary, type="error").text = evidence
            elif status in ("skip", "waived"):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{status}: {r.summary}")
            elif status == Status.WARN.value:
                ET.SubElement(case, "system-out").text = f"warning: {r.summary}"
        for key, value in counts.items():
            suite.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


STATUS_CODES = {"pass": 0, "warn": 1, "fail": 2, "error": 3, "skip": -1, "waived": 4}


def render_prometheus(report: Report) -> str:
    """The text exposition format for node_exporter's textfile collector."""
    out = [
        "# HELP omni_host_reachable Whether the host could be audited (1) or not (0).",
        "# TYPE omni_host_reachable gauge",
    ]
    out += [f'omni_host_reachable{{host="{_label(h.host)}"}} {int(h.reachable)}'
            for h in report.hosts]
    out += ["# HELP omni_host_audit_timestamp_seconds When the host's audit started.",
            "# TYPE omni_host_audit_timestamp_seconds gauge"]
    out += [f'omni_host_audit_timestamp_seconds{{host="{_label(h.host)}"}} '
            f'{h.collected_at or report.started_at or 0}' for h in report.hosts]
    out += ["# HELP omni_host_check_status Verdict of a check: 0 pass, 1 warn, 2 fail, "
            "3 error, 4 waived, -1 skip.",
            "# TYPE omni_host_check_status gauge"]
    failing = []
    for h in report.hosts:
        for r in h.results:
            status = status_of(r)
            labels = (f'host="{_label(h.host)}",check="{_label(r.id)}",'
                      f'severity="{_label(r.severity.value)}"')
            out.append(f"omni_host_check_status{{{labels}}} {STATUS_CODES[status]}")
            failing.append(f"omni_host_check_failing{{{labels}}} "
                           f"{int(status in ('fail', 'error'))}")
    out += ["# HELP omni_host_check_failing 1 while a check fails or errors (not waived).",
            "# TYPE omni_host_check_failing gauge", *failing]
    return "\n".join(out + _tokens_gauges(report)) + "\n"


def _tokens_gauges(report: Report) -> list[str]:
    """A bench's tokens/s per test (as judged: the median after the warm-up repetition; the
    relative spread of all its repetitions) and,
    for generation, the fraction of the bandwidth ceiling reached."""
    rows: dict[str, list[str]] = {"tokens_per_second": [], "tokens_per_second_cv": [],
                                  "tokens_per_second_ceiling_ratio": [],
                                  "served_tokens_per_second": [], "served_fraction_of_bench": []}
    for h in report.hosts:
        if h.bench is None:
            continue
        for name, t in h.bench.tests.items():
            labels = f'host="{_label(h.host)}",test="{_label(name)}",kind="{_label(t.kind)}"'
            rows["tokens_per_second"].append(f"omni_host_tokens_per_second{{{labels}}} {t.rate}")
            rows["tokens_per_second_cv"].append(f"omni_host_tokens_per_second_cv{{{labels}}} {t.cv}")
            if (ceiling := h.bench.ceiling.get(name)) is not None:
                rows["tokens_per_second_ceiling_ratio"].append(
                    f"omni_host_tokens_per_second_ceiling_ratio{{{labels}}} {ceiling.fraction}")
    for h in report.hosts:
        for name, s in served_rates(h).items():
            labels = f'host="{_label(h.host)}",server="{_label(name)}"'
            rows["served_tokens_per_second"].append(
                f"omni_host_served_tokens_per_second{{{labels}}} {s['served_ts']}")
            if isinstance(s.get("fraction"), (int, float)):
                rows["served_fraction_of_bench"].append(
                    f"omni_host_served_fraction_of_bench{{{labels}}} {s['fraction']}")
    helps = {"tokens_per_second": "llama-bench tokens/s of a test (mean of its repetitions).",
             "served_tokens_per_second": "A running llama-server's generation tokens/s, from "
                                         "its own counters (serve.tokens-per-s).",
             "served_fraction_of_bench": "The served generation rate over the host's bench of "
                                         "the same model.",
             "tokens_per_second_cv": "Relative spread (stdev/mean) of the test's repetitions.",
             "tokens_per_second_ceiling_ratio": "Generation tokens/s over the memory-bandwidth "
                                                "ceiling of the weights read per token."}
    out = []
    for name, lines in rows.items():
        if lines:
            out += [f"# HELP omni_host_{name} {helps[name]}", f"# TYPE omni_host_{name} gauge", *lines]
    return out
