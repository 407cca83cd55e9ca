"""Jinja filters for the omni-host playbooks (loaded by Ansible from this folder)."""

from __future__ import annotations

import posixpath
from typing import Any

MARK = "# Written by omni-host"
DEFAULT_NAMES = {"compose.yaml": "compose.override.yaml", "compose.yml": "compose.override.yml",
                 "docker-compose.yml": "docker-compose.override.yml",
                 "docker-compose.yaml": "docker-compose.override.yaml"}


def compose_override_path(compose_file: str) -> str:
    """The override file Compose loads by itself beside a default-named file
    (compose.override.yaml, docker-compose.override.yml); for any other name, a file of ours
    that the operator passes with a second -f."""
    folder, name = posixpath.split(compose_file)
    stem = name.rsplit(".", 1)[0]
    return posixpath.join(folder, DEFAULT_NAMES.get(name, f"{stem}.omni-host.override.yml"))


def compose_override(doc: Any, services: list[str], key: str, value: str) -> str:
    """The override file's text: ``key=value`` in the environment of ``services`` (Compose
    merges environment entries by name with the main file's, whichever form it uses), under
    the main file's ``version`` when it has one (docker-compose v1 refuses a mismatch)."""
    import yaml

    body: dict[str, Any] = {}
    if isinstance(doc, dict) and doc.get("version") is not None:
        body["version"] = str(doc["version"])
    # plain str: Ansible hands filters its own (tagged) string types, which YAML cannot dump
    body["services"] = {str(name): {"environment": {str(key): str(value)}} for name in services}
    header = (f"{MARK} (containers.glibc-tunables, F-010): GLIBC_TUNABLES for the services that\n"
              "# need it, merged by Compose with the main file. Re-run the playbook to change it.\n")
    return header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def yaml_or_none(text: str) -> Any:
    """The parsed document, or None where the text is not YAML: a task can then fail with its
    own message, never with a parser's that quotes the (possibly secret) text."""
    import yaml

    try:
        return yaml.safe_load(str(text))
    except yaml.YAMLError:
        return None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"omni_yaml_or_none": yaml_or_none, "omni_compose_override": compose_override,
                "omni_compose_override_path": compose_override_path}
