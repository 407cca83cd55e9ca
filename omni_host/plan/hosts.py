"""Host plans: what to audit on each host, and how to reach it, before any host is touched.

A plan holds the inventory's connection values as Ansible resolved them (``connection``); the
SSH transport merges them with ``~/.ssh/config`` when it connects (so planning never imports
paramiko).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_host.errors import InventoryError, UsageError
from omni_host.plan.connection import DEFAULT_PYTHON, SshEndpoint, connection
from omni_host.plan.inventory import Inventory
from omni_host.plan.policy import (
    ExpectedState,
    Policy,
    expected_state,
    policy_from_vars,
    reference_vars,
)
from omni_host.resources import TooLarge, read_bounded


@dataclass(frozen=True)
class HostPlan:
    """One host to audit: how to reach it and what it should look like."""

    name: str
    policy: Policy
    become: bool
    ssh: SshEndpoint | None  # None = this machine, through the local transport
    python: str = DEFAULT_PYTHON
    expected: ExpectedState | None = None  # the values the policy came from, with origins

    @property
    def address(self) -> str:
        return "local" if self.ssh is None else self.ssh.address

    @property
    def secrets(self) -> tuple[str, ...]:
        """The clear text of its vaulted values, scrubbed from all it stores or shows."""
        return self.expected.secrets() if self.expected is not None else ()

    @property
    def transport(self) -> str:
        return "local" if self.ssh is None else "ssh"


EXTRA_ORIGIN = "extra var (-e)"  # the run's own override, recorded as such in its report


def with_extra(values: dict[str, Any], origins: dict[str, str],
               extra: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The run's ``-e`` values over a host's, as Ansible's extra vars win, each recorded as
    the run's own."""
    if not extra:
        return values, origins
    return {**values, **extra}, {**origins, **dict.fromkeys(extra, EXTRA_ORIGIN)}


def plan_host(name: str, hv: dict[str, Any], *, origin: str,
              origins: dict[str, str] | None = None,
              memo: dict[str, Any] | None = None,
              extra: dict[str, Any] | None = None) -> HostPlan:
    """Validate a host's policy and connection variables (``hv``: its resolved variables;
    ``origins``: where each came from, as Ansible recorded it; ``memo``: values that
    validated before, see ``policy_from_vars``; ``extra``: the run's ``-e`` values, which win
    over the inventory's as Ansible's extra vars do)."""
    where = f"{origin}: host {name}"
    if extra:  # a bad -e value is the command line's, not the inventory's
        policy_from_vars(extra, f"{EXTRA_ORIGIN}: host {name}", memo)
    hv, origins = with_extra(hv, origins or {}, extra)
    policy = policy_from_vars(hv, where, memo)
    expected = expected_state(hv, origins)
    conn = connection(name, hv, where)
    return HostPlan(name, policy, conn.become, conn.ssh, conn.python, expected)


REFERENCE_ORIGIN = "built-in reference: inventory/group_vars/inference.yml"


def local_plan(extra: dict[str, Any] | None = None) -> HostPlan:
    """This machine against the built-in reference policy (and the run's ``-e`` values)."""
    if extra:
        policy_from_vars(extra, EXTRA_ORIGIN)
    values, origins = with_extra(reference_vars(),
                                 dict.fromkeys(reference_vars(), REFERENCE_ORIGIN), extra)
    return HostPlan("localhost", policy_from_vars(values, "built-in policy"), False, None,
                    expected=expected_state(values, origins))


def selected_names(inv: Inventory, pattern: str, limit: str | None = None) -> list[str]:
    """The hosts of ``pattern``, in its order, within ``limit`` when one is given (Ansible's
    ``--limit``: a comma-separated pattern whose ``@file`` items are files of one pattern a
    line, a group or a glob as much as a host name: ``cpu1,@retry``)."""
    names = inv.select_names(pattern)
    if not limit:
        return names
    patterns: list[str] = []
    for item in (part.strip() for part in limit.split(",")):
        if not item.startswith("@"):
            patterns += [item] if item else []
            continue
        try:
            text = read_bounded(item[1:], 1024 * 1024).decode("utf-8", "replace")
        except OSError as exc:
            raise InventoryError(f"--limit {item}: {exc.strerror or exc}") from None
        except TooLarge as exc:
            raise InventoryError(f"--limit {item}: {exc}: not a list of hosts") from None
        patterns += [line.strip() for line in text.splitlines() if line.strip()]
    if not patterns:
        raise InventoryError(f"--limit {limit!r} names no host")
    allowed = set(inv.select_names(",".join(patterns)))
    kept = [n for n in names if n in allowed]
    if not kept:
        raise InventoryError(f"host pattern {pattern!r} limited to {limit!r} matches no host "
                             f"in {inv.source}")
    return kept


def plan_inventory(inv: Inventory, pattern: str, limit: str | None = None,
                   extra: dict[str, Any] | None = None) -> list[HostPlan]:
    memo = inv.validation_memo()
    known = len(memo)
    plans = [plan_host(h.name, h.vars, origin=inv.source, origins=h.origins, memo=memo,
                       extra=extra)
             for h in inv.hosts(selected_names(inv, pattern, limit))]
    if len(memo) != known:
        inv.remember()
    return plans


def plan_targets(inv: Inventory | None, pattern: str | None, limit: str | None,
                 extra: dict[str, Any] | None) -> list[HostPlan]:
    """The hosts a run targets: ``pattern`` within ``limit`` of the inventory, or, without
    one, this machine under the built-in reference policy."""
    if inv is None:
        if pattern not in (None, "localhost", "all") or limit not in (None, "localhost", "all"):
            raise UsageError(f"host pattern {limit or pattern!r} needs an inventory (-i)")
        return [local_plan(extra)]
    return plan_inventory(inv, pattern or "all", limit, extra)


@dataclass(frozen=True)
class Targets:
    """What a run targets as its command line says it: the inventory (None: this machine), the
    hosts' pattern and limit, the run's ``-e`` values. The use case resolves the hosts
    (``plans``), so the command line hands over what it parsed and nothing more."""

    inventory: Inventory | None
    pattern: str | None = None
    limit: str | None = None
    extra: dict[str, Any] | None = None

    def plans(self) -> list[HostPlan]:
        return plan_targets(self.inventory, self.pattern, self.limit, self.extra)
