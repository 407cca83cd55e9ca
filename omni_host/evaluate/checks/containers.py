"""containers.glibc-tunables (F-010): on Zen 5, the named containers run with all five
AVX-512 hwcaps masked in GLIBC_TUNABLES. Masking two (AVX512F, AVX512VL) was not enough."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.policy import ZEN5_HWCAPS, Policy, masked_hwcaps
from omni_host.probes.parsers.docker import Container


def _verdict(name: str, found: list[Container]) -> tuple[bool, str]:
    if not found:
        return False, f"{name}: not running"
    container = found[0]
    value = container.env_value("GLIBC_TUNABLES")
    missing = [cap for cap in ZEN5_HWCAPS if cap not in masked_hwcaps(value)]
    if value is None:
        return False, f"{name}: no GLIBC_TUNABLES"
    if missing:
        return False, f"{name}: GLIBC_TUNABLES={value} leaves {','.join(missing)} unmasked"
    return True, f"{name}: GLIBC_TUNABLES={value}"


@check("containers.glibc-tunables")
def glibc_tunables(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    names = policy.zen5_tunables_containers
    expected = {"containers": list(names), "masked": list(ZEN5_HWCAPS)}
    if not names:
        return meta.no_policy("omni_zen5_tunables_containers")
    cpu = facts.cpu()
    if not cpu.ok:
        return meta.not_evaluated(cpu, expected=expected)
    cpu_evidence = Evidence(cpu.probe_id, cpu.command, (cpu.fact.describe(),))
    if not cpu.fact.is_zen5 and not policy.tunables_everywhere:
        return meta.result(Status.SKIP, f"not applicable: {cpu.fact.describe()} is not Zen 5 "
                           "(AMD family 26)", expected=expected, evidence=(cpu_evidence,))
    docker = facts.get("docker.containers")
    if not docker.ok:
        return meta.not_evaluated(docker, expected=expected)
    containers: tuple[Container, ...] = docker.fact
    verdicts = [_verdict(n, [c for c in containers if c.matches(n) and c.running]) for n in names]
    lines = tuple(text for _, text in verdicts)
    evidence = (cpu_evidence, Evidence(docker.probe_id, docker.command, lines))
    bad = [text for ok, text in verdicts if not ok]
    where = "Zen 5 host" if cpu.fact.is_zen5 else "omni_tunables_everywhere"
    actual = {n: text for n, (_, text) in zip(names, verdicts, strict=True)}
    if bad:
        return meta.result(Status.FAIL, f"{where}: " + "; ".join(bad), expected=expected,
                           actual=actual, evidence=evidence)
    return meta.result(Status.PASS, f"{where}: {len(names)} container(s) mask all five "
                       "AVX-512 hwcaps", expected=expected, actual=actual, evidence=evidence)
