"""The collect use case: each host's raw outputs, one round trip a host, through omni-host's
own pool or through Ansible's forks (``playbooks/collect.yml``); nothing judged. The bundles
are written as a directory per host or one archive, the hosts that did not answer named."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_host.collect.bundle import write_archive, write_bundle_dir
from omni_host.collect.pool import run_pool
from omni_host.collect.run import (
    collect_host,
    host_deadline_s,
    import_transports,
    payload,
    scrubbed,
)
from omni_host.collect.transport.base import SshOptions
from omni_host.errors import TransportError, UsageError
from omni_host.model import Bundle
from omni_host.plan.hosts import HostPlan
from omni_host.probes.catalog import PROBES


@dataclass(frozen=True)
class Collected:
    bundles: list[Bundle]
    failed: list[str]  # one line per host that gave no bundle, naming it


def collect_fleet(host_plans: list[HostPlan], ssh: SshOptions, *, forks: int,
                  probe_timeout_s: float | None, host_timeout_s: float | None,
                  engine: str = "native", inventory: Path | None = None,
                  extra: dict[str, Any] | None = None) -> Collected:
    """``extra``: the run's ``-e`` values, which the Ansible engine hands to the play (the
    native engine's plans already hold them)."""
    if engine == "ansible":
        from omni_host.collect.ansible_engine import collect_with_ansible

        if inventory is None:
            raise UsageError("--engine ansible needs an inventory (-i)")
        bundles, failed = collect_with_ansible(inventory=inventory, plans=host_plans,
                                               known_hosts=ssh.known_hosts, forks=forks,
                                               probe_timeout_s=probe_timeout_s,
                                               extravars=extra)
        return Collected(bundles, failed)

    def one(plan: HostPlan) -> Bundle | str:
        try:
            return scrubbed(collect_host(plan, ssh, probe_timeout_s), plan)
        except TransportError as exc:
            return f"{plan.name}: unreachable: {exc}"

    deadline = host_deadline_s(ssh, probe_timeout_s, host_timeout_s)
    import_transports(host_plans, ssh.ssh_config)
    outcomes = run_pool(host_plans, one, forks=forks, deadline_s=deadline,
                        late=lambda p, t: f"{p.name}: unreachable: no answer within {deadline:g}s",
                        cancelled=lambda p: f"{p.name}: interrupted").results
    return Collected([o for o in outcomes if not isinstance(o, str)],
                     [o for o in outcomes if isinstance(o, str)])


def write_bundles(collected: Collected, out: Path) -> list[str]:
    """An archive when ``out`` ends in .tar.gz/.tgz, else a directory per host; returns one
    line per thing written."""
    if out.name.endswith((".tar.gz", ".tgz")):
        out.parent.mkdir(parents=True, exist_ok=True)  # as a --out DIR is made
        write_archive(collected.bundles, out)
        return [f"{len(collected.bundles)} bundle(s) written to {out}"]
    return [f"{b.host}: bundle written to {write_bundle_dir(b, out)}" for b in collected.bundles]


def catalog_payload(probe_timeout_s: float | None = None) -> str:
    """The collector with the catalog's probes, for ``playbooks/collect.yml`` by hand."""
    return payload(PROBES, probe_timeout_s)
