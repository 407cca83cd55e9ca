"""numa.nps1 (S-005): the NUMA node count equals the policy (1 = NPS1 on one socket)."""

from __future__ import annotations

from omni_host.evaluate.checks import CheckMeta, check
from omni_host.evaluate.facts import HostFacts
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.numa import NumaTopology


@check("numa.nps1")
def nps1(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    if policy.numa_nodes is None:
        return meta.no_policy("omni_numa_nodes")
    expected = policy.numa_nodes
    probe = facts.first_observed("numa.numactl", "numa.sysfs")
    if not probe.ok:
        return meta.not_evaluated(probe, expected=expected)
    topo: NumaTopology = probe.fact
    lines = (topo.summary_line, *(f"node {n.node_id} size: {n.size_mib} MB" for n in topo.nodes))
    evidence = (Evidence(probe.probe_id, probe.command, lines[:9]),)
    via = "" if topo.source == "numactl" else " (from sysfs: numactl is not installed)"
    details = {"memoryless_nodes": list(topo.memoryless_nodes), "source": topo.source}
    if topo.node_count == expected:
        return meta.result(Status.PASS, f"{topo.node_count} NUMA node(s), as expected{via}",
                           expected=expected, actual=topo.node_count, evidence=evidence,
                           details=details)
    hint = " (BIOS NPS4 or NPS2?)" if topo.node_count > expected else ""
    return meta.result(Status.FAIL, f"{topo.node_count} NUMA nodes, expected {expected}{hint}{via}",
                       expected=expected, actual=topo.node_count, evidence=evidence, details=details)
