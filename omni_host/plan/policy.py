"""The expected state of a host, read from its inventory variables and validated once.

Every variable is documented in ``docs/inventory.md``; the reference host of the lessons
registry ships in ``inventory/group_vars/inference.yml`` and is also the built-in default when
no inventory is given. The remediation playbooks read the same variables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml

from omni_host.errors import InventoryError
from omni_host.resources import data_path

ZEN5_HWCAPS = ("AVX512F", "AVX512VL", "AVX512BW", "AVX512CD", "AVX512DQ")
_VERSION = re.compile(r"^\d+(\.\d+)*$")

KNOWN_VARS = frozenset({
    "omni_numa_nodes", "omni_gpu_driver_min", "omni_gpu_driver_recommended", "omni_gpus",
    "omni_swap_size_mib", "omni_swap_path", "omni_swap_max_used_pct",
    "omni_zen5_tunables_containers", "omni_glibc_tunables", "omni_tunables_everywhere",
    "omni_compose_file", "omni_tunables_systemd_units", "omni_base_packages",
    "omni_gpu_driver_package", "omni_gpu_driver_version", "omni_allow_reboot",
    "omni_llamacpp_binaries", "omni_models", "omni_disk_free", "omni_build_packages",
    "omni_inference_containers",
})
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
LOADERS = ("gguf", "full")


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def masked_hwcaps(tunables: str | None) -> set[str]:
    """The hwcaps a GLIBC_TUNABLES value masks: ``glibc.cpu.hwcaps=-A,-B`` among ``:``-separated
    tunables."""
    masked: set[str] = set()
    for tunable in (tunables or "").split(":"):
        name, _, value = tunable.partition("=")
        if name.strip() == "glibc.cpu.hwcaps":
            masked |= {v.strip()[1:].upper() for v in value.split(",") if v.strip().startswith("-")}
    return masked


@dataclass(frozen=True)
class ExpectedGpu:
    model: str  # matched case-insensitively as a substring of the product name
    vram_gib: float


@dataclass(frozen=True)
class ExpectedModel:
    path: str
    loader: str  # "gguf" (streams, mmap) or "full" (loads every weight into RAM first)


@dataclass(frozen=True)
class DiskHeadroom:
    path: str
    min_free_gib: float


@dataclass(frozen=True)
class Policy:
    numa_nodes: int | None = None
    gpu_driver_min: str | None = None
    gpu_driver_recommended: str | None = None
    gpus: tuple[ExpectedGpu, ...] | None = None
    swap_size_mib: int | None = None
    swap_path: str | None = None
    swap_max_used_pct: float = 50.0
    zen5_tunables_containers: tuple[str, ...] = ()
    tunables_everywhere: bool = False
    llamacpp_binaries: tuple[str, ...] = ()
    models: tuple[ExpectedModel, ...] = ()
    disk_free: tuple[DiskHeadroom, ...] = ()
    build_packages: tuple[str, ...] = ()
    inference_containers: tuple[str, ...] | None = None


def _fail(origin: str, var: str, msg: str) -> InventoryError:
    return InventoryError(f"{origin}: {var}: {msg}")


def _int(origin: str, values: dict[str, Any], var: str, minimum: int) -> int | None:
    value = values.get(var)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(origin, var, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _bool(origin: str, values: dict[str, Any], var: str) -> bool:
    """A boolean as Ansible reads one (``| bool``, argument specs): "false", "no", 0 are
    false; anything else that is not a boolean word is an error, never silently true."""
    value = values.get(var, False)
    if isinstance(value, bool):
        return value
    from ansible.module_utils.parsing.convert_bool import boolean

    try:
        return boolean(value, strict=True)
    except TypeError:
        raise _fail(origin, var, f"must be a boolean (true/false), got {value!r}") from None


def _version(origin: str, values: dict[str, Any], var: str) -> str | None:
    value = values.get(var)
    if value is None:
        return None
    if not _VERSION.match(str(value)):
        raise _fail(origin, var, f"must be a dotted version like 580.126.09, got {value!r}")
    return str(value)


def _gpus(origin: str, value: Any) -> tuple[ExpectedGpu, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _fail(origin, "omni_gpus", "must be a list of {model, vram_gib}")
    gpus = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("model"), str):
            raise _fail(origin, f"omni_gpus[{i}]", "needs a 'model' string")
        vram = item.get("vram_gib")
        if isinstance(vram, bool) or not isinstance(vram, (int, float)) or vram <= 0:
            raise _fail(origin, f"omni_gpus[{i}].vram_gib", f"must be a positive number, got {vram!r}")
        gpus.append(ExpectedGpu(item["model"], float(vram)))
    return tuple(gpus)


def _abs_paths(origin: str, values: dict[str, Any], var: str) -> tuple[str, ...]:
    value = values.get(var) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.startswith("/") for v in value):
        raise _fail(origin, var, "must be a list of absolute paths")
    return tuple(value)


def _records(origin: str, values: dict[str, Any], var: str, keys: tuple[str, ...]) -> list[dict]:
    value = values.get(var) or []
    if not isinstance(value, list):
        raise _fail(origin, var, f"must be a list of {{{', '.join(keys)}}}")
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) \
                or not item["path"].startswith("/"):
            raise _fail(origin, f"{var}[{i}]", "needs an absolute 'path'")
    return value


def _catalog_vars(origin: str, values: dict[str, Any]) -> dict[str, Any]:
    """The variables of the wider catalog (issue: the full check catalog)."""
    models = []
    for i, item in enumerate(_records(origin, values, "omni_models", ("path", "loader"))):
        loader = item.get("loader", "gguf")
        if loader not in LOADERS:
            raise _fail(origin, f"omni_models[{i}].loader", f"must be one of {LOADERS}, got {loader!r}")
        models.append(ExpectedModel(item["path"], loader))
    disks = []
    for i, item in enumerate(_records(origin, values, "omni_disk_free", ("path", "min_free_gib"))):
        free = item.get("min_free_gib")
        if isinstance(free, bool) or not isinstance(free, (int, float)) or free <= 0:
            raise _fail(origin, f"omni_disk_free[{i}].min_free_gib", f"must be > 0, got {free!r}")
        disks.append(DiskHeadroom(item["path"], float(free)))
    packages = values.get("omni_build_packages") or []
    if not isinstance(packages, list) or not all(isinstance(p, str) and _PACKAGE.match(p)
                                                 for p in packages):
        raise _fail(origin, "omni_build_packages", "must be a list of Debian package names")
    inference = values.get("omni_inference_containers")
    if inference is not None and (not isinstance(inference, list) or
                                  not all(isinstance(c, str) and c for c in inference)):
        raise _fail(origin, "omni_inference_containers", "must be a list of container names")
    return {"llamacpp_binaries": _abs_paths(origin, values, "omni_llamacpp_binaries"),
            "models": tuple(models), "disk_free": tuple(disks),
            "build_packages": tuple(packages),
            "inference_containers": tuple(inference) if inference is not None else None}


def policy_from_vars(values: dict[str, Any], origin: str) -> Policy:
    """Validate the ``omni_*`` variables of one host; an unknown ``omni_`` name is an error
    (a typo would otherwise silently turn a check off)."""
    unknown = sorted(k for k in values if k.startswith("omni_") and k not in KNOWN_VARS)
    if unknown:
        raise InventoryError(f"{origin}: unknown variable(s) {', '.join(unknown)} "
                             "(see docs/inventory.md)")
    pct = values.get("omni_swap_max_used_pct", 50)
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 100:
        raise _fail(origin, "omni_swap_max_used_pct", f"must be in (0, 100], got {pct!r}")
    containers = values.get("omni_zen5_tunables_containers") or []
    if not isinstance(containers, list) or not all(isinstance(c, str) and c for c in containers):
        raise _fail(origin, "omni_zen5_tunables_containers", "must be a list of container names")
    tunables = values.get("omni_glibc_tunables")
    if tunables is not None:
        missing = [cap for cap in ZEN5_HWCAPS if cap not in masked_hwcaps(str(tunables))]
        if missing:
            raise _fail(origin, "omni_glibc_tunables", f"must mask all five AVX-512 hwcaps "
                        f"(F-010: two were not enough); {','.join(missing)} missing")
    compose = values.get("omni_compose_file")
    if compose is not None and not (isinstance(compose, str) and compose.startswith("/")):
        raise _fail(origin, "omni_compose_file", f"must be an absolute path, got {compose!r}")
    swap_path = values.get("omni_swap_path")
    if swap_path is not None and not (isinstance(swap_path, str) and swap_path.startswith("/")):
        raise _fail(origin, "omni_swap_path", f"must be an absolute path, got {swap_path!r}")
    return Policy(
        numa_nodes=_int(origin, values, "omni_numa_nodes", 1),
        gpu_driver_min=_version(origin, values, "omni_gpu_driver_min"),
        gpu_driver_recommended=_version(origin, values, "omni_gpu_driver_recommended"),
        gpus=_gpus(origin, values.get("omni_gpus")),
        swap_size_mib=_int(origin, values, "omni_swap_size_mib", 0),
        swap_path=swap_path,
        swap_max_used_pct=float(pct),
        zen5_tunables_containers=tuple(containers),
        tunables_everywhere=_bool(origin, values, "omni_tunables_everywhere"),
        **_catalog_vars(origin, values),
    )


@lru_cache(maxsize=1)
def reference_vars() -> dict[str, Any]:
    """The reference host's variables (the lessons' 9995WX box), the built-in default."""
    path = data_path("inventory") / "group_vars" / "inference.yml"
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))
