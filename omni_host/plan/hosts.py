"""Host plans: what to audit on each host, and how to reach it, before any host is touched.

A plan holds the inventory's connection values as Ansible resolved them; the SSH transport
merges them with ``~/.ssh/config`` when it connects (so planning never imports paramiko).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_host.errors import InventoryError
from omni_host.plan.inventory import Inventory
from omni_host.plan.policy import (
    ExpectedState,
    Policy,
    expected_state,
    policy_from_vars,
    reference_vars,
)

DEFAULT_PYTHON = "python3"


@dataclass(frozen=True)
class SshEndpoint:
    """Where and as whom to connect, as the inventory says; None = ask the SSH config."""

    alias: str  # ansible_host, else the inventory name: the SSH config's Host to look up
    port: int | None = None
    user: str | None = None
    key_file: str | None = None

    @property
    def address(self) -> str:
        user = f"{self.user}@" if self.user else ""
        return f"{user}{self.alias}" + (f":{self.port}" if self.port else "")


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


def _bool(value: object) -> bool:
    return value if isinstance(value, bool) else str(value).lower() in ("1", "yes", "true", "on")


def _first(hv: dict[str, Any], *names: str) -> Any:
    """The first of Ansible's aliases that is set (``ansible_host`` before ``ansible_ssh_host``)."""
    return next((hv[n] for n in names if hv.get(n) is not None), None)


def _text(origin: str, var: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise InventoryError(f"{origin}: {var} must be a string, got {type(value).__name__}")
    return str(value)


LOCAL = frozenset({"local", "ansible.builtin.local"})
SSH = frozenset({"ssh", "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh",
                 "ansible.builtin.paramiko_ssh", "ansible.legacy.ssh"})


def _refuse_unsupported(hv: dict[str, Any], where: str, become: bool) -> None:
    """What omni-host's own SSH transport cannot honour is an error naming the variable,
    never silently ignored. (``collect --engine ansible`` runs Ansible's own connection.)"""
    connection = hv.get("ansible_connection")
    if connection is not None and connection not in LOCAL | SSH:
        raise InventoryError(f"{where}: ansible_connection {connection!r} is not supported "
                             "(omni-host connects over SSH or runs locally)")
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args"):
        if str(hv.get(var) or "").strip():
            raise InventoryError(f"{where}: {var} is not honoured by omni-host's SSH transport: "
                                 "put the options in ~/.ssh/config (ProxyJump, User, Port, "
                                 "IdentityFile) or use collect --engine ansible")
    for var in ("ansible_password", "ansible_ssh_pass"):
        if hv.get(var) is not None:
            raise InventoryError(f"{where}: {var}: password authentication is not supported: "
                                 "use a key (ansible_ssh_private_key_file)")
    method = hv.get("ansible_become_method")
    if become and method not in (None, "sudo", "ansible.builtin.sudo"):
        raise InventoryError(f"{where}: ansible_become_method {method!r} is not supported "
                             "(omni-host becomes root with passwordless sudo -n)")
    for var in ("ansible_become_password", "ansible_become_pass"):
        if become and hv.get(var) is not None:
            raise InventoryError(f"{where}: {var}: omni-host runs sudo -n (passwordless); a "
                                 "become password cannot be used")


def plan_host(name: str, hv: dict[str, Any], *, origin: str,
              origins: dict[str, str] | None = None,
              memo: dict[str, Any] | None = None) -> HostPlan:
    """Validate a host's policy and connection variables (``hv``: its resolved variables;
    ``origins``: where each came from, as Ansible recorded it; ``memo``: values that
    validated before, see ``policy_from_vars``)."""
    policy = policy_from_vars(hv, f"{origin}: host {name}", memo)
    expected = expected_state(hv, origins or {})
    become = _bool(hv.get("ansible_become", False))
    _refuse_unsupported(hv, f"{origin}: host {name}", become)
    python = str(hv.get("ansible_python_interpreter") or DEFAULT_PYTHON)
    if python.startswith("auto"):  # Ansible's discovery modes: python3 on the PATH
        python = DEFAULT_PYTHON
    if hv.get("ansible_connection") in LOCAL:
        return HostPlan(name, policy, become, None, python, expected)
    where = f"{origin}: host {name}"
    port = _first(hv, "ansible_port", "ansible_ssh_port")
    if port is not None and (isinstance(port, bool) or not str(port).isdigit()
                             or not 0 < int(port) < 65536):
        raise InventoryError(f"{where}: ansible_port {port!r} is not a port")
    host = _text(where, "ansible_host", _first(hv, "ansible_host", "ansible_ssh_host"))
    endpoint = SshEndpoint(
        alias=host or name,
        port=int(port) if port is not None else None,
        user=_text(where, "ansible_user", _first(hv, "ansible_user", "ansible_ssh_user")),
        key_file=_text(where, "ansible_ssh_private_key_file",
                       _first(hv, "ansible_ssh_private_key_file", "ansible_private_key_file")),
    )
    return HostPlan(name, policy, become, endpoint, python, expected)


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
