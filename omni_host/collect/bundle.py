"""Bundles: the raw outputs of one host's collection, kept so any audit can be replayed.

On disk a bundle is a directory (or the same tree in a ``.tar.gz``)::

    <host>/manifest.json          schema, host, when, how, and one record per probe
    <host>/probes/<id>.stdout     raw standard output of the probe
    <host>/probes/<id>.stderr     raw standard error (only when not empty)

``docs/bundle-format.md`` documents the manifest fields.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import tarfile
import zlib
from pathlib import Path
from typing import Any

from omni_host.documents import load_json
from omni_host.errors import BundleError, TransportError
from omni_host.model import Bundle, CommandResult
from omni_host.plan.storable import storable_argv
from omni_host.remote.collector import MARKER
from omni_host.resources import TooLarge, atomic_path, read_bounded

BUNDLE_SCHEMA = 1
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


MAX_TIMESTAMP = 253402300800.0  # 10000-01-01T00:00:00Z


def safe_name(name: str) -> str:
    """A host or probe name made safe as one path component, one to one: a name that had to
    change carries a digest of the original, so ``lab one`` and ``lab_one`` (both names
    Ansible accepts) never share a bundle."""
    cleaned = _SAFE.sub("_", name).lstrip(".")
    if cleaned == name:
        return name
    return f"{cleaned or '_'}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def private_write(path: Path, data: bytes) -> None:
    """Write a file only its owner can read (evidence from production hosts)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT: set it


def bundle_files(bundle: Bundle) -> dict[str, bytes]:
    """Relative path -> content, the one description both writers use."""
    records = []
    files: dict[str, bytes] = {}
    for probe_id, res in bundle.results.items():
        stem = f"probes/{safe_name(probe_id)}"
        record = {"id": probe_id, "argv": list(res.argv), "status": res.status,
                  "exit_code": res.exit_code, "duration_s": res.duration_s,
                  "reason": res.reason, "stdout": f"{stem}.stdout", "stderr": None}
        files[f"{stem}.stdout"] = res.stdout.encode()
        if res.stderr:
            record["stderr"] = f"{stem}.stderr"
            files[f"{stem}.stderr"] = res.stderr.encode()
        records.append(record)
    manifest = {"schema_version": BUNDLE_SCHEMA, "kind": "omni-host-bundle", "host": bundle.host,
                "collected_at": bundle.collected_at, "transport": bundle.transport,
                "collector": bundle.meta, "policy": bundle.policy, "probes": records}
    files["manifest.json"] = json.dumps(manifest, indent=2).encode()
    return files


def write_bundle_dir(bundle: Bundle, parent: Path) -> Path:
    """``parent/<host>/``: directories 0700, files 0600 (evidence of production hosts)."""
    root = parent / safe_name(bundle.host)
    for directory in (parent, root, root / "probes"):
        if not directory.exists():  # never re-permission a directory we did not create
            directory.mkdir(parents=True, mode=0o700)
            directory.chmod(0o700)
    for rel, data in bundle_files(bundle).items():
        private_write(root / rel, data)
    return root


def write_archive(bundles: list[Bundle], path: Path) -> Path:
    """All bundles in one .tar.gz, written beside the target and renamed into place."""
    with atomic_path(path, 0o600) as tmp, tarfile.open(tmp, "w:gz") as tar:
        for bundle in bundles:
            top = safe_name(bundle.host)
            for rel, data in sorted(bundle_files(bundle).items()):
                info = tarfile.TarInfo(f"{top}/{rel}")
                info.size, info.mtime = len(data), int(bundle.collected_at)
                tar.addfile(info, io.BytesIO(data))
    return path


# Bundles are untrusted input (collected elsewhere, mailed, stored): every read stays inside
# the bundle, and sizes are capped while reading, so a decompression bomb is refused at its
# first oversized member, before it is inflated.
MAX_FILE_BYTES = 16 * 1024 * 1024  # one probe's output (a real one is at most a few MB)
MAX_BUNDLE_BYTES = 64 * 1024 * 1024  # one host's files together
MAX_MEMBERS = 20_000  # files in one archive
_MEMBER = re.compile(r"^probes/[A-Za-z0-9_][A-Za-z0-9._-]*\.(stdout|stderr)$")


def _member_path(rel: Any, origin: str) -> str:
    """A manifest's file reference, refused unless it is one of the bundle's own files."""
    if not isinstance(rel, str) or not _MEMBER.match(rel) or ".." in rel:
        raise BundleError(f"{origin}: manifest names a file outside the bundle's probes/ "
                          f"({str(rel)[:80]!r})")
    return rel


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _record(rec: Any, read: Any, origin: str) -> CommandResult:
    if not isinstance(rec, dict):
        raise BundleError(f"{origin}: a probe record is not a mapping")
    argv = rec.get("argv")
    if not isinstance(rec.get("id"), str) or not isinstance(argv, list) or \
            not all(isinstance(a, str) for a in argv) or not isinstance(rec.get("status"), str):
        raise BundleError(f"{origin}: probe record {str(rec.get('id'))[:40]!r} lacks id, argv "
                          "or status of the right type")
    code = rec.get("exit_code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
        raise BundleError(f"{origin}: probe {rec['id']!r}: exit_code is not an integer")
    stdout = _text(read(_member_path(rec.get("stdout"), origin)))
    stderr = _text(read(_member_path(rec["stderr"], origin))) if rec.get("stderr") else ""
    try:
        duration = float(rec.get("duration_s", 0.0))
    except (TypeError, ValueError):
        raise BundleError(f"{origin}: probe {rec['id']!r}: duration_s is not a number") from None
    return CommandResult(rec["id"], tuple(argv), rec["status"], code, stdout, stderr, duration,
                         str(rec.get("reason") or ""))


def _from_files(read: Any, origin: str) -> Bundle:
    try:
        manifest = load_json(read("manifest.json"))
    except (KeyError, FileNotFoundError) as exc:
        raise BundleError(f"{origin}: no manifest.json") from exc
    except ValueError as exc:
        raise BundleError(f"{origin}: manifest.json is not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("kind") != "omni-host-bundle":
        raise BundleError(f"{origin}: not an omni-host bundle")
    if manifest.get("schema_version") != BUNDLE_SCHEMA:
        raise BundleError(f"{origin}: bundle schema {manifest.get('schema_version')!r} is not "
                          f"supported (this omni-host reads schema {BUNDLE_SCHEMA})")
    host, probes = manifest.get("host"), manifest.get("probes")
    if not isinstance(host, str) or not host or not isinstance(probes, list):
        raise BundleError(f"{origin}: manifest needs a host name (text) and a list of probes")
    collector, policy = manifest.get("collector") or {}, manifest.get("policy")
    if not isinstance(collector, dict) or not (policy is None or isinstance(policy, dict)):
        raise BundleError(f"{origin}: manifest's collector or policy is not a mapping")
    if policy is not None:
        _check_policy(policy, origin)
    try:
        collected_at = float(manifest["collected_at"])
    except (KeyError, TypeError, ValueError):
        raise BundleError(f"{origin}: manifest's collected_at is not a time") from None
    # NaN or infinity made the report's JSON invalid; 1e300 or -1e12 is no date a renderer
    # can print (an OverflowError in the JUnit view): years 1970 to 9999 only
    if not math.isfinite(collected_at) or not 0 <= collected_at < MAX_TIMESTAMP:
        raise BundleError(f"{origin}: manifest's collected_at is not a time")
    results = {}
    try:
        for rec in probes:
            result = _record(rec, read, origin)
            results[result.probe_id] = result
    except (KeyError, FileNotFoundError) as exc:
        raise BundleError(f"{origin}: incomplete bundle (missing {exc})") from exc
    return Bundle(host, collected_at, str(manifest.get("transport", "?")), collector, results,
                  policy)


def _check_policy(policy: dict[str, Any], origin: str) -> None:
    """The recorded expected state: omni_* values and their origins, both mappings. A bundle
    whose record is damaged is refused, never judged under another policy in its place."""
    values, origins = policy.get("values"), policy.get("origins", {})
    if not isinstance(values, dict) or not isinstance(origins, dict):
        raise BundleError(f"{origin}: manifest's policy needs 'values' and 'origins' mappings")
    bad = next((k for k in values if not isinstance(k, str) or not k.startswith("omni_")), None)
    if bad is not None:
        raise BundleError(f"{origin}: manifest's policy records {bad!r}, not an omni_* variable")
    if not all(isinstance(v, str) for v in origins.values()):
        raise BundleError(f"{origin}: manifest's policy origins must be text")


def _dir_reader(root: Path) -> Any:
    base = root.resolve()
    used = [0]

    def read(rel: str) -> bytes:
        path = root / rel
        if path.is_symlink() or not path.resolve().is_relative_to(base):
            raise BundleError(f"{root}: {rel} points outside the bundle")
        size = path.stat().st_size
        used[0] += size
        if size > MAX_FILE_BYTES or used[0] > MAX_BUNDLE_BYTES:
            raise BundleError(f"{root}: {rel} is {size} bytes: over the limit of "
                              f"{MAX_FILE_BYTES} a file, {MAX_BUNDLE_BYTES} a bundle")
        return path.read_bytes()
    return read


def _tar_members(tar: tarfile.TarFile, path: Path) -> dict[str, tarfile.TarInfo]:
    """The archive's regular files, its caps enforced member by member (before inflating)."""
    members: dict[str, tarfile.TarInfo] = {}
    per_top: dict[str, int] = {}
    for count, member in enumerate(tar, start=1):
        if count > MAX_MEMBERS:
            raise BundleError(f"{path}: more than {MAX_MEMBERS} members: not a bundle archive")
        if not member.isfile():
            continue
        top = member.name.split("/", 1)[0]
        per_top[top] = per_top.get(top, 0) + member.size
        if member.size > MAX_FILE_BYTES or per_top[top] > MAX_BUNDLE_BYTES:
            raise BundleError(f"{path}: {member.name} would inflate to {member.size} bytes: over "
                              f"the limit of {MAX_FILE_BYTES} a file, {MAX_BUNDLE_BYTES} a host")
        members[member.name] = member
    return members


def _read_tar(path: Path) -> list[Bundle]:
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = _tar_members(tar, path)
            tops = sorted({name.split("/", 1)[0] for name in members
                           if name.count("/") == 1 and name.endswith("/manifest.json")})

            def reader(top: str) -> Any:
                def read(rel: str) -> bytes:
                    fh = tar.extractfile(members[f"{top}/{rel}"])
                    if fh is None:
                        raise KeyError(rel)
                    return fh.read(MAX_FILE_BYTES + 1)
                return read

            if not tops:
                raise BundleError(f"{path}: no manifest.json in archive")
            return [_from_files(reader(top), f"{path}:{top}") for top in tops]
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise BundleError(f"{path}: unreadable archive ({exc})") from exc


def _read_raw(path: Path) -> Bundle:
    """A collector's raw output saved by ``playbooks/collect.yml`` as ``<host>.out``."""
    try:
        text = read_bounded(path, MAX_BUNDLE_BYTES).decode("utf-8", "replace")
        return bundle_from_output(path.stem, "ansible", stdout=text, stderr="",
                                  exit_code=0, duration_s=0.0, started=path.stat().st_mtime)
    except (OSError, TransportError, TooLarge) as exc:
        raise BundleError(f"{path}: not a collector output ({exc})") from exc


def read_bundles(path: Path) -> list[Bundle]:
    """One path -> its bundles: a bundle dir, a dir of bundle dirs, a .tar.gz of either, or
    raw collector outputs (``<host>.out``) as ``playbooks/collect.yml`` saves them."""
    if path.is_file():
        return [_read_raw(path)] if path.suffix == ".out" else _read_tar(path)
    if (path / "manifest.json").is_file():
        return [_from_files(_dir_reader(path), str(path))]
    if path.is_dir():
        found = sorted(p.parent for p in path.glob("*/manifest.json"))
        found_tars = sorted(path.glob("*.tar.gz"))
        raws = sorted(path.glob("*.out"))
        if not found and not found_tars and not raws:
            raise BundleError(f"{path}: no bundle (manifest.json, .tar.gz or .out) found")
        bundles = [b for d in found for b in read_bundles(d)]
        return bundles + [b for t in found_tars for b in _read_tar(t)] + [_read_raw(r) for r in raws]
    raise BundleError(f"{path}: no such bundle")


DIAGNOSIS_CHARS = 200  # of a host's own words in a reason: a runaway line stays one line


def _diagnose(code: int, stderr: str, python: str = "python3") -> str:
    text = stderr.strip().splitlines()
    last = text[-1] if text else ""
    if len(last) > DIAGNOSIS_CHARS:
        last = last[:DIAGNOSIS_CHARS] + f"... ({len(last):,} characters)"
    if code == 127 or ": not found" in stderr or "No such file" in last:
        return (f"{python} is not installed on the host (the agentless audit needs Python "
                ">= 3.6; set ansible_python_interpreter if it lives elsewhere)")
    if "SyntaxError" in stderr or "invalid syntax" in stderr:
        return (f"{python} on the host is older than Python 3.6, which the collector needs "
                "(set ansible_python_interpreter to a python3)")
    if "sudo" in stderr and ("password" in stderr or "not allowed" in stderr):
        return f"become needs passwordless sudo: {last}"
    return f"collector failed (exit {code}): {last or 'no output'}"


def bundle_from_output(host: str, transport: str, *, stdout: str, stderr: str, exit_code: int,
                       duration_s: float, started: float, python: str = "python3") -> Bundle:
    """The collector's output (whichever engine carried it) -> a bundle, or TransportError."""
    head, sep, body = stdout.partition(MARKER + "\n")
    if not sep:
        raise TransportError(_diagnose(exit_code, stderr or head, python))
    try:
        doc = load_json(body)
        records = doc.pop("probes")
        results = {
            r["id"]: CommandResult(r["id"], storable_argv(tuple(r["argv"])), r["status"],
                                   r["exit_code"], r["stdout"], r["stderr"],
                                   float(r["duration_s"]), r["reason"])
            for r in records
        }  # each argv as it may be stored (omni_bench.env travels in the bench helper's)
    except (ValueError, KeyError, TypeError) as exc:
        raise TransportError(f"collector output was cut off or corrupted ({exc})") from exc
    doc["round_trip_s"] = round(duration_s, 4)
    return Bundle(host=host, collected_at=started, transport=transport, meta=doc,
                  results=results)
