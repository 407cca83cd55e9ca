"""Host plans: what to audit on each host, and how to reach it, before any host is touched.

A plan holds the inventory's connection values as Ansible resolved them (``connection``); the
SSH transport merges them with ``~/.ssh/config`` when it connects (so planning never imports
paramiko).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_host.plan.connection import DEFAULT_PYTHON, SshEndpoint, connection
from omni_host.plan.inventory import Inventory
from omni_host.plan.policy import (
    ExpectedState,
    Policy,
    expected_state,
    policy_from_vars,
    reference_vars,
)


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


def plan_host(name: str, hv: dict[str, Any], *, origin: str,
              origins: dict[str, str] | None = None,
              memo: dict[str, Any] | None = None) -> HostPlan:
    """Validate a host's policy and connection variables (``hv``: its resolved variables;
    ``origins``: where each came from, as Ansible recorded it; ``memo``: values that
    validated before, see ``policy_from_vars``)."""
    where = f"{origin}: host {name}"
    policy = policy_from_vars(hv, where, memo)
    expected = expected_state(hv, origins or {})
    conn = connection(name, hv, where)
    return HostPlan(name, policy, conn.become, conn.ssh, conn.python, expected)


REFERENCE_ORIGIN = "built-in reference: inventory/group_vars/inference.yml"


def local_plan() -> HostPlan:
    """This machine against the built-in reference policy."""
    values = reference_vars()
    return HostPlan("localhost", policy_from_vars(values, "built-in policy"), False, None,
                    expected=expected_state(values, dict.fromkeys(values, REFERENCE_ORIGIN)))


def plan_inventory(inv: Inventory, pattern: str) -> list[HostPlan]:
    memo = inv.validation_memo()
    known = len(memo)
    plans = [plan_host(h.name, h.vars, origin=inv.source, origins=h.origins, memo=memo)
             for h in inv.select(pattern)]
    if len(memo) != known:
        inv.remember()
    return plans
