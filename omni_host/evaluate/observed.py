"""``omni-host init``: a known-good host's observed state, written as its expected state
(``host_vars``), like goss autoadd or NHC's genconf. Pure: facts -> variables -> YAML text."""

from __future__ import annotations

import difflib
from typing import Any

from omni_host.evaluate.facts import HostFacts
from omni_host.plan.policy import ZEN5_HWCAPS, Policy, masked_hwcaps


def observed_vars(facts: HostFacts, policy: Policy | None = None) -> dict[str, Any]:
    """The ``omni_*`` variables that describe what this host is now. Only what was observed is
    written: an unobserved fact never becomes an expectation. ``policy``: the one the host was
    collected under; of its build packages, those installed are recorded (else the role's
    default list would judge the host's next audit)."""
    out: dict[str, Any] = {}
    numa = facts.numa()
    cpu = facts.cpu()
    if numa.ok:
        sockets = (cpu.fact.sockets if cpu.ok else None) or numa.fact.sockets_from_distances()
        if sockets and numa.fact.cpu_node_count % sockets == 0:
            out["omni_numa_nps"] = numa.fact.cpu_node_count // sockets
    gpus = facts.gpus()
    if gpus.ok and gpus.fact.gpus:
        out["omni_gpu_driver_min"] = gpus.fact.driver_version
        out["omni_gpus"] = [{"model": g.name.removeprefix("NVIDIA "),
                             "vram_gib": round((g.memory_total_mib or 0) / 1024)}
                            for g in gpus.fact.gpus]
    swaps = facts.get("mem.swaps")
    if swaps.ok:
        # /proc/swaps leaves out the header page: a 64 MiB file shows 65532 KiB
        out["omni_swap_size_mib"] = round(sum(a.size_kib for a in swaps.fact) / 1024)
        files = [a.path for a in swaps.fact if a.kind == "file"]
        if len(swaps.fact) == 1 and files:
            out["omni_swap_path"] = files[0]
    dpkg = facts.get("packages.dpkg")
    if policy is not None and dpkg.ok:
        out["omni_build_packages"] = [p for p in policy.build_packages if dpkg.fact.get(p)]
    docker = facts.get("docker.containers")
    if cpu.ok and cpu.fact.is_zen5 and docker.ok:
        masked = sorted(c.compose_service or c.name for c in docker.fact if c.running and
                        set(ZEN5_HWCAPS) <= masked_hwcaps(c.env_value("GLIBC_TUNABLES")))
        if masked:
            out["omni_zen5_tunables_containers"] = masked
    return out


def merged_text(existing: dict[str, Any], observed: dict[str, Any], host: str) -> str:
    import yaml  # only ``init`` writes YAML: an audit or a bench never loads it

    merged = {**existing, **observed}
    header = (f"# Expected state of {host}, recorded from the host by `omni-host init`.\n"
              "# Edit freely: omni-host audit and the playbooks read these variables.\n")
    return header + yaml.safe_dump(merged, sort_keys=False, default_flow_style=False)


def diff(old: str, new: str, name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                        f"{name} (now)", f"{name} (observed)"))
