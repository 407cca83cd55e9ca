"""Terminal, JSON and Markdown views of a report. Every view reads the report's JSON form
(``Report.to_dict()``, the stored form), so a live audit and a stored one render alike. They
count nothing that decides an exit code and set no global state; the table writes to an
injected console. HTML, JUnit and Prometheus are in ``formats.py``."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # rich is imported only by the table view: JSON and Markdown start faster
    from rich.console import Console
    from rich.table import Table

STYLES = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim",
          "error": "magenta", "waived": "blue"}


def fix_text(result: dict[str, Any]) -> str:
    fix = result.get("remediation")
    if not fix:
        return ""
    if fix["kind"] == "playbook":
        return f"playbook {fix['playbook']}"
    return fix["steps"][0] if fix.get("steps") else "manual"


def fix_steps(result: dict[str, Any], inventory: str | None, host: str) -> list[str]:
    """The whole fix: the command that previews and applies the playbook, or every manual
    step (a BIOS setting, a build flag)."""
    fix = result.get("remediation")
    if not fix:
        return []
    if fix["kind"] == "playbook":
        inv = shlex.quote(inventory) if inventory else "INVENTORY"
        return [f"omni-host remediate -i {inv} {shlex.quote(host)} (preview; add --apply to run "
                f"playbook {fix['playbook']}, then it re-audits)"]
    return list(fix.get("steps") or ["manual"])


def status_of(result: dict[str, Any]) -> str:
    return result.get("effective_status", result["status"])


def unobserved(host: dict[str, Any]) -> list[str]:
    """Probes that yielded nothing, except fallbacks that were not needed."""
    return [f"{pid} ({p['reason']})" for pid, p in (host.get("probes") or {}).items()
            if p["outcome"] != "observed"
            and not p["reason"].startswith(("not needed", "not requested"))]


def expected_state_line(host: dict[str, Any]) -> str | None:
    """Once per host: the checks that had no expected state, and how to record one."""
    record = f"record it with: omni-host init -i INVENTORY {host['host']}"
    if host.get("unconfigured"):
        return ("NO EXPECTED STATE: the inventory sets no omni_* variable for this host; only "
                f"the universal defaults were checked ({record})")
    unset = host.get("no_expected_state") or {}
    if not unset:
        return None
    return ("No expected state for " + ", ".join(f"{c} ({v})" for c, v in unset.items())
            + f": {record}")


def summary_line(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    waived = f", {s['waived']} waived" if s.get("waived") else ""
    return (f"{s['hosts']} host(s), {s['unreachable']} unreachable: {s['pass']} pass, "
            f"{s['fail']} fail, {s['warn']} warn, {s['skip']} skip, {s['error']} error{waived}"
            + (" (INTERRUPTED: partial)" if doc.get("interrupted") else ""))


def render_json(doc: dict[str, Any], out: TextIO) -> None:
    json.dump(doc, out, indent=2)
    out.write("\n")


def _finding(r: dict[str, Any]) -> str:
    text = r["summary"]
    if r.get("waiver"):
        w = r["waiver"]
        text += f" [waived by {w['approver']} until {w['expires']}: {w['justification']}]"
    return text


def _host_table(host: dict[str, Any]) -> Table:
    """Three columns so that it reads on an 80-column terminal: the check (id, severity,
    lessons), and the finding with its fix underneath."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{host['host']} ({host.get('address') or host['transport']})",
                  title_justify="left", expand=True, show_lines=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Check", min_width=25)
    table.add_column("Finding and fix", ratio=3)
    for r in host["results"]:
        check = Text(r["id"], style="bold")
        check.append(f"\n{r['severity']} {' '.join(r['lessons'])}", style="dim")
        finding = Text(_finding(r))
        fix = fix_text(r)
        if fix:
            finding.append(f"\nFix: {fix}", style="cyan")
        status = status_of(r)
        table.add_row(Text(status.upper(), style=STYLES[status]), check, finding)
    return table


def strategic_lines(host: dict[str, Any]) -> list[str]:
    return [f"{e['engine']}: {e['status']}" + (f" ({'; '.join(e['reasons'])})" if e["reasons"] else "")
            for e in host.get("strategic") or []]


def cold_case_lines(host: dict[str, Any]) -> list[str]:
    """Everything that failed or was blocked before, and what it is now."""
    cold = host.get("cold_case")
    if not cold or not cold.get("previous"):
        return []
    lines = []
    for item in cold.get("items") or []:
        back = item["now"] in ("pass", "re-evaluate")
        lines.append(f"{item['item']}: {item['was']} before, {item['now']} now"
                     + (" (RESURRECTED)" if back else ""))
    return lines or [f"nothing failed or was blocked in earlier audits (last: {cold['previous']})"]


def render_table(doc: dict[str, Any], console: Console) -> None:
    from rich.text import Text

    for host in doc["hosts"]:
        if not host["reachable"]:
            console.print(Text(f"{host['host']} ({host.get('address')}): UNREACHABLE: "
                               f"{host['error']}", style="bold red"))
            continue
        console.print(_host_table(host))
        missing = unobserved(host)
        if missing:
            console.print(Text("Not observed: " + "; ".join(missing), style="dim"))
        unset = expected_state_line(host)
        if unset:
            console.print(Text(unset, style="bold yellow" if host.get("unconfigured") else "yellow"))
        for title, lines in (("Strategic", strategic_lines(host)),
                             ("Cold case", cold_case_lines(host))):
            if lines:
                console.print(Text(f"{title}: " + " | ".join(lines), style="dim"))
    for note in doc.get("waiver_notes") or []:
        console.print(Text(f"Waiver: {note}", style="yellow"))
    console.print(summary_line(doc))


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(doc: dict[str, Any], out: TextIO) -> None:
    out.write("# omni-host audit\n\n" + summary_line(doc) + "\n")
    for host in doc["hosts"]:
        out.write(f"\n## {host['host']} ({host.get('address') or host['transport']})\n\n")
        if not host["reachable"]:
            out.write(f"**Unreachable:** {_md(host['error'] or '')}\n")
            continue
        missing = unobserved(host)
        if missing:
            out.write("Not observed: " + _md("; ".join(missing)) + "\n\n")
        unset = expected_state_line(host)
        if unset:
            out.write(_md(unset) + "\n\n")
        out.write("| Status | Check | Severity | Lessons | Summary | Fix |\n")
        out.write("|---|---|---|---|---|---|\n")
        for r in host["results"]:
            out.write(f"| {status_of(r)} | `{r['id']}` | {r['severity']} | "
                      f"{', '.join(r['lessons'])} | {_md(_finding(r))} | {_md(fix_text(r))} |\n")
        for title, lines in (("Strategic", strategic_lines(host)),
                             ("Cold case", cold_case_lines(host))):
            if lines:
                out.write(f"\n**{title}:**\n\n" + "".join(f"- {_md(line)}\n" for line in lines))
        for r in host["results"]:
            if r["status"] not in ("fail", "warn", "error"):
                continue
            out.write(f"\n### {r['status']}: {r['id']}: {r['title']}\n\n{_md(r['summary'])}\n")
            for ev in r["evidence"]:
                out.write(f"\nEvidence (`{ev['command']}`):\n\n```\n")
                out.write("\n".join(ev["lines"]) + "\n```\n")
            fix = r.get("remediation")
            if fix and fix.get("steps"):
                out.write("\nFix:\n\n" + "".join(f"1. {_md(step)}\n" for step in fix["steps"]))
