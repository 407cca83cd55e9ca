"""Jinja filters for the omni-host playbooks (loaded by Ansible from this folder)."""

from __future__ import annotations

import posixpath
from typing import Any

MARK = "# Written by omni-host"
DEFAULT_NAMES = {"compose.yaml": "compose.override.yaml", "compose.yml": "compose.override.yml",
                 "docker-compose.yml": "docker-compose.override.yml",
                 "docker-compose.yaml": "docker-compose.override.yaml"}


def compose_override_path(compose_file: str) -> str:
    """The override file Compose loads by itself beside a default-named file
    (compose.override.yaml, docker-compose.override.yml); for any other name, a file of ours
    that the operator passes with a second -f."""
    folder, name = posixpath.split(compose_file)
    stem = name.rsplit(".", 1)[0]
    return posixpath.join(folder, DEFAULT_NAMES.get(name, f"{stem}.omni-host.override.yml"))


def _merge(base: Any, patch: Any) -> Any:
    """``patch`` over ``base``: mappings key by key, anything else replaced."""
    if not (isinstance(base, dict) and isinstance(patch, dict)):
        return _plain(patch)
    merged = {str(k): _plain(v) for k, v in base.items()}
    for key, value in patch.items():
        merged[str(key)] = _merge(merged.get(str(key)), value)
    return merged


def _plain(value: Any) -> Any:
    """Plain Python types: Ansible hands filters its own (tagged) types, which YAML cannot dump."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def compose_override(current: Any, doc: Any, patch: Any) -> str:
    """The override file's text: what the omni.host roles wrote there before (``current``)
    with this role's keys (``patch``) merged in. Compose merges the file with the operator's
    (environment entries by name, whichever form the main file uses), under the main file's
    ``version`` when it has one (docker-compose v1 refuses a mismatch)."""
    import yaml

    body: dict[str, Any] = {}
    if isinstance(doc, dict) and doc.get("version") is not None:
        body["version"] = str(doc["version"])
    merged = _merge(current if isinstance(current, dict) else {}, patch)
    merged.pop("version", None)
    body.update(merged)
    header = (f"{MARK}: the keys the omni.host roles own (GLIBC_TUNABLES, restart policy,\n"
              "# internal network), merged by Compose with the main file. Re-run the playbooks to\n"
              "# change it; edit the main file for anything else.\n")
    return header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def service_patch(services: list[str], settings: dict[str, Any]) -> dict[str, Any]:
    """The same settings for each of ``services``, as an override patch."""
    return {"services": {str(name): _plain(settings) for name in services}}


def gpu_services(doc: Any) -> list[str]:
    """The services of a Compose document that ask for a GPU: the nvidia runtime, ``gpus``,
    a device reservation with the gpu capability or the nvidia driver, or
    NVIDIA_VISIBLE_DEVICES (the container toolkit's convention), as the audit counts them."""
    found = []
    for name, svc in _section(doc, "services").items():
        if not isinstance(svc, dict):
            continue
        devices = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations")
                   or {}).get("devices") or []
        env = svc.get("environment") or {}
        pairs = (env.items() if isinstance(env, dict)
                 else [(*str(e).split("=", 1), "")[:2] for e in env])
        visible = {str(v or "") for k, v in pairs if str(k) == "NVIDIA_VISIBLE_DEVICES"}
        if (svc.get("runtime") == "nvidia" or svc.get("gpus")
                or visible - {"", "void", "none"}
                or any(isinstance(d, dict) and ("gpu" in (d.get("capabilities") or [])
                                                or d.get("driver") == "nvidia")
                       for d in devices)):
            found.append(str(name))
    return found


def _section(doc: Any, key: str) -> dict[str, Any]:
    """A top-level mapping of a Compose document (``services``, ``networks``), or {}."""
    found = doc.get(key) if isinstance(doc, dict) else None
    return found if isinstance(found, dict) else {}


def _service(doc: Any, name: str) -> dict[str, Any]:
    svc = _section(doc, "services").get(name)
    return svc if isinstance(svc, dict) else {}


def _networks_of(svc: dict[str, Any]) -> list[str]:
    """The networks a service names (a list or a mapping); none named means ``default``."""
    return [str(n) for n in (svc.get("networks") or ["default"])]


def isolation_problems(doc: Any, services: list[str], gateways: list[str]) -> list[str]:
    """Why an override cannot put ``services`` on an internal network alone: Compose merges a
    service's networks, so one the main file names (and does not declare internal) would stay;
    a network_mode replaces networks altogether; published ports are not reachable on an
    internal network. Names that are not services of the file are reported too."""
    known = set(_section(doc, "services"))
    internal = {str(n) for n, spec in _section(doc, "networks").items()
                if isinstance(spec, dict) and spec.get("internal")}
    problems = [f"{name}: not a service of the Compose file" for name in [*services, *gateways]
                if name not in known]
    for name in (n for n in services if n in known):
        svc = _service(doc, name)
        if svc.get("network_mode"):
            problems.append(f"{name}: network_mode {svc['network_mode']} (remove it)")
        if svc.get("ports"):
            problems.append(f"{name}: publishes ports, unreachable from an internal network "
                            "(serve it through a gateway in omni_gateway_containers and remove "
                            "its ports)")
        if svc.get("networks"):
            open_nets = [n for n in _networks_of(svc) if n not in internal]
            if open_nets:
                problems.append(f"{name}: on network(s) {', '.join(open_nets)}, which an "
                                "override cannot remove (take them out of the file)")
    return problems


def isolation_patch(doc: Any, services: list[str], gateways: list[str],
                    network: str) -> dict[str, Any]:
    """The override's keys: ``network`` declared internal, the inference services on it (a
    service that named no network leaves Compose's ``default``), the gateways on it beside
    theirs (``default`` kept where they named none)."""
    patch: dict[str, Any] = {"networks": {network: {"internal": True}}, "services": {}}
    for name in services:
        patch["services"][str(name)] = {"networks": {network: {}}}
    for name in gateways:
        keep = _networks_of(_service(doc, name))
        patch["services"][str(name)] = {"networks": {**{n: {} for n in keep}, network: {}}}
    return _plain(patch)


def yaml_or_none(text: str) -> Any:
    """The parsed document, or None where the text is not YAML: a task can then fail with its
    own message, never with a parser's that quotes the (possibly secret) text."""
    import yaml

    try:
        return yaml.safe_load(str(text))
    except yaml.YAMLError:
        return None


PROJECT = "com.docker.compose.project"
CONFIG_FILES = "com.docker.compose.project.config_files"
WORKING_DIR = "com.docker.compose.project.working_dir"


def compose_projects(containers: Any, compose_file: str) -> list[str]:
    """The Compose projects whose containers were started from ``compose_file`` (``docker
    inspect``'s output, their labels): the stack the operator runs, whatever name it was
    started under (``-p NAME``, ``COMPOSE_PROJECT_NAME``)."""
    wanted = posixpath.normpath(compose_file)
    found: set[str] = set()
    for container in containers if isinstance(containers, list) else []:
        labels = ((container or {}).get("Config") or {}).get("Labels") or {}
        project = labels.get(PROJECT)
        if not project:
            continue
        workdir = labels.get(WORKING_DIR) or "/"
        files = [posixpath.normpath(posixpath.join(workdir, f.strip()))
                 for f in str(labels.get(CONFIG_FILES) or "").split(",") if f.strip()]
        if wanted in files:
            found.add(str(project))
    return sorted(found)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"omni_yaml_or_none": yaml_or_none, "omni_compose_override": compose_override,
                "omni_compose_override_path": compose_override_path,
                "omni_gpu_services": gpu_services,
                "omni_service_patch": service_patch,
                "omni_isolation_problems": isolation_problems,
                "omni_isolation_patch": isolation_patch,
                "omni_compose_projects": compose_projects}
