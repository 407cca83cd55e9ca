"""Report formats for people and machines beyond the terminal: a self-contained HTML Sentinel
report (layers, history timelines, no external asset), JUnit XML (for CI) and a Prometheus
textfile (for node_exporter's textfile collector). Pure: report dict (+ history) -> text."""

from __future__ import annotations

import datetime as dt
import html
from typing import Any
from xml.etree import ElementTree as ET

from omni_host.report.text import cold_case_lines, fix_text, status_of, summary_line

COLORS = {"pass": "#2e7d32", "fail": "#c62828", "warn": "#ef6c00", "skip": "#9e9e9e",
          "error": "#6a1b9a", "waived": "#1565c0"}
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.6em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
h3{margin:1.2em 0 .4em}table{border-collapse:collapse;width:100%}
td,th{border:1px solid #ddd;padding:.35em .5em;vertical-align:top;text-align:left}
th{background:#f5f5f5}.badge{color:#fff;border-radius:3px;padding:0 .4em;font-weight:600;
font-size:.85em;text-transform:uppercase;white-space:nowrap}.tl{white-space:nowrap}
.tl span{display:inline-block;width:14px;height:14px;margin-right:2px;border-radius:2px}
.muted{color:#777}.small{font-size:.85em}code{background:#f3f3f3;padding:0 .2em}
"""

Timelines = dict[str, dict[str, list[tuple[str, str]]]]  # host -> check -> [(when, status)]


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _when(ts: float | None) -> str:
    if not ts:
        return "?"
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _badge(status: str, label: str | None = None) -> str:
    return (f'<span class="badge" style="background:{COLORS.get(status, "#555")}">'
            f"{_e(label or status)}</span>")


def _timeline(points: list[tuple[str, str]]) -> str:
    cells = "".join(f'<span title="{_e(when)}: {_e(st)}" style="background:'
                    f'{COLORS.get(st, "#555")}"></span>' for when, st in points)
    return f'<div class="tl" aria-label="history">{cells}</div>'


def _layer_table(results: list[dict[str, Any]], timeline: dict[str, list[tuple[str, str]]]) -> str:
    rows = []
    for r in results:
        fix = fix_text(r)
        waiver = r.get("waiver")
        note = (f'<div class="small">waived by {_e(waiver["approver"])} until '
                f'{_e(waiver["expires"])}: {_e(waiver["justification"])}</div>') if waiver else ""
        rows.append(
            f"<tr><td>{_badge(status_of(r))}</td><td><code>{_e(r['id'])}</code><div class=\"small "
            f"muted\">{_e(r['title'])}</div></td><td>{_e(r['severity'])}</td>"
            f"<td>{_e(', '.join(r['lessons']))}</td><td>{_e(r['summary'])}{note}"
            + (f'<div class="small">Fix: {_e(fix)}</div>' if fix else "")
            + f"</td><td>{_timeline(timeline.get(r['id'], []))}</td></tr>")
    head = ("<tr><th>Status</th><th>Check</th><th>Severity</th><th>Lessons</th>"
            "<th>Finding</th><th>History</th></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


ENGINE_COLORS = {"blocked": "fail", "blocked-upstream": "warn", "re-evaluate": "pass",
                 "unknown": "skip"}


def _engine_row(e: dict[str, Any]) -> str:
    reasons = "<br>".join(_e(x) for x in e["reasons"])
    badge = _badge(ENGINE_COLORS.get(e["status"], "skip"), e["status"])
    return (f"<tr><td>{_e(e['engine'])}</td><td>{badge}</td>"
            f"<td>{_e(', '.join(e['lessons']))}</td><td>{reasons}</td></tr>")


def render_html(doc: dict[str, Any], layers: dict[str, str], timelines: Timelines) -> str:
    """The Sentinel report: per host, System, Software, Strategic and Cold Case layers, each
    check with its timeline across the stored audits (oldest first, this audit last)."""
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>omni-host Sentinel audit</title><style>{_CSS}</style></head><body>",
             f"<h1>omni-host Sentinel audit</h1><p>{_e(_when(doc.get('started_at')))} &middot; "
             f"{_e(summary_line(doc))}</p>"]
    for note in doc.get("waiver_notes") or []:
        parts.append(f'<p class="small" style="color:#ef6c00">Waiver: {_e(note)}</p>')
    for host in doc["hosts"]:
        parts.append(f"<h2>{_e(host['host'])} <span class=\"muted small\">"
                     f"{_e(host.get('address') or host['transport'])}</span></h2>")
        if not host["reachable"]:
            parts.append(f"<p>{_badge('error')} unreachable: {_e(host['error'])}</p>")
            continue
        timeline = timelines.get(host["host"], {})
        for layer, title in (("system", "System"), ("software", "Software")):
            results = [r for r in host["results"] if layers.get(r["id"], "system") == layer]
            if results:
                parts.append(f"<h3>{title}</h3>{_layer_table(results, timeline)}")
        engines = host.get("strategic") or []
        if engines:
            rows = "".join(_engine_row(e) for e in engines)
            parts.append("<h3>Strategic</h3><table><tr><th>Engine</th><th>Status</th>"
                         f"<th>Lessons</th><th>Why</th></tr>{rows}</table>")
        cold = cold_case_lines(host)
        parts.append("<h3>Cold Case</h3>" + ("<ul>" + "".join(f"<li>{_e(c)}</li>" for c in cold)
                                             + "</ul>" if cold else
                                             '<p class="muted">no earlier audit of this host</p>'))
    parts.append("</body></html>\n")
    return "".join(parts)


def render_junit(doc: dict[str, Any]) -> str:
    """One testsuite per host, one testcase per check: fail -> failure, error -> error,
    skip and waived -> skipped; an unreachable host is one errored testcase."""
    root = ET.Element("testsuites", name="omni-host")
    for host in doc["hosts"]:
        suite = ET.SubElement(root, "testsuite", name=host["host"],
                              timestamp=_when(host.get("collected_at") or doc.get("started_at")),
                              time=f"{host.get('duration_s', 0):.3f}")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if not host["reachable"]:
            case = ET.SubElement(suite, "testcase", classname=host["host"], name="reachability")
            ET.SubElement(case, "error", message=str(host["error"]), type="unreachable")
            counts.update(tests=1, errors=1)
        for r in host["results"]:
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=host["host"], name=r["id"], time="0")
            status = status_of(r)
            evidence = "\n".join(f"$ {ev['command']}\n" + "\n".join(ev["lines"])
                                 for ev in r["evidence"])
            if status == "fail":
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=r["summary"], type=r["severity"]).text = evidence
            elif status == "error":
                counts["errors"] += 1
                ET.SubElement(case, "error", message=r["summary"], type="error").text = evidence
            elif status in ("skip", "waived"):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{status}: {r['summary']}")
            elif status == "warn":
                ET.SubElement(case, "system-out").text = f"warning: {r['summary']}"
        for key, value in counts.items():
            suite.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


STATUS_CODES = {"pass": 0, "warn": 1, "fail": 2, "error": 3, "skip": -1, "waived": 4}


def render_prometheus(doc: dict[str, Any]) -> str:
    """The text exposition format for node_exporter's textfile collector."""
    out = [
        "# HELP omni_host_reachable Whether the host could be audited (1) or not (0).",
        "# TYPE omni_host_reachable gauge",
    ]
    out += [f'omni_host_reachable{{host="{_label(h["host"])}"}} {int(h["reachable"])}'
            for h in doc["hosts"]]
    out += ["# HELP omni_host_audit_timestamp_seconds When the host's audit started.",
            "# TYPE omni_host_audit_timestamp_seconds gauge"]
    out += [f'omni_host_audit_timestamp_seconds{{host="{_label(h["host"])}"}} '
            f'{h.get("collected_at") or doc.get("started_at") or 0}' for h in doc["hosts"]]
    out += ["# HELP omni_host_check_status Verdict of a check: 0 pass, 1 warn, 2 fail, "
            "3 error, 4 waived, -1 skip.",
            "# TYPE omni_host_check_status gauge"]
    failing = []
    for h in doc["hosts"]:
        for r in h["results"]:
            status = status_of(r)
            labels = (f'host="{_label(h["host"])}",check="{_label(r["id"])}",'
                      f'severity="{_label(r["severity"])}"')
            out.append(f"omni_host_check_status{{{labels}}} {STATUS_CODES[status]}")
            failing.append(f"omni_host_check_failing{{{labels}}} "
                           f"{int(status in ('fail', 'error'))}")
    out += ["# HELP omni_host_check_failing 1 while a check fails or errors (not waived).",
            "# TYPE omni_host_check_failing gauge", *failing]
    return "\n".join(out) + "\n"
