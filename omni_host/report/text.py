"""What every view of a report shares (statuses, glyphs, the whole fix, the expected-state
line, the summary line) and the Markdown view. Every view reads the typed report (a live
audit's, or a stored one as ``codec`` reads it back), so a live audit and a stored one render
alike. They count nothing that decides an exit code and set no global state. The terminal
view is in ``terminal.py``; HTML, JUnit and Prometheus in ``formats.py``; where a bench's or a
served rate's figures sit in a host report, ``results.py``."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any, TextIO

from omni_host.invocation import program
from omni_host.model import AppliedWaiver, CheckResult, EngineVerdict, Outcome, Status
from omni_host.outcome import LastBench
from omni_host.report.results import PLACEMENT, PROOF, details_of
from omni_host.reports import HostReport, Report
from omni_host.safe_text import each_string, terminal_safe

STYLES = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim",
          "error": "magenta", "waived": "blue"}
GLYPHS = {"fail": "\u2717", "error": "E", "warn": "!", "waived": "W", "skip": "\u2013",
          "pass": "\u2713"}  # a matrix reads without colour too
ORDER = tuple(GLYPHS)  # failures first
ENGINE_WORDS = {"blocked": "blocked", "blocked-upstream": "blocked upstream",
                "unknown": "unknown", "re-evaluate": "viable"}


def engine_why(engine: EngineVerdict) -> list[str]:
    """Why an engine has its Strategic verdict here: the conditions that hold (or cannot be
    decided), else each condition with the fact that clears it."""
    if engine.reasons:
        return list(engine.reasons)
    return [f"not blocked by: {c}" for c in engine.cleared]


def check_ids(report: Report) -> list[str]:
    """Every check id of the report's hosts, in the order they first appear."""
    checks: list[str] = []
    for host in report.hosts:
        checks += [r.id for r in host.results if r.id not in checks]
    return checks



# The inventory of this machine that a hint makes first when the audit had none (the local
# audit of the README's first command): Ansible's local connection, and the python3 of PATH
# for its modules, as omni-host's collector uses (Ansible's discovery picked a pyenv shim of a
# version that was not installed: "python3.13: command not found").
LOCAL_INVENTORY = ("printf 'localhost ansible_connection=local ansible_python_interpreter=python3"
                   "\\n' > hosts.ini && ")



def target(report: Report) -> str | None:
    """What a pasted hint needs to reach the hosts as the run did, quoted for a shell: ``-i
    INVENTORY`` and the run's connection options (``--known-hosts``, ``--ssh-config``,
    ``--vault-password-file``: the report's ``hint_args``); None without an inventory."""
    if not report.inventory:
        return None
    return " ".join(shlex.quote(a) for a in ["-i", report.inventory, *report.hint_args])


def _without_store(where: str) -> str:
    """``target`` for a command that keeps no reports (init): without ``--report-dir``."""
    parts = shlex.split(where)
    while "--report-dir" in parts:
        at = parts.index("--report-dir")
        del parts[at:at + 2]
    return " ".join(shlex.quote(a) for a in parts)


# A command inside a verdict's words, written where neither the host nor the inventory is
# known ("record a new baseline: omni-host bench --baseline"): pasted as it stands it benched
# the built-in localhost policy. Views make it this report's host's command.
_HOST_COMMAND = re.compile(r"omni-host (bench|serve watch)(?! -i)\b((?: --[a-z][a-z-]*)*)")



def runnable(report: Report, *, mark: bool = True) -> Report:
    """``report`` with the commands in its hosts' verdicts completed to run as pasted: the
    program as this run was invoked, ``-i INVENTORY``, the run's connection options and the
    host (without an inventory, the program alone: then the command is this machine's, as the
    run was); ``mark``: each marked as a command (``command``), for the views that set one
    apart (the terminal, Markdown)."""
    where = target(report)

    def host_view(host: HostReport) -> HostReport:
        name = shlex.quote(host.host)

        def fix(text: str) -> str:
            return _HOST_COMMAND.sub(lambda m: (command if mark else str)(
                f"{program()} {m[1]}{m[2]} {where} {name}" if where else
                f"{program()} {m[1]}{m[2]}"), text)

        last = host.last_bench
        return replace(host, results=tuple(replace(r, summary=fix(r.summary))
                                           for r in host.results),
                       last_bench=replace(last, summary=fix(last.summary)) if last else None)

    return replace(report, hosts=tuple(host_view(h) for h in report.hosts))


def init_command(host: str, where: str | None) -> str:
    """The command that records a host's expected state, quoted for a shell (``where``: the
    report's ``target``; without an inventory, one of this machine is made first: init
    writes host_vars beside it)."""
    if where:
        return command(f"{program()} init {_without_store(where)} {shlex.quote(host)}")
    return command(f"{LOCAL_INVENTORY}{program()} init -i hosts.ini {shlex.quote(host)}")


def command(text: str) -> str:
    """``text``, a shell command, marked as one inside a line of words (between backticks):
    the terminal view puts it on lines of its own, broken only between its words; Markdown
    shows it as code; ``plain`` takes the marks away. One that holds a backtick itself is left
    unmarked (never split inside)."""
    return text if "`" in text else f"`{text}`"


def plain(text: str) -> str:
    """A line of words with its commands' marks (``command``) taken away."""
    return text.replace("`", "")




def waiver_line(waiver: AppliedWaiver) -> str:
    """Who accepted a finding, until when, and why."""
    return f"by {waiver.approver} until {waiver.expires}: {waiver.justification}"


def fix_steps(result: CheckResult, where: str | None, host: str) -> list[str]:
    """The whole fix: the command that previews and applies the playbook, or every manual
    step (a BIOS setting, a build flag)."""
    fix = result.remediation
    if fix is None:
        return []
    if fix.kind == "playbook":
        # without an inventory (this machine, the built-in policy) remediate makes its own
        reach = f"{where} " if where else ""
        return [f"preview playbook {fix.playbook} (add --apply to run it, then it re-audits): "
                + command(f"{program()} remediate {reach}{shlex.quote(host)}")]
    return list(fix.steps or ["manual"])


def last_bench_line(bench: LastBench, now: float | None, where: str | None, host: str) -> str:
    """An audit's line on the host's newest bench: its verdict, age and summary, and the
    command that measures again: with the inventory and options the bench ran with, else
    ``where`` (the audit's ``target``: a bench stored before it said its own)."""
    where = bench.reach or where  # as the bench was run (issue 62), else the audit's way
    hours = max(0.0, (float(now or 0) - bench.at) / 3600)
    age = f"{hours:.0f} h" if hours < 48 else f"{hours / 24:.0f} days"
    again = command(f"{program()} bench {where} {shlex.quote(host)}" if where
                    else f"{program()} bench")
    proved = f"; then bench --why: {bench.why}" if bench.why else ""
    return (f"Last bench: {bench.status.value} {age} ago ({bench.audit}): {bench.summary}"
            f"{proved}; measure again: {again}")


def status_of(result: CheckResult) -> str:
    return result.effective_status.value


def unobserved(host: HostReport) -> list[str]:
    """Probes that yielded nothing, except fallbacks that were not needed."""
    return [f"{pid} ({p.reason})" for pid, p in host.probes.items()
            if p.outcome is not Outcome.OBSERVED
            and not p.reason.startswith(("not needed", "not requested"))]


def recordable(host: HostReport) -> bool:
    """Whether ``omni-host init`` would record some of the expected state this host lacks
    (what this audit observed: once init has recorded it, the hint stops)."""
    return host.unconfigured or bool(host.recordable)


def reference_line(host: HostReport, where: str | None = None) -> str | None:
    """The first audit without an inventory: what it judged against (the reference box, not
    this machine), and the command that makes the expected state this machine's own."""
    if not host.reference:
        return None
    values = host.policy.values if host.policy else {}
    box = []
    if values.get("omni_gpus"):
        box.append(" + ".join(f"{g.get('model')} {g.get('vram_gib')} GB" for g in values["omni_gpus"]))
    if values.get("omni_numa_nps"):
        box.append(f"NPS{values['omni_numa_nps']}")
    if values.get("omni_swap_size_mib"):
        box.append(f"{values['omni_swap_size_mib'] // 1024} GiB of swap at "
                   f"{values.get('omni_swap_path')}")
    box += [f"model {PurePosixPath(str(m.get('path', ''))).name}"
            for m in values.get("omni_models") or []]
    what = f" ({', '.join(box)})" if box else ""
    return (f"Judged against the built-in reference box{what}, not this machine's own state "
            f"(docs/first-hour.md). Record this machine's: {init_command(host.host, where)}")


def expected_state_line(host: HostReport, where: str | None = None) -> str | None:
    """Once per host: the checks that had no expected state, and how to record one (init
    where it would record some; else the inventory is where they are written)."""
    record = f"record it with: {init_command(host.host, where)}"
    if host.unconfigured:
        return ("NO EXPECTED STATE: the inventory sets no omni_* variable for this host; no "
                f"check that reads one was judged on the role's defaults; {record}")
    unset = host.no_expected_state()
    if not unset:
        return None
    how = record if recordable(host) else "set them in the inventory (docs/inventory.md)"
    return "No expected state for " + ", ".join(f"{c} ({v})" for c, v in unset.items()) + f": {how}"


def summary_line(report: Report) -> str:
    s = report.summary()
    waived = f", {s['waived']} waived" if s.get("waived") else ""
    return (f"{s['hosts']} host(s), {s['unreachable']} unreachable: {s['pass']} pass, "
            f"{s['fail']} fail, {s['warn']} warn, {s['skip']} skip, {s['error']} error{waived}"
            + (" (INTERRUPTED: partial)" if report.interrupted else ""))


def _finding(r: CheckResult) -> str:
    return r.summary + (f" [waived {waiver_line(r.waiver)}]" if r.waiver else "")


def cold_case_lines(host: HostReport) -> list[str]:
    """What changed state since the host's previous audit (nothing: one line that says so)."""
    cold = host.cold_case
    if cold is None or not cold.previous:
        return []
    return ([f"{i.item}: {i.change or 'changed'} ({i.was} before, {i.now} now)"
             for i in cold.items]
            or ["nothing changed"])


def strategic_lines(host: HostReport) -> list[str]:
    return [f"{e.engine}: {ENGINE_WORDS[e.status.value]} ({'; '.join(engine_why(e))})"
            for e in host.strategic]


def _md(text: str) -> str:
    """Text in a Markdown table or paragraph: no raw HTML (a Markdown viewer renders
    `<script>` from a host's or a test's name), no column break, one line."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|").replace("\n", " "))


def _ticks(lines: list[str]) -> int:
    """The longest run of backticks in ``lines``: a code span or fence longer than it cannot
    be closed by them."""
    return max((len(run) for line in lines for run in re.findall("`+", line)), default=0)



def render_markdown(report: Report, out: TextIO) -> None:
    """The report as Markdown. Everything the hosts wrote (names, outputs, llama-bench's test
    names) is escaped: control characters as \\xNN (an ESC or BEL reached the reader's
    terminal), HTML as entities, code blocks fenced past their own backticks."""
    report = each_string(report, terminal_safe)
    where = target(report)
    out.write("# omni-host audit\n\n" + summary_line(report) + "\n")
    for note in report.twins:
        out.write(f"\n**Twins:** {_md(note)}\n")
    for host in report.hosts:
        out.write(f"\n## {_md(host.host)} ({_md(host.address or host.transport)})\n\n")
        if not host.reachable:
            out.write(f"**Unreachable:** {_md(host.error or '')}\n")
            continue
        missing = unobserved(host)
        if missing:
            out.write("Not observed: " + _md("; ".join(missing)) + "\n\n")
        unset = expected_state_line(host)
        if unset:
            out.write(_md(unset) + "\n\n")
        out.write("| Status | Check | Severity | Lessons | Summary |\n")
        out.write("|---|---|---|---|---|\n")
        for r in host.results:
            out.write(f"| {status_of(r)} | `{r.id}` | {r.severity.value} | "
                      f"{', '.join(r.lessons)} | {_md(_finding(r))} |\n")
        for title, lines in (("Strategic", strategic_lines(host)),
                             ("Cold case", cold_case_lines(host))):
            if lines:
                out.write(f"\n**{title}:**\n\n" + "".join(f"- {_md(line)}\n" for line in lines))
        for r in host.results:
            if r.status not in (Status.FAIL, Status.WARN, Status.ERROR):
                continue
            out.write(f"\n### {r.status.value}: {_md(r.id)}: {_md(r.title)}\n\n"
                      f"{_md(r.summary)}\n")
            for ev in r.evidence:
                fence = "`" * max(3, _ticks([ev.command, *ev.lines]) + 1)
                ticks = "`" * (_ticks([ev.command]) + 1)
                out.write(f"\nEvidence ({ticks}{ev.command}{ticks}):\n\n{fence}\n")
                out.write("\n".join(ev.lines) + f"\n{fence}\n")
            steps = fix_steps(r, where, host.host)
            if steps:
                out.write("\nFix:\n\n" + "".join(f"1. {_md(step)}\n" for step in steps))


def _gbs(gbs: Any) -> str:
    """A stored rate in GB/s (the plan's details keep them so), or "none"."""
    return f"{gbs:g} GB/s" if isinstance(gbs, (int, float)) else "none"


def _wander_words(wander: Any) -> str:
    """How far the plan's rates wander between runs, as its stated error allows for it."""
    known = wander if isinstance(wander, dict) else {}
    said = [f"{kind} ±{w:.1%}" for kind, w in sorted(known.items())
            if isinstance(w, (int, float))]
    return ("between runs its rates wander " + ", ".join(said) + " (one spread, twice each "
            "way, in the range)") if said else \
        "how far its rates wander between runs is not known yet (three stored runs tell it)"


def _free_words(about: dict[str, Any]) -> str | None:
    """Each GPU's free memory the plan fitted to: as llama.cpp's CUDA backend found it where
    the build said (its own context taken), against NVML's."""
    used, nvml = about.get("gpus_free_mib") or [], about.get("gpus_free_nvml_mib") or []
    engine = about.get("gpus_free_engine_mib") or {}
    said = []
    for i, free in enumerate(used):
        before = nvml[i] if i < len(nvml) else None
        if f"CUDA{i}" in engine and isinstance(before, int) and free < before:
            said.append(f"GPU{i} {free:,} MiB as llama.cpp's CUDA backend found it (NVML "
                        f"{before:,}: {before - free:,} MiB is what a server's own CUDA "
                        "context and the driver take)")
        elif f"CUDA{i}" in engine:
            said.append(f"GPU{i} {free:,} MiB (NVML; llama.cpp's CUDA backend found no less)")
        else:
            said.append(f"GPU{i} {free:,} MiB (NVML: the build did not say what llama.cpp "
                        "finds, a server's own CUDA context is not counted)")
    return "  GPU free: " + "; ".join(said) if said else None


def plan_lines(report: Report) -> list[str]:
    """The placement plan of each host (perf.placement) as a ranked table, and the proof's
    predicted-against-measured table (perf.placement-proof) where it ran."""
    from omni_host.measure.plan import fit_words, memory_words, range_words, rows_of, verdict

    lines: list[str] = []
    for host in report.hosts:
        about = details_of(host, PLACEMENT)
        rows = rows_of(about.get("plan"))
        if not rows:
            continue
        work, rates = about.get("workload") or {}, about.get("rates") or {}
        lines += ["", f"Placement plan for {host.host} at -c {work.get('ctx', '?')}, "
                  f"generation at depth {work.get('depth', '?')}, ranked (predicted tg: t/s, "
                  "the range its measured rate is expected in; pp not predicted, --prove "
                  "measures it; memory per device, with KV cache, compute and margin):",
                  f"  CPU read rate: {_gbs(rates.get('cpu_gbs'))}, "
                  f"{rates.get('cpu_from') or 'unknown'}; GPU efficiency: "
                  f"{rates.get('gpu_efficiency') or 1.0:g} of bandwidth, "
                  f"{rates.get('gpu_efficiency_from') or 'none measured'}",
                  f"  Stated error: {rates.get('tg_ratio_from') or 'none stated'}; "
                  f"{_wander_words(rates.get('wander'))}"]
        free = _free_words(about)
        if free:
            lines.append(free)
        for i, r in enumerate(rows, 1):
            lines.append(f"{i:>2}. [{r.origin}] {r.placement}")
            lines.append(f"    predicted tg {range_words(r, brief=True)}; "
                         f"{r.why_not or fit_words(r)}; {memory_words(r)}; "
                         f"limit: {r.limit or '-'}")
            lines.append(f"    llama-server {r.llama_server}")
            lines.append(f"    llama-bench  {r.llama_bench}")
        details = details_of(host, PROOF)
        by_key = {r.key: r for r in rows_of(details.get("proved"))}
        for test, entry in (details.get("proof") or {}).items():
            lines += ["", f"Proof, {test} (median of the rounds; against the fastest):"]
            lead = entry.get("arms", {}).get(entry.get("leader"), {}).get("median_ts")
            for arm, v in sorted(entry.get("arms", {}).items(),
                                 key=lambda kv: -kv[1].get("median_ts", 0)):
                against = v.get("against_leader") or {}
                ratio = f"{v['median_ts'] / lead - 1:+.1%} of the fastest's median" \
                    if lead and v.get("median_ts") else "no median"
                # every percentage beside two rates is their ratio; the paired effect is named
                judged = "fastest" if arm == entry.get("leader") else (
                    f"{ratio}; paired per round {against.get('effect', 0):+.1%}, "
                    f"{verdict(against)}")
                # the plan predicts generation: a prompt test's line shows no prediction
                said = f", predicted tg {range_words(by_key[arm], brief=True)}" if arm in by_key and \
                    test.startswith("tg") and by_key[arm].predicted_tg is not None else ""
                within = (entry.get("within_stated_error") or {}).get(arm)
                said += "" if within is None else \
                    " (within its stated error)" if within else " (OUTSIDE its stated error)"
                lines.append(f"  {arm:<14} measured {v.get('median_ts')} t/s{said}: {judged}")
    return lines
