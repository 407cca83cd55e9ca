"""The check catalog as text: ``checks list``, ``checks explain``, and docs/checks.md. One
source, ``checks/catalog.yaml``, for the CLI, the docs and the reports."""

from __future__ import annotations

import re
import textwrap
from typing import Any

from omni_host.errors import UsageError
from omni_host.evaluate.checks import registry
from omni_host.evaluate.meta import ASKED_BY, CheckMeta, catalog

_LESSON = re.compile(r"^[FSP]-\d{3}$")


def find(term: str) -> list[CheckMeta]:
    """A check id, or a lesson id (every check that comes from it)."""
    metas = catalog()
    if term in metas:
        return [metas[term]]
    if _LESSON.match(term.upper()):
        found = [m for m in metas.values() if term.upper() in m.lessons]
        if found:
            return found
        raise UsageError(f"no check comes from lesson {term.upper()}")
    close = [cid for cid in metas if term in cid]
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UsageError(f"unknown check or lesson {term!r}{hint}")




def list_lines() -> list[str]:
    implemented = registry()
    return [f"{m.id:27} {m.severity.value:8} {m.layer:9} {' '.join(m.lessons):24} {m.title}"
            + (f"  ({ASKED_BY[m.id]})" if m.id in ASKED_BY else "" if m.id in implemented
               else "  (not implemented)")
            for m in catalog().values()]


def explain(meta: CheckMeta) -> str:
    fix = meta.remediation
    lines = [
        f"{meta.id}: {meta.title}",
        f"  severity {meta.severity.value}, layer {meta.layer}, lessons "
        f"{', '.join(meta.lessons) or '(field practice)'}",
        "",
        "Why (the lesson):",
        textwrap.fill(meta.rationale, 90, initial_indent="  ", subsequent_indent="  "),
        "",
        "How it is decided:",
        textwrap.fill(meta.decided, 90, initial_indent="  ", subsequent_indent="  "),
    ]
    if meta.references:
        lines += ["", "Reads:", *(f"  - {r}" for r in meta.references)]
    lines += ["", "Fix:" + (f" playbook {fix.playbook} (omni-host remediate)" if fix.playbook else
                            " manual")]
    lines += [f"  - {step}" for step in fix.steps]
    return "\n".join(lines) + "\n"


def markdown() -> str:
    """docs/checks.md, generated (tests/test_explain.py keeps it current)."""
    out = ["# Check catalog", "",
           "Generated from `checks/catalog.yaml` by `omni-host checks doc > docs/checks.md`; do "
           "not edit by hand.", "",
           "| id | severity | layer | lessons | title |", "|---|---|---|---|---|"]
    metas = catalog().values()
    out += [f"| `{m.id}` | {m.severity.value} | {m.layer} | {', '.join(m.lessons)} | {m.title} |"
            for m in metas]
    for m in metas:
        fix = m.remediation
        out += ["", f"## `{m.id}`: {m.title}", "",
                f"Severity {m.severity.value}, layer {m.layer}, lessons "
                f"{', '.join(m.lessons) or '(field practice)'}.", "",
                f"**Why.** {m.rationale}", "", f"**How it is decided.** {m.decided}", "",
                "**Fix.** " + (f"Playbook `{fix.playbook}` (`omni-host remediate`)."
                               if fix.playbook else "Manual.")]
        out += [f"- {step}" for step in fix.steps]
    return "\n".join(out) + "\n"


def _type(option: dict[str, Any]) -> str:
    kind = str(option.get("type", "str"))
    if kind == "list":
        elements = option.get("elements", "str")
        if elements == "dict":
            return "list of `{" + ", ".join(option.get("options", {})) + "}`"
        return f"list of {elements}"
    return kind


def variables_markdown() -> str:
    """The table of ``omni_*`` variables in docs/inventory.md, generated from the one spec
    (``ansible_collections/omni/host/roles/omni/meta/argument_specs.yml``)."""
    from omni_host.plan.policy import spec

    out = ["| variable | type | default | read by | meaning |", "|---|---|---|---|---|"]
    for name, option in spec().items():
        lines = [str(d) for d in option.get("description", [])]
        readers = next((line.split(":", 1)[1].strip() for line in lines
                        if line.startswith("Checks:")), "")
        readers = ", ".join(f"`{c.strip()}`" for c in readers.split(",") if c.strip()) or \
            "the playbooks"
        meaning = " ".join(line for line in lines if not line.startswith("Checks:")
                           and line not in ("Remediation only.", "Audit only."))
        default = f"`{option['default']}`" if "default" in option else ""
        out.append(f"| `{name}` | {_type(option)} | {default} | {readers} | {meaning} |")
    return "\n".join(out) + "\n"
