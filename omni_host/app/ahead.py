"""A one-host audit's SSH session opened before anything else is done (the audit's fast
path): light to import, so the handshake starts before the checks and renderers load."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from omni_host.collect.ahead import Ahead
    from omni_host.collect.transport.base import SshOptions
    from omni_host.plan.inventory import Inventory


def session_ahead(inv: Inventory | None, pattern: str | None, ssh: SshOptions,
                  limit: str | None = None) -> Ahead | None:
    """A one-host SSH audit's session, opened now: paramiko is imported and the handshake
    starts before the policy is validated and the checks are imported (``Ahead``). None for
    a fleet, this machine, or a host whose connection values planning will refuse."""
    if inv is None:
        return None
    from omni_host.collect.ahead import Ahead
    from omni_host.collect.transport.loading import import_ssh
    from omni_host.errors import InventoryError
    from omni_host.plan.connection import connection
    from omni_host.plan.hosts import selected_names

    names = selected_names(inv, pattern or "all", limit)
    if len(names) != 1:
        return None
    host = inv.host(names[0])
    try:
        conn = connection(host.name, host.vars, f"{inv.source}: host {host.name}")
    except InventoryError:
        return None  # planning reports it, as for any host
    if conn.ssh is None:
        return None
    import_ssh(ssh.ssh_config)
    return Ahead(host.name, conn, ssh)
