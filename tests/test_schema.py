"""One variable, two readers, proven: every omni_* variable a check reads is honoured by that
check's playbook (unless the spec marks it an audit-only threshold), and every omni_* variable a
playbook reads is read by a check (unless the spec marks it remediation-only)."""

from __future__ import annotations

import re

from conftest import PLAYBOOKS

from omni_host.evaluate.checks import catalog
from omni_host.plan.policy import defaults, spec

_VAR = re.compile(r"\bomni_[a-z0-9_]+\b")


def readers(option: dict) -> set[str]:
    lines = [str(d) for d in option.get("description", [])]
    found = next((line.split(":", 1)[1] for line in lines if line.startswith("Checks:")), "")
    return {c.strip() for c in found.split(",") if c.strip()}


def marked(option: dict, mark: str) -> bool:
    return mark in [str(d) for d in option.get("description", [])]


def playbook_vars(name: str) -> set[str]:
    """The omni_* variables a thin playbook reads: its own text and its roles' files (not the
    role omni, which holds the schema and defaults of them all)."""
    text = (PLAYBOOKS / name).read_text()
    roles = re.findall(r"omni\.host\.(omni_[a-z_]+)", text)
    files = [f for r in roles for f in sorted((PLAYBOOKS.parent / "roles" / r).rglob("*.yml"))]
    assert files or not roles, (name, roles)
    return set(_VAR.findall(text + "".join(f.read_text() for f in files))) & set(spec())


def test_every_spec_variable_names_its_readers() -> None:
    checks = set(catalog())
    for name, option in spec().items():
        assert readers(option) <= checks, name
        assert readers(option) or marked(option, "Remediation only."), name


def test_checks_with_a_playbook_and_the_playbook_read_the_same_variables() -> None:
    fixed = {cid: m.remediation.playbook for cid, m in catalog().items()
             if m.remediation.kind == "playbook" and m.remediation.playbook}
    assert {"swap.capacity", "containers.glibc-tunables", "packages.build-deps"} <= set(fixed)
    for check_id, playbook in fixed.items():
        read = {v for v, o in spec().items() if check_id in readers(o)
                and not marked(o, "Audit only.")}
        assert read <= playbook_vars(playbook), (check_id, playbook, read - playbook_vars(playbook))
    for playbook in {p.name for p in PLAYBOOKS.glob("*.yml")} - {"collect.yml", "site.yml"}:
        for var in playbook_vars(playbook):
            option = spec()[var]
            assert readers(option) or marked(option, "Remediation only."), (playbook, var)


def test_role_defaults_are_valid_spec_values() -> None:
    assert set(defaults()) <= set(spec())
    for name, value in defaults().items():
        assert spec()[name].get("default") == value, name
