"""How to reach a host, as its inventory says: the connection values of a host plan, read
before (and without) its policy, so that a one-host audit can open its SSH session while the
policy is still being validated. Standard library only: importing this costs nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_host.errors import InventoryError

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
class Connection:
    """A host's connection values: become, the host's interpreter, and its SSH endpoint
    (None: this machine, through the local transport)."""

    become: bool
    python: str
    ssh: SshEndpoint | None


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


def interpreter(hv: dict[str, Any]) -> str:
    """The host's Python: ``ansible_python_interpreter``, where Ansible's discovery modes
    (``auto``...) and no value mean python3 on the host's PATH."""
    python = str(hv.get("ansible_python_interpreter") or DEFAULT_PYTHON)
    return DEFAULT_PYTHON if python.startswith("auto") else python


def connection(name: str, hv: dict[str, Any], where: str) -> Connection:
    """Host ``name``'s connection values from its resolved variables (``hv``); what omni-host cannot
    honour is an InventoryError naming ``where`` and the variable."""
    become = _bool(hv.get("ansible_become", False))
    _refuse_unsupported(hv, where, become)
    python = interpreter(hv)
    if hv.get("ansible_connection") in LOCAL:
        return Connection(become, python, None)
    port = _first(hv, "ansible_port", "ansible_ssh_port")
    if port is not None and (isinstance(port, bool) or not str(port).isdigit()
                             or not 0 < int(port) < 65536):
        raise InventoryError(f"{where}: ansible_port {port!r} is not a port")
    host = _text(where, "ansible_host", _first(hv, "ansible_host", "ansible_ssh_host"))
    return Connection(become, python, SshEndpoint(
        alias=host or name,
        port=int(port) if port is not None else None,
        user=_text(where, "ansible_user", _first(hv, "ansible_user", "ansible_ssh_user")),
        key_file=_text(where, "ansible_ssh_private_key_file",
                       _first(hv, "ansible_ssh_private_key_file", "ansible_private_key_file")),
    ))
