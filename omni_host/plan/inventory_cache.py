"""A cache of what Ansible resolved from a static inventory, so that a repeated audit of the
same inventory does not pay ansible-core's import and parse (about 0.4 s) again.

Only what cannot change without a file changing is cached, and nothing secret:

* the sources are plain files and directories: no executable script, no inventory plugin
  config (a ``plugin:`` key), whose answers change without any file changing;
* no value is vaulted (``$ANSIBLE_VAULT``) and no value is templated (``{{``, ``{%``): a
  template may read the environment, a file or the clock;
* the key covers every file Ansible would read for these sources (the sources themselves and
  the ``group_vars/`` and ``host_vars/`` beside them, by path, size and modification time in
  nanoseconds), the ansible.cfg Ansible would read, every ``ANSIBLE_*`` environment variable,
  and the versions of omni-host and ansible-core. Any change gives another key: an entry is
  never updated, only superseded, and old entries are pruned.

Entries live in ``$XDG_CACHE_HOME/omni-host/inventory/`` (a 0700 directory, 0600 files),
written atomically. A corrupt entry is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from omni_host import __version__
from omni_host.documents import load_json
from omni_host.resources import atomic_write, cache_home

MAX_FILES = 2000  # a larger tree is not worth scanning on every run: no cache
KEEP_ENTRIES = 32
_DYNAMIC_MARKERS = (b"$ANSIBLE_VAULT", b"{{", b"{%", b"\nplugin:", b"\nplugin :")


def cache_dir() -> Path:
    return cache_home() / "inventory"


def _files(source: Path) -> list[Path] | None:
    """Every file Ansible reads for this source, or None when the source is not static."""
    roots = [source] if source.is_dir() else [source, source.parent / "group_vars",
                                              source.parent / "host_vars"]
    found: list[Path] = []
    for root in roots:
        if root.is_file():
            found.append(root)
        elif root.is_dir():
            for dirpath, _dirs, names in os.walk(root):
                found.extend(Path(dirpath) / n for n in names)
        if len(found) > MAX_FILES:
            return None
    return sorted(found)


def _static(path: Path, st: os.stat_result) -> bool:
    if st.st_mode & 0o111:  # an executable inventory script
        return False
    try:
        head = b"\n" + path.read_bytes()
    except OSError:
        return False
    return not any(marker in head for marker in _DYNAMIC_MARKERS)


def _ansible_version() -> str:
    """ansible-core's version, read from its release.py without importing it (nor
    importlib.metadata: 12 ms of every run)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("ansible")
    if spec is None or spec.origin is None:
        return "?"
    try:
        text = (Path(spec.origin).parent / "release.py").read_text(encoding="utf-8")
    except OSError:
        return "?"
    found = re.search(r"^__version__ = ['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return found.group(1) if found else "?"


def cache_key(sources: tuple[str, ...], config_file: str | None) -> str | None:
    """The key of this inventory's current state, or None when it must not be cached."""
    digest = hashlib.sha256()
    digest.update(f"omni-host {__version__}\nansible-core {_ansible_version()}\n".encode())
    for name in sorted(k for k in os.environ if k.startswith("ANSIBLE_")):
        digest.update(f"env {name}={os.environ[name]}\n".encode())
    for source in sources:
        if "," in source or not os.path.exists(source):
            return None
        files = _files(Path(source).resolve())
        if files is None:
            return None
        digest.update(f"source {Path(source).resolve()}\n".encode())
        for path in files:
            st = path.stat()
            if not _static(path, st):
                return None
            digest.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
    if config_file:
        st = os.stat(config_file)
        digest.update(f"cfg {os.path.abspath(config_file)} {st.st_size} {st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def read(key: str) -> dict[str, Any]:
    path = cache_dir() / f"{key}.json"
    try:
        doc = load_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("key") == key else {}


def write(key: str, doc: dict[str, Any]) -> None:
    """Atomically, privately; a cache that cannot be written is no error (it is a cache)."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.chmod(0o700)
        atomic_write(directory / f"{key}.json", json.dumps({**doc, "key": key}), 0o600)
        entries = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP_ENTRIES:]:
            old.unlink(missing_ok=True)
    except OSError:
        return
