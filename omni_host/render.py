"""Renderers: views of a report, written to an injected console or stream. They count
nothing that decides an exit code and set no global state."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TextIO

from omni_host.model import CheckResult, Status
from omni_host.report import HostReport, Report

if TYPE_CHECKING:  # rich is imported only by the table view: JSON and Markdown start faster
    from rich.console import Console
    from rich.table import Table

STYLES = {Status.PASS: "green", Status.FAIL: "bold red", Status.WARN: "yellow",
          Status.SKIP: "dim", Status.ERROR: "magenta"}


def fix_text(result: CheckResult) -> str:
    fix = result.remediation
    if fix is None:
        return ""
    if fix.kind == "playbook":
        return f"playbook {fix.playbook}"
    return fix.steps[0] if fix.steps else "manual"


def unobserved(host: HostReport) -> list[str]:
    """Probes that yielded nothing, except fallbacks that were not needed."""
    return [f"{pid} ({p['reason']})" for pid, p in host.probes.items()
            if p["outcome"] != "observed" and not p["reason"].startswith("not needed")]


def render_json(report: Report, out: TextIO) -> None:
    json.dump(report.to_dict(), out, indent=2)
    out.write("\n")


def _host_table(host: HostReport) -> Table:
    """Three columns so that it reads on an 80-column terminal: the check (id, severity,
    lessons), and the finding with its fix underneath."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{host.host} ({host.address or host.transport})", title_justify="left",
                  expand=True, show_lines=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Check", min_width=25)
    table.add_column("Finding and fix", ratio=3)
    for r in host.results:
        check = Text(r.id, style="bold")
        check.append(f"\n{r.severity.value} {' '.join(r.lessons)}", style="dim")
        finding = Text(r.summary)
        fix = fix_text(r)
        if fix:
            finding.append(f"\nFix: {fix}", style="cyan")
        table.add_row(Text(r.status.value.upper(), style=STYLES[r.status]), check, finding)
    return table


def render_table(report: Report, console: Console) -> None:
    from rich.text import Text

    for host in report.hosts:
        if not host.reachable:
            console.print(Text(f"{host.host} ({host.address}): UNREACHABLE: {host.error}",
                               style="bold red"))
            continue
        console.print(_host_table(host))
        missing = unobserved(host)
        if missing:
            console.print(Text("Not observed: " + "; ".join(missing), style="dim"))
    s = report.summary()
    console.print(f"{s['hosts']} host(s), {s['unreachable']} unreachable: {s['pass']} pass, "
                  f"{s['fail']} fail, {s['warn']} warn, {s['skip']} skip, {s['error']} error")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report, out: TextIO) -> None:
    s = report.summary()
    out.write("# omni-host audit\n\n")
    out.write(f"{s['hosts']} host(s), {s['unreachable']} unreachable: {s['pass']} pass, "
              f"{s['fail']} fail, {s['warn']} warn, {s['skip']} skip, {s['error']} error\n")
    for host in report.hosts:
        out.write(f"\n## {host.host} ({host.address or host.transport})\n\n")
        if not host.reachable:
            out.write(f"**Unreachable:** {_md(host.error or '')}\n")
            continue
        missing = unobserved(host)
        if missing:
            out.write("Not observed: " + _md("; ".join(missing)) + "\n\n")
        out.write("| Status | Check | Severity | Lessons | Summary | Fix |\n")
        out.write("|---|---|---|---|---|---|\n")
        for r in host.results:
            out.write(f"| {r.status.value} | `{r.id}` | {r.severity.value} | "
                      f"{', '.join(r.lessons)} | {_md(r.summary)} | {_md(fix_text(r))} |\n")
        failing = [r for r in host.results if r.status in (Status.FAIL, Status.WARN, Status.ERROR)]
        for r in failing:
            out.write(f"\n### {r.status.value}: {r.id}: {r.title}\n\n{_md(r.summary)}\n")
            for ev in r.evidence:
                out.write(f"\nEvidence (`{ev.command}`):\n\n```\n")
                out.write("\n".join(ev.lines) + "\n```\n")
            if r.remediation and r.remediation.steps:
                out.write("\nFix:\n\n" + "".join(f"1. {_md(step)}\n" for step in r.remediation.steps))
