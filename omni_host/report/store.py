"""The report store: each audit is a directory holding report.json and its bundles, written
in a hidden temporary directory and renamed into place, so a reader never sees half of one
and a failed write (full disk, read-only) leaves nothing behind."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from omni_host.errors import StoreError
from omni_host.resources import user_dir

if TYPE_CHECKING:
    from omni_host.reports import Report


def default_report_dir() -> Path:
    if os.environ.get("OMNI_HOST_REPORT_DIR"):
        return Path(os.environ["OMNI_HOST_REPORT_DIR"])
    return user_dir("data") / "omni-host" / "reports"


def store_report(report: Report, root: Path, *, attach: dict[str, Path] | None = None) -> Path:
    """Write the report (its JSON form, with the audit's id) and every host's bundle; returns
    the audit's directory. ``attach`` moves directories (e.g. ansible-runner artifacts) into
    the audit's directory under the given names."""
    from omni_host.collect.bundle import write_bundle_dir  # not on a bench's way to its host

    # Milliseconds in the name: audits sort by time even when two start in the same second.
    millis = int(report.started_at * 1000) % 1000
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(report.started_at)) + f"{millis:03d}Z"
    audit_id = f"{stamp}-{secrets.token_hex(3)}"
    tmp = root / f".tmp-{audit_id}"
    final = root / audit_id
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp.mkdir(mode=0o700)  # evidence from production hosts: private to its owner
        for host in report.hosts:
            if host.bundle is not None:
                write_bundle_dir(host.bundle, tmp / "bundles")
        for name, src in (attach or {}).items():
            if src.exists():
                shutil.move(str(src), str(tmp / name))
        data = json.dumps(dataclasses.replace(report, id=audit_id).to_dict(), indent=2)
        fd = os.open(tmp / "report.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        reason = exc.strerror or str(exc)
        raise StoreError(f"cannot store the report in {root}: {reason}") from exc
    return final


def audit_dirs(root: Path) -> list[Path]:
    """Stored audits, newest first (their names start with the UTC time)."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: p.name, reverse=True)
