"""Waivers: an accepted finding, with who accepted it, why, and until when.

The file is versioned YAML::

    version: 1
    waivers:
      - check: swap.capacity          # a catalog id
        hosts: "lab-*"                # an Ansible-style host glob (default: all)
        justification: "lab boxes never load models beyond RAM"
        approver: ops-lead
        expires: 2027-03-31

A waived result still runs and keeps its status; it is shown as waived and does not fail the
audit. An expired waiver is flagged and not applied; a waiver whose check now passes is flagged
as stale.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_host.errors import InventoryError
from omni_host.resources import TooLarge, first_alias, read_bounded, user_dir

if TYPE_CHECKING:
    from omni_host.model import AppliedWaiver
    from omni_host.reports import HostReport

WAIVERS_SCHEMA = 1
_REQUIRED = ("check", "justification", "approver", "expires")


@dataclass(frozen=True)
class Waiver:
    check: str
    hosts: str
    justification: str
    approver: str
    expires: dt.date
    line: int

    def matches(self, host: str, check_id: str) -> bool:
        return check_id == self.check and fnmatch.fnmatchcase(host, self.hosts)

    def expired(self, today: dt.date) -> bool:
        return today > self.expires

    def applied(self) -> AppliedWaiver:
        """As a finding carries it."""
        from omni_host.model import AppliedWaiver  # not on a bench's way to its host

        return AppliedWaiver(self.check, self.hosts, self.justification, self.approver,
                             self.expires.isoformat(), self.line)


def _date(value: Any, where: str) -> dt.date:
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise InventoryError(f"{where}: expires {value!r} is not a date (YYYY-MM-DD)") from None


MAX_WAIVERS_BYTES = 1024 * 1024  # a waivers file is a few lines per accepted finding


def _read_text(path: Path) -> str:
    """The file's text, at most MAX_WAIVERS_BYTES of UTF-8; one line naming it otherwise."""
    try:
        data = read_bounded(path, MAX_WAIVERS_BYTES)
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read ({exc.strerror})") from exc
    except TooLarge:
        raise InventoryError(f"{path}: larger than {MAX_WAIVERS_BYTES // 1024} KiB: not a "
                             "waivers file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InventoryError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def default_waivers() -> Path | None:
    """$OMNI_HOST_WAIVERS, else $XDG_CONFIG_HOME/omni-host/waivers.yml when it exists. (Not
    beside the inventory: Ansible would read it as an inventory source.)"""
    if os.environ.get("OMNI_HOST_WAIVERS"):
        return Path(os.environ["OMNI_HOST_WAIVERS"])
    path = user_dir("config") / "omni-host" / "waivers.yml"
    return path if path.is_file() else None


def load_waivers(path: Path, known_checks: set[str]) -> tuple[Waiver, ...]:
    """Parse and validate; every error names the file and the line of the waiver. YAML
    aliases are refused: a waiver has no use for them, and nested ones expand without bound
    (an alias bomb ran for minutes into a MemoryError)."""
    text = _read_text(path)
    try:
        return _load_waivers(path, text, known_checks)
    except RecursionError:  # YAML's composer recurses once per level
        raise InventoryError(f"{path}: nested too deeply to be a waivers file") from None


def _load_waivers(path: Path, text: str, known_checks: set[str]) -> tuple[Waiver, ...]:
    import yaml  # only where there is a waivers file: a bench without one starts sooner

    try:
        node = yaml.compose(text)
        alias = first_alias(node)
        if alias is not None:
            raise InventoryError(f"{path}:{alias.start_mark.line + 1}: YAML aliases (*name) "
                                 "are not accepted in a waivers file")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        why = str(getattr(exc, "problem", None) or exc).splitlines()[0]  # one line, always
        raise InventoryError(f"{where}: invalid YAML: {why}") from exc
    try:
        doc = yaml.safe_load(text)
    except ValueError as exc:  # YAML reads 2027-13-01 as a date, and fails on it
        raise InventoryError(f"{path}: not a valid date ({exc}); write expires as "
                             "YYYY-MM-DD") from None
    except yaml.YAMLError as exc:  # composed, but not constructed: a bare '=' (YAML's value
        # key, a tag safe_load has no constructor for; found by the property test)
        why = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise InventoryError(f"{path}: invalid YAML: {why}") from None
    if not isinstance(doc, dict) or doc.get("version") != WAIVERS_SCHEMA:
        raise InventoryError(f"{path}: a waivers file starts with 'version: {WAIVERS_SCHEMA}'")
    entries = doc.get("waivers") or []
    seq = next((v for k, v in node.value if k.value == "waivers"), None) if node else None
    lines = [item.start_mark.line + 1 for item in seq.value] if seq is not None else []
    waivers = []
    for i, entry in enumerate(entries):
        where = f"{path}:{lines[i] if i < len(lines) else '?'}"
        if not isinstance(entry, dict):
            raise InventoryError(f"{where}: a waiver is a mapping")
        missing = [k for k in _REQUIRED if not str(entry.get(k) or "").strip()]
        if missing:
            raise InventoryError(f"{where}: waiver lacks {', '.join(missing)}")
        if entry["check"] not in known_checks:
            raise InventoryError(f"{where}: unknown check id {entry['check']!r}")
        hosts = entry.get("hosts") or "*"
        if not isinstance(hosts, str):
            raise InventoryError(f"{where}: hosts is one glob pattern (a string), got "
                                 f"{type(hosts).__name__}: write one waiver per pattern")
        waivers.append(Waiver(str(entry["check"]), hosts,
                              str(entry["justification"]).strip(), str(entry["approver"]),
                              _date(entry["expires"], where), lines[i] if i < len(lines) else 0))
    return tuple(waivers)


def apply_waivers(hosts: list[HostReport], waivers: tuple[Waiver, ...],
                  today: dt.date) -> tuple[list[HostReport], list[str]]:
    """Results matched by a live waiver carry it (their status is unchanged); returns the
    hosts and one note per expired waiver and per stale waiver (its check passes now)."""
    import dataclasses

    notes: list[str] = []
    out: list[HostReport] = []
    for host in hosts:
        results = []
        for r in host.results:
            match = next((w for w in waivers if w.matches(host.host, r.id)), None)
            if match is None:
                results.append(r)
                continue
            where = f"{host.host}: {r.id} (waivers line {match.line})"
            if match.expired(today):
                notes.append(f"{where}: EXPIRED on {match.expires.isoformat()}, not applied")
                results.append(r)
            elif r.status.value in ("pass", "skip"):
                notes.append(f"{where}: STALE: the check is {r.status.value} now; remove the waiver")
                results.append(r)
            else:
                results.append(dataclasses.replace(r, waiver=match.applied()))
        out.append(dataclasses.replace(host, results=tuple(results)))
    return out, notes
