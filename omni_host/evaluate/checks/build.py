"""cuda.toolkit (F-012, F-001) and llamacpp.build (F-003, S-001)."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.build import BinaryFacts, GpuQuery

CUDA_FOR_CC12 = (12, 8)


def _cc12(gpus: tuple[GpuQuery, ...]) -> list[GpuQuery]:
    return [g for g in gpus if g.compute_cap and g.compute_cap[0] == 12]


@check("cuda.toolkit")
def cuda_toolkit(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    query = facts.get("gpu.query")
    if not query.ok:
        return meta.not_evaluated(query)
    gpus: tuple[GpuQuery, ...] = query.fact
    caps = [f"GPU{g.index} {g.name}: {'.'.join(map(str, g.compute_cap or ()))}" for g in gpus]
    evidence = [Evidence(query.probe_id, query.command, tuple(caps))]
    needy = _cc12(gpus)
    if not needy:
        return meta.result(Status.PASS, "no GPU of compute capability 12.x: any CUDA 12 works",
                           actual=caps, evidence=tuple(evidence))
    problems = []
    smi = facts.get("gpu.nvidia-smi")
    driver_cuda = smi.fact.cuda_version if smi.ok else None
    if driver_cuda and tuple(int(x) for x in driver_cuda.split(".")[:2]) < CUDA_FOR_CC12:
        problems.append(f"driver supports CUDA {driver_cuda}")
    nvcc = facts.get("cuda.nvcc")
    if nvcc.ok:
        evidence.append(Evidence(nvcc.probe_id, nvcc.command, (f"release {nvcc.fact.full}",)))
        if nvcc.fact.version < CUDA_FOR_CC12:
            problems.append(f"toolkit is CUDA {nvcc.fact.full}")
    actual = {"gpus": caps, "driver_cuda": driver_cuda,
              "toolkit": nvcc.fact.full if nvcc.ok else None}
    names = ", ".join(g.name for g in needy)
    if problems:
        return meta.result(Status.FAIL, f"{names} need CUDA >= 12.8 but the "
                           + " and the ".join(problems), expected=">= 12.8", actual=actual,
                           evidence=tuple(evidence))
    if not nvcc.ok:
        return meta.result(Status.WARN, f"{names} need CUDA >= 12.8; no toolkit found to build "
                           f"with ({nvcc.reason})", expected=">= 12.8", actual=actual,
                           evidence=tuple(evidence))
    return meta.result(Status.PASS, f"CUDA {nvcc.fact.full} (driver {driver_cuda}) for {names}",
                       expected=">= 12.8", actual=actual, evidence=tuple(evidence))


def _binary_line(b: BinaryFacts, vmm: BinaryFacts | None) -> str:
    code = ",".join(b.archs) or "no device code"
    state = "unknown" if vmm is None or vmm.error else ("on" if vmm.vmm else "OFF")
    return f"{b.path}: {code}; CUDA VMM {state}"


@check("llamacpp.build")
def llamacpp_build(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    if not policy.llamacpp_binaries:
        return meta.no_policy("omni_llamacpp_binaries")
    elf = facts.get("llamacpp.cuobjdump")
    if not elf.ok:
        return meta.not_evaluated(elf)
    readelf = facts.get("llamacpp.readelf")
    dyn: dict[str, BinaryFacts] = readelf.fact if readelf.ok else {}
    query = facts.get("gpu.query")
    want = sorted({f"sm_{g.compute_cap[0]}{g.compute_cap[1]}" for g in query.fact
                   if g.compute_cap}) if query.ok else []
    problems, lines = [], []
    for path in policy.llamacpp_binaries:
        binary: BinaryFacts | None = elf.fact.get(path)
        if binary is None or binary.error:
            problems.append(f"{path}: {binary.error if binary else 'not examined'}")
            continue
        lines.append(_binary_line(binary, dyn.get(path)))
        missing = [sm for sm in want if sm not in binary.archs and f"{sm}a" not in binary.archs]
        if missing:
            problems.append(f"{path} lacks {','.join(missing)} code (has {','.join(binary.archs)})")
        vmm = dyn.get(path)
        if vmm is not None and not vmm.error and not vmm.vmm:
            problems.append(f"{path} was built with CUDA VMM off (GGML_CUDA_NO_VMM: F-003)")
    evidence = (Evidence(elf.probe_id, elf.command, tuple(lines)),
                Evidence(readelf.probe_id, readelf.command,
                         tuple(f"{p}: NEEDED {', '.join(b.needed)}" for p, b in dyn.items())
                         if dyn else (readelf.why_not(),)))
    expected = {"device_code": want, "cuda_vmm": True}
    if problems:
        return meta.result(Status.FAIL, "; ".join(problems), expected=expected, actual=lines,
                           evidence=evidence)
    if not readelf.ok:
        return meta.result(Status.WARN, f"device code as needed, but CUDA VMM could not be "
                           f"checked ({readelf.reason})", expected=expected, actual=lines,
                           evidence=evidence)
    return meta.result(Status.PASS, f"{len(lines)} binary(ies) carry {','.join(want) or 'device code'} "
                       "and CUDA VMM", expected=expected, actual=lines, evidence=evidence)
