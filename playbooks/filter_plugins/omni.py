"""Jinja filters for the omni-host playbooks (loaded by Ansible from this folder)."""

from __future__ import annotations

import copy
from typing import Any


def compose_with_env(doc: dict[str, Any], services: list[str], key: str, value: str) -> dict[str, Any]:
    """A copy of a compose document where ``services`` carry ``key=value`` in their
    environment, whichever form (list of ``K=V`` or mapping) the file uses."""
    new = copy.deepcopy(doc)
    for name in services:
        service = new["services"][name]
        env = service.get("environment")
        if isinstance(env, list):
            kept = [e for e in env if str(e).split("=", 1)[0] != key]
            service["environment"] = [*kept, f"{key}={value}"]
        else:
            service["environment"] = {**(env or {}), key: value}
    return new


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"omni_compose_with_env": compose_with_env}
