"""Importing the SSH transport (paramiko, cryptography) at the least cost.

paramiko is the largest import of an audit, and two of its parts are nothing an audit uses:

* ``invoke`` (about 60 ms, ``unittest.mock`` among it), imported by ``paramiko.config`` only
  to run a ``Match exec`` line: where the SSH config can have none (no such line, no
  ``Include``), paramiko is imported without it;
* ``importlib.metadata`` (about 50 ms: ``email``, ``zipfile``, ``csv``...), imported by
  paramiko 5's ``__init__`` only to read its own version: during the import, a stand-in
  answers that one question from paramiko's own ``dist-info`` (anything else goes to the real
  module).

Both are undone once paramiko is in: anyone else imports ``invoke`` and ``importlib.metadata``
as ever. Standard library only: this module is imported before anything heavy.
"""

from __future__ import annotations

import re
import sys
import threading
import types
from pathlib import Path

_IMPORTING = threading.Lock()
_MATCH_EXEC = re.compile(r"^\s*(match\b.*\bexec\b|include\b)", re.IGNORECASE | re.MULTILINE)
_METADATA = "importlib.metadata"


def may_match_exec(ssh_config: Path | None) -> bool:
    """Whether an SSH config may need ``Match exec`` (a line of it, or an ``Include`` whose
    files are not read here); an unreadable file counts as may (paramiko reports it later)."""
    if ssh_config is None:
        return False
    try:
        text = ssh_config.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return _MATCH_EXEC.search(text) is not None


def dist_version(name: str, package_dir: Path) -> str | None:
    """The version in the one ``NAME-*.dist-info/METADATA`` beside an installed package (the
    directory that holds it), as ``importlib.metadata.version`` reads it; None when there is
    not exactly one or it names no version."""
    found = list(package_dir.parent.glob(f"{name}-*.dist-info"))
    if len(found) != 1:
        return None
    try:
        with (found[0] / "METADATA").open(encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    break  # the headers end at the first blank line
                key, _, value = line.partition(":")
                if key.lower() == "version":
                    return value.strip()
    except OSError:
        return None
    return None


class _VersionOnly(types.ModuleType):
    """Stands in for ``importlib.metadata`` while paramiko is imported (see the module's
    docstring)."""

    def __init__(self, package_dir: Path) -> None:
        super().__init__(_METADATA)
        self._package_dir = package_dir

    def version(self, name: str) -> str:
        found = dist_version(name, self._package_dir) if name == "paramiko" else None
        return found if found is not None else _real_metadata().version(name)

    def __getattr__(self, attr: str) -> object:
        return getattr(_real_metadata(), attr)


def _real_metadata() -> types.ModuleType:
    if isinstance(sys.modules.get(_METADATA), _VersionOnly):
        del sys.modules[_METADATA]
    import importlib

    return importlib.import_module(_METADATA)


def import_ssh(ssh_config: Path | None) -> None:
    """Import the SSH transport once (a second call returns at once; concurrent callers wait
    for the first)."""
    _import_lean("omni_host.collect.transport.ssh", ssh_config)


def import_paramiko(ssh_config: Path | None) -> None:
    """Import paramiko alone, as ``import_ssh`` does (for a measurement of paramiko alone:
    the benchmark's floor)."""
    _import_lean("paramiko", ssh_config)


def _import_lean(module: str, ssh_config: Path | None) -> None:
    with _IMPORTING:
        if module in sys.modules:
            return
        import importlib.util

        spec = importlib.util.find_spec("paramiko")
        stand_in = None
        if _METADATA not in sys.modules and spec is not None and spec.origin is not None:
            stand_in = _VersionOnly(Path(spec.origin).parent)
            sys.modules[_METADATA] = stand_in
        block = "invoke" not in sys.modules and not may_match_exec(ssh_config)
        if block:
            # A None entry makes `import invoke` raise ImportError.
            sys.modules["invoke"] = None  # type: ignore[assignment]
        try:
            importlib.import_module(module)
        finally:
            if block:
                del sys.modules["invoke"]
            if stand_in is not None and sys.modules.get(_METADATA) is stand_in:
                del sys.modules[_METADATA]
