"""Disks, packages, kernel log and models: ``df -P -k``, a dpkg-query loop, NVRM Xid lines,
and the model helper's JSON (sizes and GGUF headers read on the host).

Lessons F-001 (a full disk stopped a build), F-015 (pkg-config and libhwloc-dev missing),
F-020/F-022 (a model larger than RAM+swap), F-008 (an architecture llama.cpp did not know).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt

_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+),?\s*(.*)")
_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")  # dmesg's seconds since boot
_UPTIME = re.compile(r"^uptime (\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class DiskUsage:
    path: str
    mount: str
    size_kib: int
    avail_kib: int
    error: str | None = None  # df's own message, e.g. for a path that does not exist


@dataclass(frozen=True)
class ModelFile:
    path: str
    error: str | None
    size_bytes: int
    files: int
    architecture: str | None


@dataclass(frozen=True)
class ModelFacts:
    models: tuple[ModelFile, ...]
    binaries: dict[str, dict[str, bool]]  # llama.cpp binary -> {architecture: known to it}
    binary_errors: dict[str, str]


def parse_df(text: str) -> dict[str, DiskUsage]:
    """The helper prints ``== <path>`` before each ``df -P -k <path>``."""
    out = {}
    for block in text.split("== ")[1:]:
        path, _, body = block.partition("\n")
        lines = [ln for ln in body.splitlines() if ln.strip()]
        if lines and lines[0].startswith("df: "):
            out[path] = DiskUsage(path, "", 0, 0, lines[0][4:])
            continue
        if len(lines) < 2 or not lines[0].startswith("Filesystem"):
            raise ParseError(f"unexpected df output for {path}: {excerpt(body, 80)!r}")
        parts = lines[-1].split()
        try:
            out[path] = DiskUsage(path, parts[5], int(parts[1]), int(parts[3]))
        except (IndexError, ValueError) as exc:
            raise ParseError(f"unexpected df line for {path}: {lines[-1]!r}") from exc
    if not out:
        raise ParseError(f"no df section: {excerpt(text, 80)!r}")
    return out


def parse_dpkg(text: str) -> dict[str, bool]:
    """Installed or not, by package name (and by ``name:arch``). Two forms: one
    ``dpkg-query -W`` after a ``== dpkg-query -W`` header (``<name> <binary:Package>
    <status>``; a package dpkg does not know prints nothing), or, in older bundles, a
    ``<package> <status>`` line per package asked."""
    lines = text.splitlines()
    out: dict[str, bool] = {}
    if lines and lines[0].strip() == "== dpkg-query -W":
        for line in lines[1:]:
            fields = line.split()
            if len(fields) != 3:
                raise ParseError(f"dpkg-query line is not <name> <name:arch> <status>: "
                                 f"{excerpt(line, 80)!r}")
            name, binary, status = fields
            installed = status == "installed"
            out[name] = out.get(name, False) or installed  # any architecture installed
            out[binary] = installed
        return out
    for line in lines:
        name, _, status = line.strip().partition(" ")
        if name:
            out[name] = status.strip() == "installed"
    if not out:
        raise ParseError("dpkg-query loop printed nothing")
    return out


@dataclass(frozen=True)
class XidEvent:
    pci: str
    code: int
    detail: str  # the driver's words after the code (pid, name, what happened)
    at_s: float | None  # seconds since boot (dmesg's stamp); None in other log formats


@dataclass(frozen=True)
class XidLog:
    uptime_s: float | None  # the probe's first line; None from collectors before it
    events: tuple[XidEvent, ...]

    def age_h(self, event: XidEvent) -> float | None:
        if self.uptime_s is None or event.at_s is None:
            return None
        return max(0.0, (self.uptime_s - event.at_s) / 3600)


def parse_xid(text: str) -> XidLog:
    """NVRM Xid events from the kernel log lines the probe kept, after its ``uptime S`` line:
    dmesg's own lines (``[  123.4] NVRM: Xid (PCI:...): 79, ...``), whose stamp dates them;
    lines of other formats (``dmesg -T``, the journal) count, undated."""
    uptime = None
    events = []
    for line in text.splitlines():
        if uptime is None and (up := _UPTIME.match(line)):
            uptime = float(up.group(1))
            continue
        found = _XID.search(line)
        if found:
            stamp = _STAMP.match(line)
            events.append(XidEvent(found.group(1), int(found.group(2)), found.group(3).strip(),
                                   float(stamp.group(1)) if stamp else None))
    return XidLog(uptime, tuple(events))


def parse_models(text: str) -> ModelFacts:
    try:
        doc = load_json(text)
        models = tuple(ModelFile(m["path"], m.get("error"), int(m.get("size_bytes", 0)),
                                 int(m.get("files", 0)), m.get("architecture"))
                       for m in doc["models"])
        return ModelFacts(models, {b["path"]: dict(b.get("known", {})) for b in doc["binaries"]},
                          {b["path"]: b["error"] for b in doc["binaries"] if b.get("error")})
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"model helper output is not the expected JSON: {exc}") from exc
