"""Text from hosts, inventories and files made safe for where it is shown, by one function per
destination. A host name is whatever a dynamic inventory says (Ansible accepts control
characters in it); a host's error line is whatever the host printed. Raw, an escape sequence
retitles or clears the operator's terminal and a newline forges a line; in XML 1.0 a control
character makes the whole JUnit file invalid (CI then loses every host).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Any

# C0 controls (tab kept), DEL, C1 controls, and the bidi overrides and isolates that reorder
# what follows them on screen.
_TERMINAL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What XML 1.0 cannot hold at all, escaped or not (tab, newline and CR it can).
_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """One line for a terminal: controls and bidi overrides written as escapes."""
    return _TERMINAL.sub(_escape, text)


def xml_safe(text: str) -> str:
    """Text XML 1.0 can hold: the characters it cannot, written as escapes."""
    return _XML.sub(_escape, text)


def each_string(value: Any, fix: Any, *, keys: bool = True, unstored: bool = False) -> Any:
    """``value`` (a report, any of its parts, or their JSON form) with ``fix`` applied to every
    string in it, dict keys too (``keys``); enum members (statuses, outcomes) are words of ours,
    kept. A field that is never stored (a host report's raw bundle) is kept as it is, unless
    ``unstored``: no view shows it, but a secret must leave it too (``reports.scrub``)."""
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        return fix(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{
            f.name: each_string(getattr(value, f.name), fix, keys=keys, unstored=unstored)
            for f in dataclasses.fields(value)
            if f.init and (unstored or f.metadata.get("stored", True))})
    if isinstance(value, dict):
        return {fix(k) if keys and isinstance(k, str) else k:
                each_string(v, fix, keys=keys, unstored=unstored) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(each_string(v, fix, keys=keys, unstored=unstored) for v in value)
    return value
