"""Each fix role's own argument spec, cut from the one schema.

``roles/omni/meta/argument_specs.yml`` stays the source of every ``omni_*`` variable. A fix
role (``omni_swap``, ``omni_tunables``...) declares exactly the schema variables its own files
read, and those of the ``omni`` task files it includes (``tasks_from: compose_read``), with the
schema's own text: ``ansible-doc -t role omni.host.omni_swap`` and AWX surveys show them, and
Ansible validates them when the role runs. ``tests/test_collection.py`` holds the files in step
with the tasks (``OMNI_UPDATE_GOLDEN=1`` rewrites them).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omni_host.plan.policy import ROLE, spec
from omni_host.resources import collection_path

_NAME = re.compile(r"\bomni_[a-z0-9_]+\b")
_TASKS_FROM = re.compile(r"^\s*tasks_from:\s*(\S+)\s*$", re.MULTILINE)
_READ = ("tasks", "handlers", "defaults", "templates", "vars")
HEADER = ("# Generated from roles/omni/meta/argument_specs.yml (the one schema) by\n"
          "# omni_host/remediate/role_specs.py: the omni_* variables this role reads, as the\n"
          "# schema documents them. Edit the schema, then run OMNI_UPDATE_GOLDEN=1 pytest\n"
          "# tests/test_collection.py.\n")


def fix_roles() -> list[str]:
    """The collection's roles other than the schema's own."""
    roles = collection_path("roles")
    return sorted(p.name for p in roles.iterdir() if p.is_dir() and f"roles/{p.name}" != ROLE)


def _texts(role: Path) -> list[str]:
    return [p.read_text(encoding="utf-8") for part in _READ if (role / part).is_dir()
            for p in sorted((role / part).rglob("*")) if p.is_file()]


def read_variables(role: str) -> list[str]:
    """The schema variables the role's files name, with the included ``omni`` task files."""
    texts = _texts(collection_path("roles", role))
    for name in sorted({m for t in texts for m in _TASKS_FROM.findall(t)}):
        texts.append(collection_path(ROLE, "tasks", f"{name}.yml").read_text(
            encoding="utf-8"))
    names = {m for t in texts for m in _NAME.findall(t)}
    return [name for name in spec() if name in names]  # the schema's order


def _description(role: str) -> str:
    meta = collection_path("roles", role, "meta", "main.yml").read_text(encoding="utf-8")
    found = re.search(r"^\s*description:\s*(.+)$", meta, re.MULTILINE)
    return found.group(1).strip() if found else role


def role_spec(role: str) -> dict[str, Any]:
    options = spec()
    names = read_variables(role)
    reads = "The omni_* variables this fix reads." if names else "This fix reads no omni_* variable."
    return {"argument_specs": {"main": {
        "short_description": _description(role),
        "description": [
            f"{reads} The whole schema is on the role omni.host.omni, which this role depends on:"
            " it validates every omni_* variable and gives the defaults.",
        ],
        "options": {name: options[name] for name in names},
    }}}


def role_spec_text(role: str) -> str:
    import yaml

    class Indented(yaml.SafeDumper):  # sequences indented under their key, as yamllint wants
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            super().increase_indent(flow, False)

    body = yaml.dump(role_spec(role), Dumper=Indented, sort_keys=False, allow_unicode=True,
                     width=96)
    return f"---\n{HEADER}{body}"


def spec_path(role: str) -> Path:
    return collection_path("roles", role, "meta", "argument_specs.yml")
