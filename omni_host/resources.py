"""Where the shipped data lives: ``checks/``, ``inventory/`` and the Ansible collection
``ansible_collections/omni/host`` (roles, thin playbooks, plugins).

In a wheel ``checks`` and ``inventory`` are packaged under ``omni_host/_data`` and the
collection beside the package, in ``site-packages/ansible_collections`` (where Ansible finds
pip-installed collections); in a source checkout (editable install) all three are the
repository's own top-level folders, so there is one copy of each.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parent


def data_path(name: str) -> Path:
    packaged = _PACKAGE / "_data" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / name


def resources_text(rel: str) -> str:
    """A text file of the omni_host package (e.g. a helper script sent to hosts)."""
    return (_PACKAGE / rel).read_text(encoding="utf-8")


def collection_path(*parts: str) -> Path:
    """A path inside the omni.host collection (``playbooks/swap.yml``, ``roles/omni``...)."""
    return collections_root().joinpath("ansible_collections", "omni", "host", *parts)


def collections_root() -> Path:
    """The folder to put on ANSIBLE_COLLECTIONS_PATH so that Ansible finds omni.host: the one
    that holds the package (site-packages, or the source checkout)."""
    return _PACKAGE.parent


def read_yaml(path: Path) -> Any:
    """A YAML file omni-host ships (the check catalog, the role's argument spec and defaults),
    through PyYAML's libyaml safe loader where it has one: the same results as
    ``yaml.safe_load``, about 8x faster on the catalog and the argument spec (35 ms of every
    run with the pure-Python loader). Parsed once per change of the file: its JSON form is
    kept in the user's cache (``data_cache``), so that a run imports no YAML parser for it
    (PyYAML's import and the two parses cost 25-30 ms on the lent H100 before a bench's
    probes could start). A value JSON does not keep as it is (integer keys) is not kept.
    An entry is the digest of its JSON text, a newline, then the text: one that does not read
    back as exactly what was written (edited, truncated, another shape) is parsed again from
    its source, never handed on (a list where a mapping belongs raised on every run)."""
    import hashlib
    import json

    from omni_host import __version__
    from omni_host.documents import load_json

    st = path.stat()
    key = hashlib.sha256(f"{__version__}\n{path}\n{st.st_size}\n{st.st_mtime_ns}".encode())
    kept = data_cache() / f"{key.hexdigest()[:32]}.json"
    trusted = not_own(kept.parent) is None  # a cache another account could write: not used
    if trusted:
        with contextlib.suppress(OSError, ValueError):
            digest, _, entry = read_bounded(kept, 16 * 1024 * 1024).partition(b"\n")
            if digest.decode("ascii") == hashlib.sha256(entry).hexdigest():
                return load_json(entry)
    value = load_yaml(path.read_text(encoding="utf-8"))
    if not trusted:
        return value
    with contextlib.suppress(OSError, ValueError, TypeError):
        text = json.dumps(value)
        if json.loads(text) == value:
            kept.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic_write(kept, f"{hashlib.sha256(text.encode()).hexdigest()}\n{text}", 0o600)
    return value


# The XDG base directories omni-host keeps things in: kind -> (its variable, its default)
XDG = {"cache": ("XDG_CACHE_HOME", ".cache"), "data": ("XDG_DATA_HOME", ".local/share"),
       "config": ("XDG_CONFIG_HOME", ".config"), "state": ("XDG_STATE_HOME", ".local/state")}


def user_dir(kind: str) -> Path:
    """The user's XDG base directory of ``kind`` (cache, data, config, state), the one
    spelling of it: its variable where that is absolute, else its default under the home. A
    relative one is ignored, as the spec says (the store, the digest key and the waivers read
    it as is: a relative $XDG_DATA_HOME put the store under the working directory).
    platformdirs was weighed for this: on Linux it reads the same variables, on a macOS
    workstation it would move an existing store to ~/Library; these four lines do not."""
    name, default = XDG[kind]
    value = os.environ.get(name) or ""
    return Path(value) if value.startswith("/") else Path(os.path.expanduser("~")) / default


def cache_home() -> Path:
    """omni-host's folder in the user's cache (``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    return user_dir("cache") / "omni-host"


def data_cache() -> Path:
    """Where the parsed forms of the shipped YAML files are kept (a cache: any entry may go)."""
    return cache_home() / "data"


def load_yaml(text: str) -> Any:
    """YAML text, as ``yaml.safe_load`` reads it (the C implementation where available)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


class TooLarge(ValueError):
    """A file past the size its reader accepts (it is not what the reader expects)."""


def read_json(path: Path | str, cap: int, *, known: bool = False) -> Any:
    """The JSON document in file ``path`` through the bounded reader (``documents.load_json``;
    ``known``: passed by it before and unchanged since): at most ``cap`` bytes are read
    (TooLarge past them), never more held in memory; OSError as ``open`` raises it,
    DocumentError (a ValueError) past the reader's limits."""
    from omni_host.documents import load_json

    return load_json(read_bounded(path, cap), max_bytes=cap, known=known)


def read_bounded(path: Path | str, cap: int) -> bytes:
    """At most ``cap`` bytes of a file; TooLarge past them (never more held in memory). An
    untrusted file (a bundle, a waivers file, ``-e @file``) cannot make a reader hold more."""
    with open(path, "rb") as handle:
        data = handle.read(cap + 1)
    if len(data) > cap:
        raise TooLarge(f"larger than {cap:,} bytes")
    return data


@contextlib.contextmanager
def atomic_path(path: Path, mode: int = 0o644) -> Iterator[Path]:
    """A new file beside ``path`` (``.NAME.PID.RANDOM.tmp``, created with ``mode`` under the
    umask) for the block to write; renamed over ``path`` when the block ends, removed when it
    fails. A reader (a textfile collector, cron, Ansible) never sees half a file. The one
    atomic write of the code base."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(3).hex()}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """``data`` (text as UTF-8) into ``path`` through ``atomic_path``."""
    with atomic_path(path, mode) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def first_alias(node: Any) -> Any:
    """The first alias (``*name``) of a composed YAML document (``yaml.compose``), walked
    without expanding anything; None when it has none. Data files we read (waivers, ``-e``
    values) refuse aliases: nested ones expand without bound (an alias bomb ran for minutes
    into a MemoryError)."""
    import yaml

    seen: set[int] = set()
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        if id(current) in seen:
            return current  # a node reached twice is an alias
        seen.add(id(current))
        if isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            for key, value in current.value:
                stack.extend((key, value))
    return None


def not_own(path: Path) -> str | None:
    """Why ``path`` is not this user's own (another owner, writable by others), or None (also
    when it does not exist): a store of reports another account could plant in is not read."""
    import stat

    try:
        info = path.stat()
    except OSError:
        return None
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not {os.geteuid()}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by others"
    return None
