"""One snapshot of a host: every probe's outcome, evaluated once from a bundle."""

from __future__ import annotations

from dataclasses import dataclass, replace

from omni_host.model import Bundle, CommandResult, Outcome, ProbeResult
from omni_host.plan.policy import Policy
from omni_host.probes.catalog import (
    BENCH,
    BENCH_PROOF,
    DYNAMIC,
    NVML_READS,
    PROBES_BY_ID,
    Probe,
    evaluate,
    load_parsers,
    probes_for,
)
from omni_host.probes.parsers.nvidia import NVML_SECTIONS

# The catalog names its parsers without importing them, so that a run's collection starts
# first (issue 44); they load here, with the evaluation, which a run imports while its host's
# probes run.
load_parsers()


@dataclass(frozen=True)
class HostFacts:
    host: str
    probes: dict[str, ProbeResult]

    def get(self, probe_id: str) -> ProbeResult:
        return self.probes[probe_id]

    # Each fact with its primary probe and its fallback, named once.
    def numa(self) -> ProbeResult:
        """The NUMA topology: numactl -H, else sysfs."""
        return self.first_observed("numa.numactl", "numa.sysfs")

    def cpu(self) -> ProbeResult:
        """The CPU: /proc/cpuinfo, else py-cpuinfo."""
        return self.first_observed("cpu.cpuinfo", "cpu.pycpuinfo")

    def gpus(self) -> ProbeResult:
        """The GPU inventory: nvidia-smi -q -x (or its fields through NVML), else pynvml."""
        return self.first_observed("gpu.nvidia-smi", "gpu.pynvml")

    def memory(self) -> ProbeResult:
        """RAM and swap totals: /proc/meminfo, else psutil."""
        return self.first_observed("mem.meminfo", "mem.psutil")

    def first_observed(self, *probe_ids: str) -> ProbeResult:
        """The first probe that observed its fact; else the most telling failure (an
        unparseable output outranks a merely unavailable one)."""
        results = [self.probes[p] for p in probe_ids]
        for res in results:
            if res.ok:
                return res
        return next((r for r in results if r.outcome is Outcome.UNPARSEABLE), results[0])


def _args(probe: Probe, argv: tuple[str, ...]) -> tuple[str, ...]:
    """The policy's arguments of a probe: what follows its fixed command."""
    return tuple(argv[len(probe.argv):])


def _uncovered(probe: Probe, result: CommandResult | None,
               wanted: tuple[str, ...] | None) -> ProbeResult | None:
    """A policy probe whose recorded arguments are not the ones the policy asks for: its
    output says nothing about what the policy names (another package list, another path)."""
    if wanted is None:
        return None
    if result is None:
        why = "not collected under this policy (the bundle has no such output): collect again"
    elif _args(probe, result.argv) != wanted:
        why = (f"not collected under this policy (collected for {' '.join(_args(probe, result.argv))}"
               f"; the policy names {' '.join(wanted)}): collect again")
    else:
        return None
    return ProbeResult(probe.id, probe.command, Outcome.UNAVAILABLE, reason=why)


# The section of the NVML reader's document that stands in for each nvidia-smi run.
_SECTIONS = dict(zip(NVML_READS, NVML_SECTIONS, strict=True))


def _through_nvml(probe: Probe, nvml: ProbeResult, result: CommandResult | None) -> ProbeResult | None:
    """An nvidia-smi probe that did not run because the NVML reader answered: its section of
    the reader's document judged by that probe's own parser, its command saying where the
    fields came from. None where nvidia-smi itself ran (or the bundle predates the reader)."""
    if result is None or result.status != "skipped" or nvml.outcome is Outcome.UNAVAILABLE:
        return None
    command = f"{probe.command} (its fields, read through NVML)"
    if not nvml.ok:  # the reader exited 0 with output that is not its document
        return ProbeResult(probe.id, command, Outcome.UNPARSEABLE,
                           reason=f"the NVML reader's output: {nvml.reason}", excerpt=nvml.excerpt)
    text = nvml.fact[_SECTIONS[probe.id]]
    if text is None:
        return ProbeResult(probe.id, command, Outcome.UNAVAILABLE,
                           reason="fewer than two GPUs: no GPU topology to read (NVML)")
    derived = CommandResult(probe.id, probe.argv, "ran", 0, text, "", 0.0)
    return replace(evaluate(probe, derived), command=command)


def facts_from_bundle(bundle: Bundle, policy: Policy | None = None, *,
                      measured: bool = False) -> HostFacts:
    """Every probe's outcome. With ``policy``, a probe whose arguments come from the policy
    counts only when it was collected with exactly the policy's arguments: evidence that was
    not collected never turns into a pass or a fail. ``measured``: the run asked the bench
    helper to measure (a bench, an A/B, a sweep); its output is read too."""
    wanted: dict[str, tuple[str, ...]] = {}
    if policy is not None:
        by_id = {p.id: p for p in DYNAMIC}
        wanted = {p.id: _args(by_id[p.id], p.argv) for p in probes_for(policy) if p.id in by_id}
    probes = {}
    for p in PROBES_BY_ID.values():
        result = bundle.results.get(p.id)
        probes[p.id] = _uncovered(p, result, wanted.get(p.id)) or evaluate(p, result)
    for probe_id in NVML_READS:
        p = PROBES_BY_ID[probe_id]
        probes[p.id] = _through_nvml(p, probes["gpu.nvml"], bundle.results.get(p.id)) or probes[p.id]
    if measured:
        probes[BENCH.id] = evaluate(BENCH, bundle.results.get(BENCH.id))
        if BENCH_PROOF.id in bundle.results:  # a plan's proof, kept beside the plan's facts
            probes[BENCH_PROOF.id] = evaluate(BENCH_PROOF, bundle.results[BENCH_PROOF.id])
    return HostFacts(bundle.host, probes)
