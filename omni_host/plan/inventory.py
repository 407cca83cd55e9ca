"""The Ansible inventory, resolved by ansible-core itself.

Every source ``ansible-inventory`` accepts works here because Ansible reads it: YAML, INI,
directories mixing them, executable scripts, inventory plugins, ``group_vars/`` and
``host_vars/``, vaulted values, group priority, host patterns with subscripts and regexes. The
``omni_*`` and connection variables of each selected host are rendered with Ansible's templar,
exactly as a playbook would render them, and only those: a vaulted value elsewhere in the
inventory (a become password, say) is never decrypted, so it can never be stored.

ansible-core is imported only when an inventory is used (about 0.3 s).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_host.errors import InventoryError
from omni_host.plan import inventory_cache
from omni_host.plan.policy import VAULT_ORIGIN, pointer_part
from omni_host.resources import TooLarge, first_alias, read_bounded

# Variables a host plan reads besides omni_*: connection values and their Ansible aliases.
CONNECTION_VARS = (
    "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user",
    "ansible_ssh_user", "ansible_ssh_private_key_file", "ansible_private_key_file",
    "ansible_connection", "ansible_become", "ansible_become_method", "ansible_become_user",
    "ansible_python_interpreter", "ansible_ssh_common_args", "ansible_ssh_extra_args",
    "ansible_ssh_args", "ansible_password", "ansible_ssh_pass", "ansible_become_password",
    "ansible_become_pass",
)
# Vars that hold secrets: checked for presence only, never rendered (nor decrypted).
SECRET_VARS = frozenset({"ansible_password", "ansible_ssh_pass", "ansible_become_password",
                         "ansible_become_pass"})
_VAULTED = ("EncryptedString", "AnsibleVaultEncryptedUnicode")  # ansible-core 2.19+, older
_FAILED = re.compile(r"^\[WARNING\]: Failed to parse inventory with '([^']+)' plugin: (.*)$", re.M)
_ORIGIN = re.compile(r"^Origin: (\S+?)(?::(\d+))?(?::\d+)?$", re.M)


@dataclass(frozen=True)
class InventoryHost:
    """One host as Ansible resolved it: its ``omni_*`` and connection variables (rendered,
    plain Python values), its groups, and where each variable came from."""

    name: str
    vars: dict[str, Any]
    groups: tuple[str, ...]
    origins: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VaultOptions:
    password_files: tuple[Path, ...] = ()
    ask: bool = False


def default_sources() -> tuple[str, ...]:
    """The inventory Ansible is configured with (``ANSIBLE_INVENTORY`` or ``inventory`` in the
    ansible.cfg Ansible would read), or () when only Ansible's built-in default is set: then
    omni-host audits this machine with the built-in reference policy."""
    _warn_if_cfg_ignored()
    if not os.environ.get("ANSIBLE_INVENTORY") and not _config_file():
        return ()
    from ansible import constants as C  # noqa: N812 (Ansible's own name)

    value, origin = C.config.get_config_value_and_origin("DEFAULT_HOST_LIST")
    if origin == "default" or not value:
        return ()
    return tuple(str(v) for v in value)


def _cwd_world_writable() -> bool:
    try:
        return bool(os.stat(".").st_mode & stat.S_IWOTH)
    except OSError:
        return False


def _warn_if_cfg_ignored() -> None:
    """Ansible ignores ./ansible.cfg in a world-writable directory (anyone could have put it
    there): said once, since the inventory it names is then not the one audited."""
    if not os.environ.get("ANSIBLE_CONFIG") and os.path.isfile("ansible.cfg") \
            and _cwd_world_writable():
        logging.getLogger("omni_host").warning(
            "%s/ansible.cfg ignored, as Ansible ignores it: the directory is world-writable "
            "(its inventory is not used; pass -i, or set ANSIBLE_CONFIG)", os.getcwd())


def _config_file() -> str | None:
    """Whether an ansible.cfg would be read, without importing ansible (fast path); as
    Ansible, not ./ansible.cfg in a world-writable directory."""
    local = None if _cwd_world_writable() else "ansible.cfg"
    candidates = [os.environ.get("ANSIBLE_CONFIG"), local,
                  os.path.expanduser("~/.ansible.cfg"), "/etc/ansible/ansible.cfg"]
    return next((c for c in candidates if c and os.path.isfile(c)), None)


def _failure_line(source: str, captured: str) -> str:
    """Ansible's reason for refusing a source, as one line naming the file (and line)."""
    failed = _FAILED.search(captured)
    if failed is None:
        if not os.path.exists(source):
            return f"{source}: no such inventory"
        return f"{source}: not an inventory Ansible can parse"
    plugin, message = failed.groups()
    origin = _ORIGIN.search(captured, failed.end())
    where = source
    if origin and not origin.group(1).startswith("<"):
        where = origin.group(1) + (f":{origin.group(2)}" if origin.group(2) else "")
    return f"{where}: {message.strip()} ({plugin} inventory plugin)"


def _origin(value: Any) -> str | None:
    """The file and line Ansible recorded for a value it loaded (its data tags), if any."""
    try:
        from ansible.module_utils._internal._datatag import AnsibleTagHelper
    except ImportError:  # an ansible-core without data tags: the origin stays unknown
        return None
    for tag in AnsibleTagHelper.tags(value):
        path = getattr(tag, "path", None)
        if path:
            line = getattr(tag, "line_num", None)
            return f"{path}:{line}" if line else str(path)
    return None


def _came_through_vault(value: Any) -> bool:
    """A value Ansible decrypted (an encrypted leaf, or a rendered one tagged as vaulted:
    a template that names a vaulted variable carries the tag too)."""
    if type(value).__name__ in _VAULTED:
        return True
    try:
        from ansible.module_utils._internal._datatag import AnsibleTagHelper
    except ImportError:
        return False
    return any(type(tag).__name__ == "VaultedValue" for tag in AnsibleTagHelper.tags(value))


def vaulted_paths(value: Any, path: str) -> list[str]:
    """The JSON-pointer paths (``omni_bench/env/HF_TOKEN``) of the parts of a variable that
    came through vault, wherever they sit in its mappings and lists."""
    if _came_through_vault(value):
        return [path]
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += vaulted_paths(item, f"{path}/{pointer_part(str(key))}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found += vaulted_paths(item, f"{path}/{index}")
    return found


def _plain(value: Any) -> Any:
    """Ansible's tagged values as plain JSON types (they are subclasses of them)."""
    return json.loads(json.dumps(value))


def load_timeout_s() -> float:
    """How long reading the sources may take: an inventory script that hangs must not hang
    every audit, scheduled ones included (OMNI_HOST_INVENTORY_TIMEOUT, default 60 s)."""
    try:
        value = float(os.environ.get("OMNI_HOST_INVENTORY_TIMEOUT", "60"))
    except ValueError:
        return 60.0
    return value if value > 0 else 60.0


class _Watchdog:
    """While Ansible reads the sources: past ``limit_s``, the processes it started (an
    inventory script) are killed, so that its read fails instead of hanging."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.fired = False
        self._before: set[int] = set()
        self._timer: Any = None

    def __enter__(self) -> _Watchdog:
        import threading

        import psutil

        self._before = {p.pid for p in psutil.Process().children(recursive=True)}
        self._timer = threading.Timer(self.limit_s, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def _fire(self) -> None:
        import psutil

        for child in psutil.Process().children(recursive=True):
            if child.pid not in self._before:
                self.fired = True
                with contextlib.suppress(psutil.Error):
                    child.kill()

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


class Inventory:
    """Hosts, groups and variables of one or more inventory sources, as Ansible reads them.

    ansible-core is loaded on first need; a static inventory's answers come from the cache in
    ``inventory_cache`` while none of its files has changed."""

    def __init__(self, sources: tuple[str, ...], vault: VaultOptions | None = None) -> None:
        if not sources:
            raise InventoryError("no inventory source given")
        self.source = ", ".join(sources)
        self._sources = sources
        self._vault = vault or VaultOptions()
        for source in sources:
            if "," not in source and not os.path.exists(source):
                raise InventoryError(f"{source}: no such inventory")
        self._key = inventory_cache.cache_key(sources, _config_file())
        self._cache = inventory_cache.read(self._key) if self._key else {}
        self._cache.setdefault("patterns", {})
        self._cache.setdefault("hosts", {})
        self._ansible: tuple[Any, Any, Any] | None = None  # loader, inventory, variables
        self.names()  # parse now (unless cached): a broken source fails before anything runs

    # -- Ansible, loaded once and only when the cache cannot answer ------------------------
    def _load(self) -> tuple[Any, Any, Any]:
        if self._ansible is not None:
            return self._ansible
        from ansible import constants as C  # noqa: N812 (Ansible's own name)
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.manager import VariableManager

        # A source Ansible cannot parse is an error here, not a warning and a smaller fleet.
        C.INVENTORY_ANY_UNPARSED_IS_FAILED = True
        C.INVENTORY_UNPARSED_IS_FAILED = True
        _forget_vars_files()
        loader = DataLoader()
        if self._vault.password_files or self._vault.ask or C.DEFAULT_VAULT_PASSWORD_FILE:
            _setup_vault(loader, self._vault)
        else:
            _vault_context([])  # no secrets given: none left over from an earlier inventory
        captured = io.StringIO()
        watchdog = _Watchdog(load_timeout_s())
        try:
            with contextlib.redirect_stderr(captured), watchdog:
                manager = InventoryManager(loader=loader, sources=list(self._sources))
        except AnsibleError as exc:
            bad = next((s for s in self._sources if s in str(exc)), self._sources[0])
            if watchdog.fired:
                raise InventoryError(f"{bad}: did not finish in {watchdog.limit_s:g}s (a "
                                     "hanging inventory script or plugin was stopped; "
                                     "OMNI_HOST_INVENTORY_TIMEOUT sets the limit)") from None
            raise InventoryError(_failure_line(bad, captured.getvalue())) from None
        self._ansible = (loader, manager, VariableManager(loader=loader, inventory=manager))
        return self._ansible

    @property
    def asked_ansible(self) -> bool:
        """Whether ansible-core had to read the sources (the cache could not answer)."""
        return self._ansible is not None

    def _save(self) -> None:
        if self._key:
            inventory_cache.write(self._key, self._cache)

    def validation_memo(self) -> dict[str, Any]:
        """Policy values that validated, kept with this inventory's cache entry (a dict the
        planner adds to; ``remember`` stores it). Not kept for an inventory that is not cached."""
        memo: dict[str, Any] = self._cache.setdefault("validated", {})
        return memo

    def remember(self) -> None:
        self._save()

    # -- the interface the plans use -------------------------------------------------------
    def names(self) -> list[str]:
        if "names" not in self._cache:
            self._cache["names"] = [h.name for h in self._load()[1].get_hosts("all")]
            self._save()
        return list(self._cache["names"])

    def select_names(self, pattern: str) -> list[str]:
        """Ansible's host patterns (groups, globs, ``~regex``, ``:&``, ``:!``, ``group[0]``)."""
        if not pattern.strip():
            raise InventoryError("empty host pattern")
        cached = self._cache["patterns"].get(pattern)
        if cached is None:
            cached = self._match(pattern)
            self._cache["patterns"][pattern] = cached
        if not cached:
            raise InventoryError(f"host pattern {pattern!r} matches no host or group in "
                                 f"{self.source}")
        return list(cached)

    def _match(self, pattern: str) -> list[str]:
        from ansible.errors import AnsibleError

        manager = self._load()[1]
        captured = io.StringIO()
        try:
            with contextlib.redirect_stderr(captured):
                return [h.name for h in manager.get_hosts(pattern)]
        except (AnsibleError, re.error) as exc:
            raise InventoryError(f"host pattern {pattern!r}: {str(exc).splitlines()[0]}") \
                from None

    def select(self, pattern: str) -> list[InventoryHost]:
        return self.hosts(self.select_names(pattern))

    def hosts(self, names: list[str]) -> list[InventoryHost]:
        """These hosts, resolved (the cache written once for all of them)."""
        hosts = [self._host(name) for name in names]
        self._save()
        return hosts

    def __contains__(self, name: str) -> bool:
        return name in self._cache["hosts"] or name in self.names()

    def host(self, name: str) -> InventoryHost:
        """One host's ``omni_*`` and connection variables, rendered as a playbook would."""
        known = name in self._cache["hosts"]
        host = self._host(name)
        if not known:
            self._save()
        return host

    def _host(self, name: str) -> InventoryHost:
        entry = self._cache["hosts"].get(name)
        if entry is None:
            host = self._resolve(name)
            self._cache["hosts"][name] = {"vars": host.vars, "groups": list(host.groups),
                                          "origins": host.origins}
            return host
        return InventoryHost(name, dict(entry["vars"]), tuple(entry["groups"]),
                             dict(entry["origins"]))

    def _resolve(self, name: str) -> InventoryHost:
        from ansible.template import Templar

        loader, manager, variables = self._load()
        host = manager.get_host(name)
        if host is None:
            raise InventoryError(f"{name}: not a host of {self.source}")
        all_vars = variables.get_vars(host=host, include_hostvars=False)
        templar = Templar(loader=loader, variables=all_vars)
        resolved, origins = rendered_vars(all_vars, templar, f"{self.source}: host {name}")
        groups = tuple(g.name for g in host.get_groups())
        return InventoryHost(name, resolved, groups, origins)


def rendered_vars(all_vars: Any, templar: Any, where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A host's ``omni_*`` and connection variables out of Ansible's (tagged, maybe templated)
    values, rendered as a play would, and where each came from. Secrets are present, never
    rendered; vaulted values are marked in their origin, and a vaulted part of a mapping or
    list by its path (``omni_bench/env/HF_TOKEN``; ``where``: names them in errors).
    The inventory and the collection's audit action both read a host through it."""
    from ansible.errors import AnsibleError

    wanted = [k for k in all_vars if k.startswith("omni_") or k in CONNECTION_VARS]
    resolved: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key in wanted:
        value = all_vars[key]
        origins[key] = _origin(value) or "inventory"
        if type(value).__name__ in _VAULTED:
            origins[key] = f"{VAULT_ORIGIN}{origins[key]}"  # recorded, never its value
        if key in SECRET_VARS:
            resolved[key] = "<set>"  # presence matters, the value never leaves Ansible
            continue
        try:
            rendered = templar.template(value)
            for path in vaulted_paths(rendered, key):  # a vaulted part: its path, never its value
                if path == key:
                    origins[key] = origins[key] if origins[key].startswith(VAULT_ORIGIN) \
                        else f"{VAULT_ORIGIN}{origins[key]}"
                else:
                    origins[path] = f"{VAULT_ORIGIN}{origins[key]}"
            resolved[key] = _plain(rendered)
        except AnsibleError as exc:
            raise InventoryError(f"{where}: {key}: {str(exc).splitlines()[0]}") from None
        except (TypeError, ValueError) as exc:
            raise InventoryError(f"{where}: {key}: cannot be read as data ({exc})") from None
    return resolved, origins


MAX_VARS_FILE_BYTES = 1024 * 1024  # -e @file: a few omni_* values


def parse_extra_vars(items: list[str]) -> dict[str, Any]:
    """``-e`` values as Ansible reads them: ``name=value`` pairs (Ansible's own key=value
    parser; the values are strings, typed by the schema as the inventory's are), a JSON/YAML
    mapping, or ``@file``. Only ``omni_*`` values: how a host is reached stays the
    inventory's."""
    import yaml
    from ansible.parsing.splitter import parse_kv

    found: dict[str, Any] = {}
    for item in items:
        try:
            if item.startswith("@") or item.lstrip().startswith("{"):
                text = read_bounded(item[1:], MAX_VARS_FILE_BYTES).decode("utf-8") \
                    if item.startswith("@") else item
                alias = first_alias(yaml.compose(text))
                if alias is not None:
                    label = item if item.startswith("@") else item[:60]
                    raise InventoryError(f"-e {label}: line {alias.start_mark.line + 1}: "
                                         "YAML aliases (*name) are not accepted")
                values = yaml.safe_load(text)
            else:
                values = parse_kv(item)
        except OSError as exc:
            raise InventoryError(f"-e {item}: {exc.strerror or exc}") from None
        except TooLarge as exc:
            raise InventoryError(f"-e {item}: {exc}: not a variables file") from None
        except (yaml.YAMLError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise InventoryError(f"-e {item[:60]}: not name=value, a mapping or @file "
                                 f"({str(exc).splitlines()[0]})") from None
        except RecursionError:  # YAML's composer recurses once per level
            raise InventoryError(f"-e {item[:60]}: nested too deeply to be omni_* values") \
                from None
        if not isinstance(values, dict) or "_raw_params" in values:
            raise InventoryError(f"-e {item[:60]}: not name=value, a mapping or @file")
        for name in values:
            if not str(name).startswith("omni_"):
                raise InventoryError(f"-e {name}: only omni_* values can be set for a run "
                                     "(connection values come from the inventory)")
        found.update(values)
    return found


def _forget_vars_files() -> None:
    """ansible-core's host_group_vars plugin remembers, per process, which group_vars/ and
    host_vars/ files exist (and which directories do not): right for one playbook run, wrong
    for a process that reads an inventory again after a file appeared (``init`` then
    ``audit``, the scheduler). Each load starts from what is on disk now."""
    from ansible.plugins.vars import host_group_vars

    for name in ("FOUND", "NAK"):
        remembered = getattr(host_group_vars, name, None)
        if remembered is not None:
            remembered.clear()


def _setup_vault(loader: Any, vault: VaultOptions) -> None:
    from ansible.cli import CLI
    from ansible.errors import AnsibleError

    files = [str(p) for p in vault.password_files]
    for path in vault.password_files:
        if not path.is_file():
            raise InventoryError(f"{path}: no such vault password file")
    try:
        secrets = CLI.setup_vault_secrets(loader, vault_ids=[], vault_password_files=files,
                                          ask_vault_pass=vault.ask, auto_prompt=False,
                                          initialize_context=False)
    except AnsibleError as exc:
        raise InventoryError(f"vault: {str(exc).splitlines()[0]}") from None
    loader.set_vault_secrets(secrets)
    _vault_context(secrets)


def _vault_context(secrets: list[Any]) -> None:
    """Ansible keeps the secrets that decrypt values in one context per process, set once; a
    later inventory in the same process (a recheck, the scheduler, tests) replaces them, so a
    password given for one inventory never decrypts another."""
    from ansible.parsing.vault import VaultSecretsContext

    context = VaultSecretsContext.current(optional=True)
    if context is None:
        VaultSecretsContext.initialize(VaultSecretsContext(secrets))
    else:
        context.secrets[:] = secrets


def load_inventory(source: Path | str | list[Path] | tuple[str, ...],
                   vault: VaultOptions | None = None) -> Inventory:
    """Read inventory sources with Ansible: a path (file, directory, script, plugin config),
    several, or a comma-separated host list."""
    sources = tuple(str(s) for s in source) if isinstance(source, (list, tuple)) else (str(source),)
    return Inventory(sources, vault)
