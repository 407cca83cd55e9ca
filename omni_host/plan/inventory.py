"""Ansible YAML inventories: groups, children, ``group_vars/`` and ``host_vars/``, patterns.

The expected state lives in these variables (see ``policy.py``), read here by the audit and by
``ansible-playbook`` for remediation: one value, two readers.

Variable precedence, lowest first (a simplification of Ansible's that agrees with it for
inventories without playbook-level vars): for each group from ``all`` down to the deepest child
(ties by name), the group's inline ``vars`` then its ``group_vars/<group>`` file; then the
host's inline vars, then ``host_vars/<host>``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from omni_host.errors import InventoryError

_RANGE = re.compile(r"\[(\d+):(\d+)\]")
_GROUP_KEYS = frozenset({"hosts", "vars", "children"})


@dataclass(frozen=True)
class InventoryHost:
    name: str
    vars: dict[str, Any]
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Inventory:
    source: str
    hosts: dict[str, InventoryHost]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def select(self, pattern: str) -> list[InventoryHost]:
        return [self.hosts[name] for name in select_names(self, pattern)]


def _load_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InventoryError(f"{where}: invalid YAML: {problem}") from exc


def _expand(pattern: str) -> list[str]:
    """Ansible's numeric host ranges: ``gpu[01:04]`` -> gpu01 .. gpu04."""
    match = _RANGE.search(pattern)
    if not match:
        return [pattern]
    lo, hi = match.group(1), match.group(2)
    width = len(lo) if lo.startswith("0") else 0
    names = [pattern[: match.start()] + str(i).zfill(width) + pattern[match.end():]
             for i in range(int(lo), int(hi) + 1)]
    return [n for name in names for n in _expand(name)]


class _Builder:
    def __init__(self, origin: Path) -> None:
        self.origin = origin
        self.host_order: list[str] = []
        self.host_inline: dict[str, dict[str, Any]] = {}
        self.host_groups: dict[str, set[str]] = {}
        self.group_vars: dict[str, dict[str, Any]] = {"all": {}}
        self.group_depth: dict[str, int] = {"all": 0}
        self.group_parents: dict[str, set[str]] = {"all": set()}

    def _fail(self, where: str, msg: str) -> InventoryError:
        return InventoryError(f"{self.origin}: {where}: {msg}")

    def group(self, name: str, node: Any, parent: str | None, depth: int) -> None:
        if node is None:
            node = {}
        if not isinstance(node, dict):
            raise self._fail(f"group {name!r}", "must be a mapping with hosts/vars/children")
        unknown = set(node) - _GROUP_KEYS
        if unknown:
            raise self._fail(f"group {name!r}", f"unknown key(s) {sorted(unknown)} "
                             "(expected hosts, vars, children)")
        self.group_vars.setdefault(name, {}).update(self._mapping(node.get("vars"), f"{name}.vars"))
        self.group_depth[name] = max(self.group_depth.get(name, 0), depth)
        self.group_parents.setdefault(name, set())
        if parent:
            self.group_parents[name].add(parent)
        hosts = node.get("hosts") or {}
        if not isinstance(hosts, dict):
            raise self._fail(f"group {name!r}", "hosts must be a mapping of host names")
        for pattern, hvars in hosts.items():
            for host in _expand(str(pattern)):
                if host not in self.host_inline:
                    self.host_order.append(host)
                    self.host_inline[host] = {}
                    self.host_groups[host] = set()
                self.host_inline[host].update(self._mapping(hvars, f"host {host}"))
                self.host_groups[host].add(name)
        children = node.get("children") or {}
        if not isinstance(children, dict):
            raise self._fail(f"group {name!r}", "children must be a mapping of group names")
        for child, child_node in children.items():
            self.group(str(child), child_node, name, depth + 1)

    def _mapping(self, value: Any, where: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._fail(where, "vars must be a mapping")
        return dict(value)

    def ancestors(self, group: str) -> set[str]:
        seen: set[str] = set()
        todo = [group]
        while todo:
            g = todo.pop()
            if g not in seen:
                seen.add(g)
                todo.extend(self.group_parents.get(g, ()))
        return seen | {"all"}


def _vars_file(directory: Path, name: str) -> dict[str, Any]:
    """``group_vars/NAME.yml``, ``NAME.yaml``, ``NAME`` or a directory ``NAME/`` of such files."""
    merged: dict[str, Any] = {}
    candidates = [directory / f"{name}{ext}" for ext in (".yml", ".yaml", "")]
    if (directory / name).is_dir():
        candidates = sorted(p for p in (directory / name).iterdir()
                            if p.suffix in (".yml", ".yaml"))
    for path in candidates:
        if path.is_file():
            data = _load_yaml(path)
            if data is None:
                continue
            if not isinstance(data, dict):
                raise InventoryError(f"{path}: must be a mapping of variables")
            merged.update(data)
    return merged


def load_inventory(path: Path) -> Inventory:
    """Read an inventory file, or a directory of them with its group_vars/ and host_vars/."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".yml", ".yaml"))
        base = path
        if not files:
            raise InventoryError(f"{path}: no inventory file (*.yml) in this directory")
    elif path.is_file():
        files, base = [path], path.parent
    else:
        raise InventoryError(f"{path}: no such inventory")
    builder = _Builder(path)
    for file in files:
        data = _load_yaml(file)
        if data is None:
            continue
        if not isinstance(data, dict):
            raise InventoryError(f"{file}: an inventory is a mapping of groups (e.g. 'all:')")
        builder.origin = file
        for group, node in data.items():
            builder.group(str(group), node, None if group == "all" else "all",
                          0 if group == "all" else 1)
    ordered_groups = sorted(builder.group_vars, key=lambda g: (builder.group_depth[g], g))
    file_group_vars = {g: _vars_file(base / "group_vars", g) for g in ordered_groups}
    hosts: dict[str, InventoryHost] = {}
    for host in builder.host_order:
        groups: set[str] = set()
        for g in builder.host_groups[host]:
            groups |= builder.ancestors(g)
        merged: dict[str, Any] = {}
        for g in ordered_groups:
            if g in groups:
                merged.update(builder.group_vars[g])
                merged.update(file_group_vars[g])
        merged.update(builder.host_inline[host])
        merged.update(_vars_file(base / "host_vars", host))
        hosts[host] = InventoryHost(host, merged, tuple(g for g in ordered_groups if g in groups))
    members = {g: tuple(h for h in builder.host_order if g in hosts[h].groups)
               for g in ordered_groups}
    return Inventory(str(path), hosts, members)


def select_names(inv: Inventory, pattern: str) -> list[str]:
    """Ansible host patterns: ``all``/``*``, a group, a host, globs, ``a:b`` or ``a,b`` (union),
    ``a:&b`` (intersection), ``a:!b`` (exclusion), ``~regex``."""
    selected: set[str] = set()
    terms = [t for t in re.split(r"[,:]", pattern) if t.strip()]
    if not terms:
        raise InventoryError("empty host pattern")
    for raw in terms:
        term = raw.strip()
        op = term[0] if term[0] in "!&" else ""
        names = _match(inv, term[len(op):])
        if not names and op != "!":
            raise InventoryError(f"host pattern {term[len(op):]!r} matches no host or group "
                                 f"in {inv.source}")
        if op == "!":
            selected -= names
        elif op == "&":
            selected &= names
        else:
            selected |= names
    return [h for h in inv.hosts if h in selected]


def _match(inv: Inventory, term: str) -> set[str]:
    if term in ("all", "*"):
        return set(inv.hosts)
    if term in inv.groups:
        return set(inv.groups[term])
    if term in inv.hosts:
        return {term}
    if term.startswith("~"):
        rx = re.compile(term[1:])
        names = {h for h in inv.hosts if rx.search(h)}
        return names | {h for g, hs in inv.groups.items() if rx.search(g) for h in hs}
    names = {h for h in inv.hosts if fnmatch.fnmatchcase(h, term)}
    return names | {h for g, hs in inv.groups.items() if fnmatch.fnmatchcase(g, term) for h in hs}
