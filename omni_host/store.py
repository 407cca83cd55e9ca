"""The report store: each audit is a directory holding report.json and its bundles, written
in a hidden temporary directory and renamed into place, so a reader never sees half of one
and a failed write (full disk, read-only) leaves nothing behind."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path

from omni_host.errors import StoreError
from omni_host.report import Report


def default_report_dir() -> Path:
    if os.environ.get("OMNI_HOST_REPORT_DIR"):
        return Path(os.environ["OMNI_HOST_REPORT_DIR"])
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "omni-host" / "reports"


def store_report(report: Report, root: Path) -> Path:
    """Write the report and every host's bundle; returns the audit's directory."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(report.started_at))
    audit_id = f"{stamp}-{secrets.token_hex(3)}"
    tmp = root / f".tmp-{audit_id}"
    final = root / audit_id
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        for host in report.hosts:
            if host.bundle is not None:
                host.bundle.write_dir(tmp / "bundles")
        data = json.dumps({"id": audit_id, **report.to_dict()}, indent=2)
        with open(tmp / "report.json", "w", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        reason = exc.strerror or str(exc)
        raise StoreError(f"cannot store the report in {root}: {reason}") from exc
    return final
