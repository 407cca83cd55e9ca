"""docker.gpu-runtime (F-004), docker.isolation (S-004), docker.restart-policy (S-012) and
docker.healthchecks (F-021), all from one ``docker inspect`` of the running containers."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.docker import Container
from omni_host.remote.collector import MISSING_TOOL

RESTARTING = ("always", "unless-stopped")


def _containers(facts: HostFacts, meta: CheckMeta) -> tuple[Container, ...] | CheckResult:
    probe = facts.get("docker.containers")
    return probe.fact if probe.ok else meta.not_evaluated(probe)


def _evidence(facts: HostFacts, lines: list[str]) -> tuple[Evidence, ...]:
    probe = facts.get("docker.containers")
    return (Evidence(probe.probe_id, probe.command, tuple(lines)),)


def _inference_targets(facts: HostFacts, policy: Policy,
                       meta: CheckMeta) -> list[Container] | CheckResult:
    """The running inference containers (the policy's, else every GPU container), or the
    result that says why there is nothing to check."""
    containers = _containers(facts, meta)
    if isinstance(containers, CheckResult):
        return containers
    running = [c for c in containers if c.running]
    if policy.inference_containers is None:
        targets = [c for c in running if c.gpu]
    else:
        targets = [c for c in running if any(c.matches(n) for n in policy.inference_containers)]
    return targets or meta.result(Status.SKIP, "no inference container running")


@check("docker.gpu-runtime")
def gpu_runtime(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    containers = _containers(facts, meta)
    if isinstance(containers, CheckResult):
        return containers
    gpu = [c for c in containers if c.gpu and c.running]
    lines = [f"{c.name}: runtime {c.runtime or 'runc'}" for c in gpu]
    bad = [c.name for c in gpu if c.runtime == "runsc"]
    if bad:
        return meta.result(Status.FAIL, f"GPU container(s) under gVisor (runsc): {', '.join(bad)}",
                           actual=lines, evidence=_evidence(facts, lines))
    return meta.result(Status.PASS, f"{len(gpu)} GPU container(s), none under gVisor",
                       actual=lines, evidence=_evidence(facts, lines))


@check("docker.isolation")
def isolation(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    targets = _inference_targets(facts, policy, meta)
    if isinstance(targets, CheckResult):
        return targets
    nets = facts.get("docker.networks")
    if not nets.ok:
        return meta.not_evaluated(nets)
    internal = {n.name: n.internal for n in nets.fact}
    lines, bad = [], []
    for c in targets:
        open_nets = [n for n in c.networks if not internal.get(n, False)]
        lines.append(f"{c.name}: networks {', '.join(c.networks) or 'none'}")
        if open_nets:
            bad.append(f"{c.name} on non-internal network(s) {', '.join(open_nets)}")
    evidence = _evidence(facts, lines) + (Evidence(
        nets.probe_id, nets.command, tuple(f"{n}: internal={v}" for n, v in internal.items())),)
    if bad:
        return meta.result(Status.FAIL, "; ".join(bad), actual=lines, evidence=evidence)
    return meta.result(Status.PASS, f"{len(targets)} inference container(s) only on internal "
                       "networks", actual=lines, evidence=evidence)


@check("docker.restart-policy")
def restart_policy(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    targets = _inference_targets(facts, policy, meta)
    if isinstance(targets, CheckResult):
        return targets
    lines = [f"{c.name}: restart {c.restart_policy or 'no'}" for c in targets]
    bad = [c.name for c in targets if c.restart_policy not in RESTARTING]
    if bad:
        return meta.result(Status.FAIL, f"will not come back after a reboot: {', '.join(bad)}",
                           actual=lines, evidence=_evidence(facts, lines))
    return meta.result(Status.PASS, f"{len(targets)} inference container(s) restart after a reboot",
                       actual=lines, evidence=_evidence(facts, lines))


def missing_tool(output: str | None) -> str | None:
    """The tool a failed healthcheck could not run, from its output."""
    match = MISSING_TOOL.search(output or "")
    return (match.group(1) or match.group(2)) if match else None


@check("docker.healthchecks")
def healthchecks(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    containers = _containers(facts, meta)
    if isinstance(containers, CheckResult):
        return containers
    checked = [c for c in containers if c.running and c.healthcheck]
    if not checked:
        return meta.result(Status.SKIP, "no running container has a healthcheck")
    lines, bad, warn = [], [], []
    for c in checked:
        lines.append(f"{c.name}: {' '.join(c.healthcheck or ())} -> {c.health_status}: "
                     f"{(c.health_output or '')[:160]}")
        tool = missing_tool(c.health_output)
        if tool:
            form = (c.healthcheck or ("",))[0]
            bad.append(f"{c.name}: healthcheck ({form}) calls {tool}, which the image lacks")
        elif c.health_status == "unhealthy":
            first = (c.health_output or "no output").splitlines()[0][:120]
            warn.append(f"{c.name}: unhealthy ({first})")
    if bad:
        return meta.result(Status.FAIL, "; ".join(bad + warn), actual=lines,
                           evidence=_evidence(facts, lines))
    if warn:
        return meta.result(Status.WARN, "; ".join(warn), actual=lines, evidence=_evidence(facts, lines))
    return meta.result(Status.PASS, f"{len(checked)} healthcheck(s) run with tools the images have",
                       actual=lines, evidence=_evidence(facts, lines))
