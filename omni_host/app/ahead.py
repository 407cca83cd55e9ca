"""One host's work started before anything else is done (the fast path of a one-host audit
or bench): an SSH session, this machine's collection, a bench. Light to import, so the host
starts before the checks and renderers load."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from omni_host.collect.ahead import Ahead
    from omni_host.collect.run import Background
    from omni_host.collect.transport.base import SshOptions
    from omni_host.plan.hosts import HostPlan
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


def local_ahead(plans: list[HostPlan], ssh: SshOptions,
                probe_timeout_s: float | None) -> Background | None:
    """This machine's audit collection started once its plan is valid, before the checks,
    renderers and the store are imported (0.13 s of a 0.26 s local audit here): they
    load while the probes run. None for anything but one local host."""
    if len(plans) != 1 or plans[0].ssh is not None:
        return None
    from omni_host.collect.run import collect_ahead

    return collect_ahead(plans[0], ssh, probe_timeout_s)


def bench_ahead(plans: list[HostPlan], ssh: SshOptions, store_root: Path, *, sweep: bool,
                force: bool, waivers_given: bool, probe_timeout_s: float | None,
                wait_s: float = 0.0) -> Background | None:
    """One host's bench started before the heavy imports and the store's read, which then
    overlap the host's probes (the bench's fixed cost, issue 44), where nothing read
    afterwards could refuse it: one host with omni_bench, no sweep (it plans from the
    baseline), no waivers file to validate first, a store that is this user's own."""
    from omni_host.plan.waivers import default_waivers
    from omni_host.resources import not_own

    spec = plans[0].policy.bench if len(plans) == 1 else None
    if spec is None or sweep or waivers_given or default_waivers() is not None:
        return None
    if not_own(store_root):
        return None  # the store will refuse, and says so before anything runs
    from omni_host.collect.run import collect_ahead
    from omni_host.probes.catalog import bench_probe

    return collect_ahead(plans[0], ssh, probe_timeout_s, extra=(bench_probe(spec, force=force,
                                                                            wait_s=wait_s),))
