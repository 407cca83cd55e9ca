"""gpu.driver-version (S-013) and gpu.topology (S-003, F-002, F-024, S-014)."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check, check_with_past
from omni_host.evaluate.prior import Prior
from omni_host.measure.plan import measured_here
from omni_host.measure.rules import ASYMMETRY_RATIO, tensor_split
from omni_host.model import CheckResult, Evidence, Outcome, ProbeResult, Remediation, Status
from omni_host.plan.policy import ExpectedGpu, Policy, version_tuple
from omni_host.probes.parsers.nvidia import Gpu, GpuInventory, TopoMatrix

# S-013: Linux 6.19+ compatibility arrived in 580.126.09.
KERNEL_NEEDS_NEWER = (6, 19)
DRIVER_FOR_NEW_KERNEL = "580.126.09"
# VRAM as reported (97887 MiB for a "96 GB" card) may differ from the marketing size.
VRAM_TOLERANCE = 0.10


def _gpu_probe(facts: HostFacts) -> ProbeResult:
    return facts.gpus()


def _gpu_line(gpu: Gpu) -> str:
    mem = f"{gpu.memory_total_mib} MiB" if gpu.memory_total_mib is not None else "VRAM unknown"
    return f"GPU{gpu.index}: {gpu.name}, {mem}"


def _no_gpu(meta: CheckMeta, probe: ProbeResult, policy: Policy, expected: object) -> CheckResult:
    """No NVIDIA driver answered. A failure when the policy expects GPUs."""
    evidence = (Evidence(probe.probe_id, probe.command, (probe.reason,)),)
    if probe.outcome is Outcome.UNPARSEABLE or probe.not_collected:
        return meta.not_evaluated(probe, expected=expected)
    if "permission denied" in probe.reason:
        return meta.not_evaluated(probe, expected=expected)
    if policy.gpus or policy.gpu_driver_min:
        count = len(policy.gpus) if policy.gpus else "NVIDIA"
        return meta.result(Status.FAIL, f"policy expects {count} GPU(s) but no NVIDIA driver "
                           f"answers: {probe.why_not()}", expected=expected, actual=None,
                           evidence=evidence)
    return meta.no_policy("omni_gpus", "no GPU expected by the policy and none found",
                          expected=expected, evidence=evidence)


@check("gpu.driver-version")
def driver_version(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    expected = {"min": policy.gpu_driver_min, "recommended": policy.gpu_driver_recommended}
    probe = _gpu_probe(facts)
    if not probe.ok:
        return _no_gpu(meta, probe, policy, expected)
    inv: GpuInventory = probe.fact
    lines = (f"driver_version {inv.driver_version}", f"cuda_version {inv.cuda_version}",
             *(_gpu_line(g) for g in inv.gpus))
    evidence = (Evidence(probe.probe_id, probe.command, lines),)
    actual = inv.driver_version
    if not inv.gpus or inv.driver_version is None:
        if not (policy.gpus or policy.gpu_driver_min):
            return meta.no_policy("omni_gpus", "no GPU expected by the policy and none found",
                                  expected=expected, evidence=evidence)
        return meta.result(Status.FAIL, "the NVIDIA driver answers but reports no GPU",
                           expected=expected, actual=actual, evidence=evidence)
    have = version_tuple(inv.driver_version)
    if policy.gpu_driver_min and have < version_tuple(policy.gpu_driver_min):
        return meta.result(Status.FAIL, f"driver {actual} is below the minimum "
                           f"{policy.gpu_driver_min}", expected=expected, actual=actual,
                           evidence=evidence)
    kernel = facts.get("system.kernel")
    if kernel.ok and kernel.fact.version[:2] >= KERNEL_NEEDS_NEWER and \
            have < version_tuple(DRIVER_FOR_NEW_KERNEL):
        return meta.result(Status.FAIL, f"kernel {kernel.fact.release} needs driver >= "
                           f"{DRIVER_FOR_NEW_KERNEL}, found {actual}", expected=expected,
                           actual=actual, evidence=evidence + (
                               Evidence(kernel.probe_id, kernel.command, (kernel.fact.release,)),))
    rec = policy.gpu_driver_recommended
    if rec and have < version_tuple(rec):
        return meta.result(Status.WARN, f"driver {actual} works but {rec} is recommended",
                           expected=expected, actual=actual, evidence=evidence)
    return meta.result(Status.PASS, f"driver {actual} (CUDA {inv.cuda_version}) on "
                       f"{len(inv.gpus)} GPU(s)", expected=expected, actual=actual,
                       evidence=evidence)


def _match_gpus(expected: tuple[ExpectedGpu, ...], gpus: tuple[Gpu, ...]) -> list[str]:
    """Problems found pairing each expected GPU with a distinct real one."""
    free = list(gpus)
    problems = []
    for want in expected:
        name_ok = [g for g in free if want.model.lower() in g.name.lower()]
        sized = [g for g in name_ok if g.memory_gib is not None and
                 abs(g.memory_gib - want.vram_gib) <= VRAM_TOLERANCE * want.vram_gib]
        if sized:
            free.remove(sized[0])
        elif name_ok:
            free.remove(name_ok[0])
            problems.append(f"{want.model}: expected {want.vram_gib:g} GiB, found "
                            f"{name_ok[0].memory_gib or 0:.0f} GiB")
        else:
            problems.append(f"missing {want.model} ({want.vram_gib:g} GiB)")
    problems.extend(f"unexpected {g.name}" for g in free)
    return problems


def _split_advice(gpus: tuple[Gpu, ...], links: list[tuple[str, str, str]] | None,
                  ) -> tuple[str, list[int] | None]:
    """The llama.cpp split to use; ``links`` is None when the topology was not observed (then
    NVLink is unknown, never "absent")."""
    mem = [g.memory_total_mib for g in gpus]
    if len(gpus) < 2 or any(m is None for m in mem):
        return "single GPU: no split needed", None
    sizes: list[int] = [m for m in mem if m is not None]
    split = tensor_split(sizes)
    if max(sizes) > ASYMMETRY_RATIO * min(sizes):
        return (f"asymmetric VRAM: use a layer split, --split-mode layer --tensor-split "
                f"{','.join(map(str, split))}; never tensor-parallel / split-mode graph (F-002, F-024)",
                split)
    if links is None:
        link = "NVLink unknown: the GPU topology was not observed"
    elif any(cell.startswith("NV") for _, _, cell in links):
        link = "NVLink present"
    else:
        link = "no NVLink: peer traffic crosses PCIe"
    return f"symmetric VRAM ({link}): --split-mode layer is safe; even split", split


@check_with_past("gpu.topology")
def topology(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior) -> CheckResult:
    """The GPU set against the policy and the split advice; on several GPUs with a stored
    placement plan, what its proof measured here quoted beside the registry's rule."""
    result = _topology(facts, policy, meta)
    quote = measured_here(*prior.plan) if prior.plan is not None else None
    return result.noted(quote, "measured_here", quote) if quote else result


def _topology(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    expected = None if policy.gpus is None else [
        {"model": g.model, "vram_gib": g.vram_gib} for g in policy.gpus]
    probe = _gpu_probe(facts)
    if not probe.ok:
        if policy.gpus is None:
            return meta.no_policy("omni_gpus")
        return _no_gpu(meta, probe, policy, expected)
    inv: GpuInventory = probe.fact
    gpus = inv.gpus
    topo = facts.get("gpu.topo")
    p2p = facts.get("gpu.p2p")
    links = topo.fact.links() if topo.ok else []
    p2p_links = p2p.fact.links() if p2p.ok else []
    advice, split = _split_advice(gpus, links if topo.ok else None)
    evidence = [Evidence(probe.probe_id, probe.command, tuple(_gpu_line(g) for g in gpus))]
    for res in (topo, p2p):
        matrix: TopoMatrix | None = res.fact if res.ok else None
        evidence.append(Evidence(res.probe_id, res.command,
                                 matrix.rows if matrix else (res.why_not(),)))
    actual = [{"model": g.name, "vram_mib": g.memory_total_mib} for g in gpus]
    details = {
        "links": [{"a": a, "b": b, "link": c} for a, b, c in links],
        "p2p_read": [{"a": a, "b": b, "status": c} for a, b, c in p2p_links],
        "tensor_split": split,
        "advice": advice,
    }
    if policy.gpus is None:
        return meta.result(Status.PASS, f"{len(gpus)} GPU(s); {advice}", actual=actual,
                           evidence=tuple(evidence), details=details)
    problems = _match_gpus(policy.gpus, gpus)
    if problems:
        return meta.result(Status.FAIL, "GPU set differs from the policy: " + "; ".join(problems),
                           expected=expected, actual=actual, evidence=tuple(evidence),
                           details=details, remediation=Remediation(
                               "manual", None, (*meta.remediation.steps, advice)))
    # No peer reads is fine for a layer split (activations hop once per boundary), so it is
    # reported, not failed.
    blocked = [f"{a}-{b} {c}" for a, b, c in p2p_links if c not in ("OK", "X")]
    p2p_note = f"; no P2P reads between {', '.join(blocked)}" if blocked else ""
    return meta.result(Status.PASS, f"{len(gpus)} GPU(s) as planned{p2p_note}; {advice}",
                       expected=expected, actual=actual, evidence=tuple(evidence), details=details)
