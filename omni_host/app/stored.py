"""The store as the commands see it: where it is (``--report-dir``, else the default), its
history, and the ``report`` command's use cases over it (what changed between audits, the
newest stored audit). The CLI asks here and prints what comes back; it imports neither
``report.store`` nor ``report.history``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni_host.report.store import default_report_dir

if TYPE_CHECKING:  # the history is read once a command needs it: where the store is, a bench
    # knows before it starts its host's probes (issue 44), and the history's imports follow
    from omni_host.report.history import History, StoredAudit

__all__ = ["History", "StoredAudit", "diffs", "history_at", "newest", "store_at"]


def store_at(report_dir: Path | None) -> Path:
    """The store a command uses: ``--report-dir``, else ``OMNI_HOST_REPORT_DIR``, else the
    user's data directory."""
    return report_dir or default_report_dir()


def history_at(report_dir: Path | None) -> History:
    """The stored audits of a store (None: the default one)."""
    from omni_host.report.history import load_history

    return load_history(store_at(report_dir))


def newest(report_dir: Path | None = None, *, benches: bool = False) -> StoredAudit | None:
    """The newest stored audit of a store (a bench, a plan or a watch is not one), or with
    ``benches`` the newest bench or plan; None where there is none."""
    from omni_host.model import Source

    history = history_at(report_dir)
    kinds = {Source.BENCH} if benches else set(Source) - {Source.BENCH, Source.WATCH}
    return next((a for a in history.audits if a.report.source in kinds), None)


def diffs(history: History, a: str | None, b: str | None) -> list[dict[str, Any]]:
    """What changed, per host: between audits ``a`` and ``b`` where both are given, else each
    host's latest (of ``a`` where given) against its previous. A host without a previous audit
    says so."""
    from omni_host import codec
    from omni_host.report.history import diff_hosts

    pairs: list[tuple[str, StoredAudit | None, StoredAudit | None, list[Any]]] = []
    if a and b:
        old, new = history.resolve(a), history.resolve(b)
        for host in new.host_names():
            pairs.append((host, old if old.host(host) else None, new, []))
    else:
        latest = history.resolve(a) if a else None
        hosts = latest.host_names() if latest else sorted(
            {h for audit in history.audits for h in audit.host_names()})
        for host in hosts:
            entries = history.for_host(host)
            if latest is not None:
                entries = [e for e in entries if e[0].started_at <= latest.started_at]
            pairs.append((host, entries[1][0] if len(entries) > 1 else None,
                          entries[0][0] if entries else None, [h for _, h in entries[2:]]))
    found: list[dict[str, Any]] = []
    for host, before, after, earlier in pairs:
        old_doc = before.host(host) if before is not None else None
        new_doc = after.host(host) if after is not None else None
        if before is None or after is None or old_doc is None or new_doc is None:
            found.append({"host": host, "previous": None,
                          "note": "no previous audit of this host to compare with"})
            continue
        changed = codec.to_dict(diff_hosts(old_doc, new_doc, earlier))
        found.append({"host": host, "previous": before.id, "latest": after.id, **changed})
    return found
