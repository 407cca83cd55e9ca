"""model.fit (F-020, F-022) and model.architecture (F-008): real sizes on disk and GGUF headers,
read on the host without reading the weights."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.measure.rules import size_text
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.host import ModelFacts, ModelFile


def _models(facts: HostFacts, policy: Policy, meta: CheckMeta) -> ModelFacts | CheckResult:
    if not policy.models:
        return meta.no_policy("omni_models")
    probe = facts.get("model.files")
    return probe.fact if probe.ok else meta.not_evaluated(probe)


def _line(m: ModelFile) -> str:
    if m.error:
        return f"{m.path}: {m.error}"
    return f"{m.path}: {size_text(m.size_bytes)} in {m.files} file(s), architecture {m.architecture}"


@check("model.fit")
def model_fit(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    models = _models(facts, policy, meta)
    if isinstance(models, CheckResult):
        return models
    mem = facts.memory()
    if not mem.ok:
        return meta.not_evaluated(mem)
    ram = mem.fact.mem_total_kib * 1024
    swap = mem.fact.swap_total_kib * 1024
    gpus = facts.gpus()
    vram = sum((g.memory_total_mib or 0) for g in gpus.fact.gpus) * 1024 ** 2 if gpus.ok else 0
    budget = {"full": ram + swap, "gguf": ram + swap + vram}
    by_path = {m.path: m for m in models.models}
    bad: list[str] = []
    warn: list[str] = []
    lines: list[str] = []
    for want in policy.models:
        m = by_path.get(want.path)
        if m is None or m.error:
            bad.append(m.error if m and m.error else f"{want.path}: not examined")
            continue
        lines.append(_line(m))
        if m.size_bytes > budget[want.loader]:
            text = (f"{want.path} is {size_text(m.size_bytes)}, more than RAM+swap "
                    f"({size_text(ram)} + {size_text(swap)})")
            (bad if want.loader == "full" else warn).append(
                text + (" and a full loader holds it all in memory (F-022)" if want.loader == "full"
                        else f" + VRAM {size_text(vram)}: mmap streaming will thrash"))
    evidence = (Evidence("model.files", "model helper (sizes, GGUF headers)", tuple(lines)),
                Evidence(mem.probe_id, mem.command, (f"RAM {size_text(ram)}, swap {size_text(swap)}",)))
    actual = {"ram_bytes": ram, "swap_bytes": swap, "vram_bytes": vram, "models": lines}
    if bad:
        return meta.result(Status.FAIL, "; ".join(bad), actual=actual, evidence=evidence)
    if warn:
        return meta.result(Status.WARN, "; ".join(warn), actual=actual, evidence=evidence)
    return meta.result(Status.PASS, f"{len(lines)} model(s) fit their loaders' memory "
                       f"(RAM+swap {size_text(ram + swap)})", actual=actual, evidence=evidence)


@check("model.architecture")
def model_architecture(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    models = _models(facts, policy, meta)
    if isinstance(models, CheckResult):
        return models
    if not policy.llamacpp_binaries:
        return meta.no_policy("omni_llamacpp_binaries",
                              "no omni_llamacpp_binaries in the policy to compare with")
    bad, lines = [], []
    for m in models.models:
        if m.error:
            bad.append(m.error)
            continue
        if m.architecture is None:
            lines.append(f"{m.path}: not a GGUF file, architecture not checked")
            continue
        knowing = [b for b, known in models.binaries.items() if known.get(m.architecture)]
        lines.append(f"{m.path}: {m.architecture}, known to {', '.join(knowing) or 'no binary'}")
        if not knowing:
            bad.append(f"{m.path}: architecture {m.architecture} is not supported by the installed "
                       "llama.cpp")
    bad.extend(f"{b}: {e}" for b, e in models.binary_errors.items())
    evidence = (Evidence("model.files", "model helper (sizes, GGUF headers)", tuple(lines)),)
    if bad:
        return meta.result(Status.FAIL, "; ".join(bad), actual=lines, evidence=evidence)
    return meta.result(Status.PASS, f"{len(lines)} model(s) use architectures llama.cpp knows",
                       actual=lines, evidence=evidence)
