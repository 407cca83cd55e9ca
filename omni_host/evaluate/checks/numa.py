"""numa.nps1 (S-005): NUMA nodes per socket equal the policy (1 = NPS1).

Two sockets in NPS1 show two nodes: the check divides by the sockets, taken from the CPU
topology (distinct ``physical id`` in /proc/cpuinfo) or, where only numactl's output is there,
from its distance matrix. The BIOS setting it names depends on the CPU: NPS on AMD Zen 2 and
later; on Zen 1 the nodes are the dies (memory interleaving decides); on Intel, Sub-NUMA
Clustering (SNC) or Cluster-on-Die. Nodes without CPUs (HBM in flat mode, CXL, NVDIMM) are
reported apart and not counted: no such setting made them.
"""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.model import CheckResult, Evidence, Remediation, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.cpu import CpuInfo
from omni_host.probes.parsers.numa import NumaTopology

ZEN1 = (23, 0x30)  # AMD family 23 below model 0x30: Zen and Zen+ (EPYC 7001, TR 1000/2000)


def bios_setting(cpu: CpuInfo | None, per_socket: int) -> str:
    """What to set in the BIOS for ``per_socket`` nodes, in this CPU's own terms."""
    if cpu is None:
        return f"the BIOS setting that gives {per_socket} NUMA node(s) per socket"
    if cpu.vendor == "AuthenticAMD":
        if (cpu.family, cpu.model or 0) < ZEN1 and cpu.family == ZEN1[0]:
            return ("no NPS setting on Zen 1: each die is a node; set memory interleaving to "
                    "'socket' (or 'channel') in the BIOS")
        return f"NPS{per_socket} (BIOS: CbsDfCmnDramNpsSHP=NPS{per_socket})"
    if cpu.vendor == "GenuineIntel":
        return "Sub-NUMA Clustering (SNC) or Cluster-on-Die off in the BIOS" if per_socket == 1 \
            else f"SNC{per_socket} in the BIOS"
    return f"the BIOS setting that gives {per_socket} NUMA node(s) per socket"


def _sockets(topo: NumaTopology, cpu: CpuInfo | None) -> tuple[int | None, str]:
    """The CPU topology's package ids first; the distance matrix only where they are missing,
    and not at all where it is ambiguous (the reason is returned instead)."""
    if cpu is not None and cpu.sockets:
        return cpu.sockets, f"{cpu.source} physical id"
    ambiguous = topo.distance_ambiguity()
    if ambiguous:
        return None, f"no physical id in /proc/cpuinfo, and the distance matrix is ambiguous: {ambiguous}"
    from_matrix = topo.sockets_from_distances()
    return from_matrix, "numactl distance matrix" if from_matrix else "unknown"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


@check("numa.nps1")
def nps1(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    if policy.numa_nps is None:
        return meta.no_policy("omni_numa_nps")
    expected = policy.numa_nps
    probe = facts.numa()
    if not probe.ok:
        return meta.not_evaluated(probe, expected=expected)
    topo: NumaTopology = probe.fact
    cpu_probe = facts.cpu()
    cpu: CpuInfo | None = cpu_probe.fact if cpu_probe.ok else None
    sockets, how = _sockets(topo, cpu)
    lines = (topo.summary_line, *(f"node {n.node_id} size: {n.size_mib} MB" for n in topo.nodes),
             *(f"{i}: {' '.join(map(str, row))}" for i, row in sorted(topo.distances.items())))
    evidence = (Evidence(probe.probe_id, probe.command, lines[:12]),)
    primary = facts.get("numa.numactl")  # why the fallback answered: its own reason
    via = "" if topo.source == "numactl" else \
        f" (from sysfs: numactl {primary.reason or 'gave no answer'})"
    memoryless = f"; memoryless node(s): {', '.join(map(str, topo.memoryless_nodes))}" \
        if topo.memoryless_nodes else ""
    if topo.cpuless_nodes:
        memoryless += (f"; {_count(len(topo.cpuless_nodes), 'CPU-less memory node')} (HBM, "
                       f"CXL or NVDIMM), not counted: {', '.join(map(str, topo.cpuless_nodes))}")
    details = {"memoryless_nodes": list(topo.memoryless_nodes), "source": topo.source,
               "cpuless_nodes": list(topo.cpuless_nodes), "nodes": topo.node_count,
               "sockets": sockets, "sockets_from": how}
    nodes = topo.cpu_node_count
    if sockets is None:
        why = how if how != "unknown" else ("no physical id in /proc/cpuinfo, no complete "
                                            "distance matrix")
        return meta.result(Status.SKIP, f"{nodes} NUMA nodes, but the sockets are "
                           f"unknown ({why}): nodes per socket cannot be told{via}",
                           expected=expected, evidence=evidence, details=details)
    if nodes < sockets:  # e.g. a VM whose vCPUs each claim a socket of their own
        return meta.result(Status.SKIP, f"the sources disagree: {_count(sockets, 'socket')} by "
                           f"{how}, but only {_count(nodes, 'NUMA node')} with CPUs{via}: a "
                           "virtual machine's CPU topology? nodes per socket cannot be told",
                           expected=expected, evidence=evidence, details=details)
    if nodes % sockets:
        return meta.result(Status.FAIL, f"{nodes} NUMA nodes on {sockets} sockets: "
                           f"not the same on every socket{memoryless}{via}", expected=expected,
                           actual=None, evidence=evidence, details=details)
    per_socket = nodes // sockets
    details["nodes_per_socket"] = per_socket
    where = (f"{_count(sockets, 'socket')} ({how}), "
             f"{_count(per_socket, 'NUMA node')} per socket")
    if per_socket == expected:
        return meta.result(Status.PASS, f"{where}, as expected{memoryless}{via}",
                           expected=expected, actual=per_socket, evidence=evidence,
                           details=details)
    setting = bios_setting(cpu, expected)
    return meta.result(Status.FAIL, f"{where}, expected {expected}: set "
                       f"{setting}{memoryless}{via}", expected=expected,
                       actual=per_socket, evidence=evidence, details=details,
                       remediation=fix_steps(meta, setting, expected, cpu))


# Where the setting sits in the BIOS of an Intel server (Sub-NUMA Clustering): the AMD menu
# path of the catalog's steps is not there (issue 47: an Intel machine was told both).
INTEL_MENU = ("Reboot into the BIOS/UEFI setup (Socket Configuration > Uncore Configuration > "
              "Uncore General Configuration > SNC, or the board's Memory Configuration menu).")
OTHER_MENU = "Reboot into the BIOS/UEFI setup (the CPU's memory or NUMA options)."


def fix_steps(meta: CheckMeta, setting: str, expected: int,
              cpu: CpuInfo | None = None) -> Remediation:
    """The catalog's BIOS steps for the policy's own value and this CPU's vendor: a finding
    that says "set NPS4" never lists "NPS1" under it (the catalog's steps are written for the
    default, NPS1), and an Intel machine is never sent to the AMD CBS menu."""
    vendor = cpu.vendor if cpu is not None else None
    menu = meta.remediation.steps[0] if vendor == "AuthenticAMD" else \
        INTEL_MENU if vendor == "GenuineIntel" else OTHER_MENU
    return Remediation("manual", None, (
        menu,
        f"Set {setting}, save and reboot.",
        f"Verify: numactl --hardware prints {_count(expected, 'node')} per socket."))
