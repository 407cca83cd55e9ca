"""Where the shipped data lives: ``checks/``, ``inventory/`` and ``playbooks/``.

In a wheel they are packaged under ``omni_host/_data``; in a source checkout (editable install)
they are the repository's own top-level folders, so there is one copy of each.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_path(name: str) -> Path:
    packaged = _PACKAGE / "_data" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / name


def resources_text(rel: str) -> str:
    """A text file of the omni_host package (e.g. a helper script sent to hosts)."""
    return (_PACKAGE / rel).read_text(encoding="utf-8")
