"""Running containers from ``docker inspect`` (as redacted by the collector).

Lesson F-010: on Zen 5, memgraph crash-looped (exit 139) until its environment carried
``GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512CD,-AVX512DQ``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt


@dataclass(frozen=True)
class Container:
    name: str
    container_id: str
    image: str
    env: tuple[tuple[str, str], ...]
    compose_service: str | None
    running: bool
    runtime: str | None
    restart_policy: str | None
    gpu: bool = False
    healthcheck: tuple[str, ...] | None = None  # Config.Healthcheck.Test
    health_status: str | None = None
    health_output: str | None = None  # the last health probe's output
    networks: tuple[str, ...] = ()
    # what lets its processes set a NUMA memory policy (Docker's default seccomp profile allows
    # set_mempolicy and mbind only with CAP_SYS_NICE)
    cap_add: tuple[str, ...] = ()
    privileged: bool = False
    seccomp_unconfined: bool = False

    @property
    def numa_calls_allowed(self) -> bool:
        caps = {c.upper().removeprefix("CAP_") for c in self.cap_add}
        return self.privileged or self.seccomp_unconfined or bool({"SYS_NICE", "ALL"} & caps)

    def env_value(self, key: str) -> str | None:
        return next((v for k, v in self.env if k == key), None)

    def matches(self, name: str) -> bool:
        return name in (self.name, self.compose_service)


def _wants_gpu(host: dict[str, Any], env: dict[str, str]) -> bool:
    """--gpus / deploy.resources.devices (DeviceRequests), the nvidia runtime, or the
    NVIDIA_VISIBLE_DEVICES convention of the NVIDIA container toolkit."""
    for req in host.get("DeviceRequests") or []:
        caps = {c for group in req.get("Capabilities") or [] for c in group}
        if req.get("Driver") == "nvidia" or "gpu" in caps:
            return True
    visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
    return host.get("Runtime") == "nvidia" or visible not in ("", "void", "none")


def _container(doc: dict[str, Any]) -> Container:
    config = doc.get("Config") or {}
    host = doc.get("HostConfig") or {}
    labels = config.get("Labels") or {}
    env = tuple(tuple(e.split("=", 1)) if "=" in e else (e, "") for e in config.get("Env") or [])
    state = doc.get("State") or {}
    health = state.get("Health") or {}
    log = health.get("Log") or []
    test = (config.get("Healthcheck") or {}).get("Test")
    return Container(
        name=str(doc.get("Name", "")).lstrip("/"),
        container_id=str(doc.get("Id", ""))[:12],
        image=str(config.get("Image", "")),
        env=env,
        compose_service=labels.get("com.docker.compose.service"),
        running=bool((doc.get("State") or {}).get("Running")),
        runtime=host.get("Runtime"),
        restart_policy=(host.get("RestartPolicy") or {}).get("Name"),
        gpu=_wants_gpu(host, dict(env)),
        healthcheck=tuple(test) if test and test != ["NONE"] else None,
        health_status=health.get("Status"),
        health_output=str(log[-1].get("Output", "")).strip() if log else None,
        networks=tuple(sorted((doc.get("NetworkSettings") or {}).get("Networks") or {})),
        cap_add=tuple(str(c) for c in host.get("CapAdd") or [] if isinstance(c, str)),
        privileged=host.get("Privileged") is True,
        seccomp_unconfined=any(str(o).replace(":", "=") == "seccomp=unconfined"
                               for o in host.get("SecurityOpt") or []),
    )


def parse_docker_inspect(text: str) -> tuple[Container, ...]:
    try:
        docs = load_json(text)
    except ValueError as exc:
        raise ParseError(f"docker inspect output is not JSON: {excerpt(text, 80)!r}") from exc
    if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs):
        raise ParseError("docker inspect output is not a list of objects")
    return tuple(_container(d) for d in docs)


@dataclass(frozen=True)
class Network:
    name: str
    internal: bool
    containers: tuple[str, ...]  # container names attached


def parse_docker_networks(text: str) -> tuple[Network, ...]:
    """``docker network inspect`` of every network."""
    try:
        docs = load_json(text)
        return tuple(Network(str(d["Name"]), bool(d.get("Internal")),
                             tuple(sorted(str(c.get("Name", "")) for c in
                                          (d.get("Containers") or {}).values())))
                     for d in docs)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ParseError(f"docker network inspect output is not the expected JSON: {exc}") from exc
