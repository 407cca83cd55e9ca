"""What every view of a report shares (statuses, glyphs, the whole fix, the expected-state
line, the summary line) and the JSON and Markdown views. Every view reads the report's JSON
form (``Report.to_dict()``, the stored form), so a live audit and a stored one render alike.
They count nothing that decides an exit code and set no global state. The terminal view is in
``terminal.py``; HTML, JUnit and Prometheus in ``formats.py``."""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Any, TextIO

from omni_host.probes.parsers.bench import rate
from omni_host.safe_text import each_string, terminal_safe

STYLES = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim",
          "error": "magenta", "waived": "blue"}
GLYPHS = {"fail": "\u2717", "error": "E", "warn": "!", "waived": "W", "skip": "\u2013",
          "pass": "\u2713"}  # a matrix reads without colour too
ORDER = tuple(GLYPHS)  # failures first
ENGINE_WORDS = {"blocked": "blocked", "blocked-upstream": "blocked upstream",
                "unknown": "unknown", "re-evaluate": "viable"}


def engine_why(engine: dict[str, Any]) -> list[str]:
    """Why an engine has its Strategic verdict here: the conditions that hold (or cannot be
    decided), else each condition with the fact that clears it."""
    if engine.get("reasons"):
        return list(engine["reasons"])
    return [f"not blocked by: {c}" for c in engine.get("cleared") or []]


def check_ids(doc: dict[str, Any]) -> list[str]:
    """Every check id of the report's hosts, in the order they first appear."""
    checks: list[str] = []
    for host in doc["hosts"]:
        checks += [r["id"] for r in host.get("results") or [] if r["id"] not in checks]
    return checks


# The inventory of this machine that a hint makes first when the audit had none (the local
# audit of the README's first command): Ansible's local connection, and the python3 of PATH
# for its modules, as omni-host's collector uses (Ansible's discovery picked a pyenv shim of a
# version that was not installed: "python3.13: command not found").
LOCAL_INVENTORY = ("printf 'localhost ansible_connection=local ansible_python_interpreter=python3"
                   "\\n' > hosts.ini && ")


def target(doc: dict[str, Any]) -> str | None:
    """What a pasted hint needs to reach the hosts as the run did, quoted for a shell: ``-i
    INVENTORY`` and the run's connection options (``--known-hosts``, ``--ssh-config``,
    ``--vault-password-file``: the report's ``hint_args``); None without an inventory."""
    inventory = doc.get("inventory")
    if not isinstance(inventory, str) or not inventory:
        return None
    given = doc.get("hint_args")
    options = [str(a) for a in given] if isinstance(given, list) else []
    return " ".join(shlex.quote(a) for a in ["-i", inventory, *options])


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
_HOST_COMMAND = re.compile(r"omni-host (bench|serve watch)(?! -i)\b")


def runnable(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the commands in its hosts' verdicts completed to run as pasted: ``-i
    INVENTORY``, the run's connection options and the host (unchanged without an inventory:
    then the command is this machine's, as the run was)."""
    where = target(doc)
    if where is None:
        return doc

    def host_view(host: dict[str, Any]) -> dict[str, Any]:
        name = shlex.quote(str(host.get("host", "")))

        def fix(text: Any) -> Any:
            return _HOST_COMMAND.sub(lambda m: f"omni-host {m[1]} {where} {name}", text) \
                if isinstance(text, str) else text

        results = [{**r, "summary": fix(r.get("summary"))} for r in host.get("results") or []]
        last = host.get("last_bench")
        return {**host, "results": results,
                **({"last_bench": {**last, "summary": fix(last.get("summary")),
                                   "command": f"omni-host bench {where} {name}"}}
                   if isinstance(last, dict) else {})}

    return {**doc, "hosts": [host_view(h) for h in doc.get("hosts") or []]}


def init_command(host: str, where: str | None) -> str:
    """The command that records a host's expected state, quoted for a shell (``where``: the
    report's ``target``; without an inventory, one of this machine is made first: init
    writes host_vars beside it)."""
    if where:
        return f"omni-host init {_without_store(where)} {shlex.quote(host)}"
    return f"{LOCAL_INVENTORY}omni-host init -i hosts.ini {shlex.quote(host)}"


def waiver_line(waiver: dict[str, Any]) -> str:
    """Who accepted a finding, until when, and why."""
    return f"by {waiver['approver']} until {waiver['expires']}: {waiver['justification']}"


def fix_steps(result: dict[str, Any], where: str | None, host: str) -> list[str]:
    """The whole fix: the command that previews and applies the playbook, or every manual
    step (a BIOS setting, a build flag)."""
    fix = result.get("remediation")
    if not fix:
        return []
    if fix["kind"] == "playbook":
        # without an inventory (this machine, the built-in policy) remediate makes its own
        reach = f"{where} " if where else ""
        return [f"omni-host remediate {reach}{shlex.quote(host)} (preview; add --apply to run "
                f"playbook {fix['playbook']}, then it re-audits)"]
    return list(fix.get("steps") or ["manual"])


PERF = "perf.tokens-per-s"


def perf_result(host: dict[str, Any]) -> dict[str, Any] | None:
    """A host entry's tokens/s result (a bench's), None for an audit's (or an entry whose
    results are not a list of results: a hand-edited store)."""
    return result_of(host, PERF)


def result_of(host: dict[str, Any], check_id: str) -> dict[str, Any] | None:
    """A host entry's result of one check, None where it has none (or its results are not a
    list of results: a hand-edited store)."""
    results = host.get("results")
    if not isinstance(results, list):
        return None
    return next((r for r in results if isinstance(r, dict) and r.get("id") == check_id), None)


SERVED = "serve.tokens-per-s"


def served_result(host: dict[str, Any]) -> dict[str, Any] | None:
    """A host entry's serve.tokens-per-s result, where its servers were looked for."""
    return result_of(host, SERVED)


def served_rates(host: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each server whose rate was read: its name -> its part of serve.tokens-per-s's details
    (served_ts, and against a bench fraction and bench_ts)."""
    servers = ((served_result(host) or {}).get("details") or {}).get("servers")
    return {str(s["server"]): s for s in servers or []
            if isinstance(s, dict) and rate(s.get("served_ts")) is not None}


def bench_tests(host: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A bench's measured tests (name -> mean_ts, cv, samples...) from its host entry, {} for
    an audit (which never runs a benchmark)."""
    return ((perf_result(host) or {}).get("details") or {}).get("tests") or {}


def bench_figures(details: dict[str, Any]) -> tuple[float | None, float | None]:
    """A bench's generation test (else its first) against the baseline it was judged with and
    against its ceiling, as fractions (None where not known); an audit's LastBench keeps them."""
    if "of_baseline" in details or "of_ceiling" in details:
        return rate(details.get("of_baseline")), rate(details.get("of_ceiling"))
    given = details.get("tests")
    tests: dict[str, Any] = given if isinstance(given, dict) else {}
    name = next((n for n, t in tests.items() if isinstance(t, dict) and t.get("kind") == "tg"),
                next(iter(tests), None))
    if name is None:
        return None, None
    verdict = (details.get("verdicts") or {}).get(name) or {}
    center, reference = test_rate(tests[name]), rate(verdict.get("reference_ts"))
    ceiling = ((details.get("ceiling") or {}).get(name) or {}).get("fraction")
    return (center / reference if center and reference else None), rate(ceiling)


def test_rate(test: Any) -> float | None:
    """A stored test's tokens/s as judged (the median after the warm-up repetition; the mean
    in benches stored before that), None where the stored value is not a rate."""
    return rate(test.get("center_ts", test.get("mean_ts"))) if isinstance(test, dict) else None


def last_bench_line(bench: dict[str, Any], now: float | None) -> str:
    """An audit's line on the host's newest bench: its verdict, age and summary."""
    hours = max(0.0, (float(now or 0) - float(bench["at"])) / 3600)
    age = f"{hours:.0f} h" if hours < 48 else f"{hours / 24:.0f} days"
    return (f"Last bench: {bench['status']} {age} ago ({bench['audit']}): {bench['summary']} "
            f"({bench.get('command') or 'omni-host bench'} to measure again)")


def status_of(result: dict[str, Any]) -> str:
    return str(result.get("effective_status", result["status"]))


def unobserved(host: dict[str, Any]) -> list[str]:
    """Probes that yielded nothing, except fallbacks that were not needed."""
    return [f"{pid} ({p['reason']})" for pid, p in (host.get("probes") or {}).items()
            if p["outcome"] != "observed"
            and not p["reason"].startswith(("not needed", "not requested"))]


def recordable(host: dict[str, Any]) -> bool:
    """Whether ``omni-host init`` would record some of the expected state this host lacks
    (what this audit observed: once init has recorded it, the hint stops)."""
    return bool(host.get("unconfigured")) or bool(host.get("recordable"))


def reference_line(host: dict[str, Any], where: str | None = None) -> str | None:
    """The first audit without an inventory: what it judged against (the reference box, not
    this machine), and the command that makes the expected state this machine's own."""
    if not host.get("reference"):
        return None
    values = (host.get("policy") or {}).get("values") or {}
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
            f"(docs/first-hour.md). Record this machine's: {init_command(host['host'], where)}")


def expected_state_line(host: dict[str, Any], where: str | None = None) -> str | None:
    """Once per host: the checks that had no expected state, and how to record one (init
    where it would record some; else the inventory is where they are written)."""
    record = f"record it with: {init_command(host['host'], where)}"
    if host.get("unconfigured"):
        return ("NO EXPECTED STATE: the inventory sets no omni_* variable for this host; only "
                f"the universal defaults were checked ({record})")
    unset = host.get("no_expected_state") or {}
    if not unset:
        return None
    how = record if recordable(host) else "set them in the inventory (docs/inventory.md)"
    return "No expected state for " + ", ".join(f"{c} ({v})" for c, v in unset.items()) + f": {how}"


def summary_line(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    waived = f", {s['waived']} waived" if s.get("waived") else ""
    return (f"{s['hosts']} host(s), {s['unreachable']} unreachable: {s['pass']} pass, "
            f"{s['fail']} fail, {s['warn']} warn, {s['skip']} skip, {s['error']} error{waived}"
            + (" (INTERRUPTED: partial)" if doc.get("interrupted") else ""))


def _finding(r: dict[str, Any]) -> str:
    text = str(r["summary"])
    if r.get("waiver"):
        text += f" [waived {waiver_line(r['waiver'])}]"
    return text


def cold_case_lines(host: dict[str, Any]) -> list[str]:
    """What changed state since the host's previous audit (nothing: one line that says so)."""
    cold = host.get("cold_case")
    if not cold or not cold.get("previous"):
        return []
    return ([f"{i['item']}: {i.get('change') or 'changed'} ({i['was']} before, {i['now']} now)"
             for i in cold.get("items") or []]
            or ["nothing changed"])


def strategic_lines(host: dict[str, Any]) -> list[str]:
    return [f"{e['engine']}: {ENGINE_WORDS[e['status']]} ({'; '.join(engine_why(e))})"
            for e in host.get("strategic") or []]


def _md(text: str) -> str:
    """Text in a Markdown table or paragraph: no raw HTML (a Markdown viewer renders
    `<script>` from a host's or a test's name), no column break, one line."""
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|").replace("\n", " "))


def _ticks(lines: list[str]) -> int:
    """The longest run of backticks in ``lines``: a code span or fence longer than it cannot
    be closed by them."""
    return max((len(run) for line in lines for run in re.findall("`+", line)), default=0)


def render_markdown(doc: dict[str, Any], out: TextIO) -> None:
    """The report as Markdown. Everything the hosts wrote (names, outputs, llama-bench's test
    names) is escaped: control characters as \\xNN (an ESC or BEL reached the reader's
    terminal), HTML as entities, code blocks fenced past their own backticks."""
    doc = each_string(doc, terminal_safe)
    out.write("# omni-host audit\n\n" + summary_line(doc) + "\n")
    for host in doc["hosts"]:
        out.write(f"\n## {_md(host['host'])} ({_md(host.get('address') or host['transport'])})"
                  "\n\n")
        if not host["reachable"]:
            out.write(f"**Unreachable:** {_md(host['error'] or '')}\n")
            continue
        missing = unobserved(host)
        if missing:
            out.write("Not observed: " + _md("; ".join(missing)) + "\n\n")
        unset = expected_state_line(host)
        if unset:
            out.write(_md(unset) + "\n\n")
        out.write("| Status | Check | Severity | Lessons | Summary |\n")
        out.write("|---|---|---|---|---|\n")
        for r in host["results"]:
            out.write(f"| {status_of(r)} | `{r['id']}` | {r['severity']} | "
                      f"{', '.join(r['lessons'])} | {_md(_finding(r))} |\n")
        for title, lines in (("Strategic", strategic_lines(host)),
                             ("Cold case", cold_case_lines(host))):
            if lines:
                out.write(f"\n**{title}:**\n\n" + "".join(f"- {_md(line)}\n" for line in lines))
        for r in host["results"]:
            if r["status"] not in ("fail", "warn", "error"):
                continue
            out.write(f"\n### {r['status']}: {_md(r['id'])}: {_md(r['title'])}\n\n"
                      f"{_md(r['summary'])}\n")
            for ev in r["evidence"]:
                fence = "`" * max(3, _ticks([ev["command"], *ev["lines"]]) + 1)
                ticks = "`" * (_ticks([ev["command"]]) + 1)
                out.write(f"\nEvidence ({ticks}{ev['command']}{ticks}):\n\n{fence}\n")
                out.write("\n".join(ev["lines"]) + f"\n{fence}\n")
            steps = fix_steps(r, target(doc), host["host"])
            if steps:
                out.write("\nFix:\n\n" + "".join(f"1. {_md(step)}\n" for step in steps))


def plan_lines(doc: dict[str, Any]) -> list[str]:
    """The placement plan of each host (perf.placement) as a ranked table, and the proof's
    predicted-against-measured table (perf.placement-proof) where it ran."""
    from omni_host.evaluate.plan import fit_words, memory_words, rows_of

    lines: list[str] = []
    for host in doc.get("hosts") or []:
        planned = result_of(host, "perf.placement")
        rows = rows_of(((planned or {}).get("details") or {}).get("plan"))
        if not rows:
            continue
        lines += ["", f"Placement plan for {host.get('host')}, ranked (predicted tg: t/s; "
                  "memory per device, with KV cache, compute and margin):"]
        for i, r in enumerate(rows, 1):
            predicted = r.predicted_tg
            lines.append(f"{i:>2}. [{r.origin}] {r.placement}")
            lines.append(f"    predicted tg {predicted if predicted is not None else '-'}; "
                         f"{r.why_not or fit_words(r)}; {memory_words(r)}; "
                         f"limit: {r.limit or '-'}")
            lines.append(f"    llama-server {r.llama_server}")
            lines.append(f"    llama-bench  {r.llama_bench}")
        proof = result_of(host, "perf.placement-proof")
        details = (proof or {}).get("details") or {}
        by_key = {r.key: r for r in rows_of(details.get("proved"))}
        for test, entry in (details.get("proof") or {}).items():
            lines += ["", f"Proof, {test} (median of the rounds; against the fastest):"]
            for arm, v in sorted(entry.get("arms", {}).items(),
                                 key=lambda kv: -kv[1].get("median_ts", 0)):
                against = v.get("against_leader") or {}
                verdict = "fastest" if arm == entry.get("leader") else \
                    f"{against.get('effect', 0):+.1%} " + (
                        "measurable" if against.get("measurable") else "within the noise")
                predicted = by_key[arm].predicted_tg if arm in by_key else None
                lines.append(f"  {arm:<14} measured {v.get('median_ts')} t/s, predicted "
                             f"{predicted if predicted is not None else '-'}: {verdict}")
    return lines
