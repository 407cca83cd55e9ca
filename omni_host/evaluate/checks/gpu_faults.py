"""The GPU faults that GPU-fleet tools (gpud, AzNHC, DCGM) catch and that ``nvidia-smi -q -x``
already shows: memory errors (row remapping, retired pages), clock event reasons active now,
a power limit capped below its default, a PCIe link that trained below what GPU and slot
support, and VBIOS versions that differ across identical GPUs. Each reads the GPUs of
``gpu.nvidia-smi`` alone (pynvml's helper reports none of these fields): where that probe has
no answer the check is not evaluated, never passed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check, check_with_past
from omni_host.evaluate.prior import Prior
from omni_host.model import CheckResult, Evidence, Remediation, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.nvidia import Gpu, GpuFaults

# Clock event reasons that mean the hardware is protecting itself (gpud's hw-slowdown, DCGM's
# throttle policy); SW power cap is normal at the limit and judged apart; idle, sync boost,
# application and display clock settings are not faults.
HW_EVENTS = {"hw_slowdown": "HW slowdown (power supply or overheating: clocks halved or more)",
             "hw_thermal_slowdown": "HW thermal slowdown (the GPU is too hot)",
             "hw_power_brake_slowdown": "HW power brake (the power supply asserted the brake)",
             "sw_thermal_slowdown": "SW thermal slowdown (above the slowdown temperature)"}
BUSY_PCT = 50  # utilisation above which a power cap that holds the clocks down is a finding
HELD = 0.9  # SM clock below this share of its maximum: the cap is holding it


def _faulted(facts: HostFacts, meta: CheckMeta,
             judge: Callable[[Gpu, GpuFaults], tuple[Status, str]]) -> CheckResult:
    """Run ``judge`` on each GPU of ``nvidia-smi -q -x``: (status, line) per GPU, the worst
    status wins; a GPU whose fields are N/A says so in its line."""
    probe = facts.get("gpu.nvidia-smi")
    if not probe.ok:
        return meta.not_evaluated(probe)
    gpus = [g for g in probe.fact.gpus if g.faults is not None]
    if not gpus:
        return meta.result(Status.SKIP, "no GPU in nvidia-smi -q -x: nothing to check",
                           evidence=(Evidence(probe.probe_id, probe.command, ()),))
    verdicts = [(g, *judge(g, g.faults)) for g in gpus]
    lines = tuple(f"GPU{g.index} {g.name}: {line}" for g, _, line in verdicts)
    rank = [Status.SKIP, Status.PASS, Status.WARN, Status.FAIL]
    worst = max((s for _, s, _ in verdicts), key=rank.index)
    evidence = (Evidence(probe.probe_id, probe.command, lines),)
    if worst is Status.SKIP:
        return meta.result(Status.SKIP, "not reported by this GPU or driver: " + "; ".join(lines),
                           evidence=evidence)
    shown = [f"GPU{g.index}: {line}" for g, s, line in verdicts if s is worst] \
        if worst is not Status.PASS else [f"{len(gpus)} GPU(s): " + "; ".join(
            line for _, _, line in verdicts)]
    return meta.result(worst, "; ".join(shown), actual=list(lines), evidence=evidence)


@check("gpu.memory-errors")
def memory_errors(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    def judge(g: Gpu, f: GpuFaults) -> tuple[Status, str]:
        if f.remap_failure:
            return Status.FAIL, ("row remapping failed: the GPU can no longer mask bad memory "
                                 "(hardware: inspection, RMA)")
        if f.remap_pending:
            return Status.WARN, ("a row remap is pending: reset the GPU (nvidia-smi -r -i "
                                 f"{g.index}) or reboot to activate it")
        if f.retire_pending:
            return Status.WARN, "retired pages pending: reboot or reload the driver to retire them"
        parts = []
        if f.remap_pending is not None:
            parts.append(f"row remapping healthy ({f.remap_uncorrectable or 0} uncorrectable "
                         "row(s) remapped)")
        if f.retired_dbe is not None or f.retired_sbe is not None:
            parts.append(f"{f.retired_dbe or 0} page(s) retired for double-bit, "
                         f"{f.retired_sbe or 0} for single-bit errors, none pending")
        if not parts:
            return Status.SKIP, "row remapping and page retirement N/A"
        return Status.PASS, ", ".join(parts)

    return _faulted(facts, meta, judge)


@check("gpu.clock-events")
def clock_events(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    def judge(g: Gpu, f: GpuFaults) -> tuple[Status, str]:
        if f.events is None:
            return Status.SKIP, "clock event reasons not reported"
        hw = [HW_EVENTS[e] for e in f.events if e in HW_EVENTS]
        if hw:
            return Status.WARN, "active now: " + ", ".join(hw)
        if "sw_power_cap" in f.events and (f.utilization_pct or 0) >= BUSY_PCT and \
                f.sm_clock_mhz and f.sm_clock_max_mhz and f.sm_clock_mhz < HELD * f.sm_clock_max_mhz:
            held = (f"the power cap holds the clocks under load: SM {f.sm_clock_mhz} of "
                    f"{f.sm_clock_max_mhz} MHz at {f.utilization_pct}% busy, limit "
                    f"{f.power_limit_w:g} W")
            if f.power_limit_w is not None and f.power_default_w is not None and \
                    f.power_limit_w >= f.power_default_w * 0.99:
                # at the rated default limit the cap holding a busy GPU is its design: nothing
                # to fix, and no limit to set (it is set already)
                return Status.PASS, f"{held}, its rated default: the card's design"
            return Status.WARN, held + (f", below its default {f.power_default_w:g} W (see "
                                        "gpu.power-limit)" if f.power_default_w else "")
        active = ", ".join(f.events) or "none"
        return Status.PASS, f"no slowdown active (reasons now: {active})"

    return _faulted(facts, meta, judge)


@check("gpu.power-limit")
def power_limit(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    capped: list[Gpu] = []

    def judge(g: Gpu, f: GpuFaults) -> tuple[Status, str]:
        if f.power_limit_w is None or f.power_default_w is None:
            return Status.SKIP, "power limit not reported"
        if f.power_limit_w < f.power_default_w * 0.99:
            capped.append(g)
            return Status.WARN, (f"power limit {f.power_limit_w:g} W, below its default "
                                 f"{f.power_default_w:g} W")
        return Status.PASS, f"power limit {f.power_limit_w:g} W (default {f.power_default_w:g} W)"

    result = _faulted(facts, meta, judge)
    if not capped:
        return result
    steps = tuple(f"nvidia-smi -i {g.index} -pl {g.faults.power_default_w:g}  # back to the "
                  "default; it resets at reboot unless persisted (nvidia-persistenced, a "
                  "systemd unit)" for g in capped if g.faults)
    return replace(result, remediation=Remediation("manual", None, steps))


@check_with_past("gpu.pcie-link")
def pcie_link(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior) -> CheckResult:
    """The link's maximum generation (what it trained to, which does not depend on load)
    against the GPU's own and the slot's; the current generation drops at idle and is not
    judged here. Under load it is, from the host's newest bench (its samples while
    llama-bench ran): a link whose median generation there was below what it trained to ran
    slower than it can when it mattered (left at a low generation, or flapping)."""
    result = _trained(facts, meta)
    bench, probe = prior.last_bench, facts.get("gpu.nvidia-smi")
    if bench is None or not bench.links or not probe.ok or result.status is Status.SKIP:
        return result
    trained = {str(g.index): g.pcie_gen_max for g in probe.fact.gpus}
    slow = [link for link in bench.links
            if link.generation is not None and (trained.get(link.index) or 0) > link.generation]
    lines = [link.line() for link in bench.links]
    words = f"under load (bench {bench.audit}): " + "; ".join(lines)
    if slow:
        result = replace(result, status=Status.WARN if result.status is Status.PASS
                         else result.status)
        words += "; " + "; ".join(
            f"GPU{link.index} ran below the gen{trained[link.index]} it trained to while "
            "llama-bench ran: its link trains down under load (ASPM, a riser, the slot)"
            for link in slow)
    return result.noted(words, "under_load", {"bench": bench.audit, "links": lines})


def _trained(facts: HostFacts, meta: CheckMeta) -> CheckResult:
    def judge(g: Gpu, f: GpuFaults) -> tuple[Status, str]:
        trained, device, host = g.pcie_gen_max, f.link_gen_device_max, f.link_gen_host_max
        if trained is None or device is None:
            return Status.SKIP, "PCIe link generations not reported"
        able = min(device, host) if host is not None else device
        if trained < able:
            return Status.WARN, (f"link trained at gen{trained} max, though the GPU (gen{device})"
                                 + (f" and the slot (gen{host})" if host is not None else "")
                                 + f" support gen{able}: reseat it, check the riser and the "
                                 "BIOS link speed")
        slot = f"; the slot limits it (the GPU supports gen{device})" if host and host < device \
            else ""
        width = g.pcie_width_current or g.pcie_width_max
        narrow = f" (of x{g.pcie_width_max})" if width and g.pcie_width_max and \
            width < g.pcie_width_max else ""
        return Status.PASS, f"gen{trained} x{width or '?'}{narrow}{slot}"

    return _faulted(facts, meta, judge)


@check("gpu.vbios")
def vbios(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    probe = facts.get("gpu.nvidia-smi")
    if not probe.ok:
        return meta.not_evaluated(probe)
    by_model: dict[str, dict[str, list[int]]] = {}
    for g in probe.fact.gpus:
        version = g.faults.vbios if g.faults else None
        by_model.setdefault(g.name, {}).setdefault(version or "N/A", []).append(g.index)
    lines = tuple(f"{model}: " + ", ".join(f"{v} on GPU{','.join(map(str, ids))}"
                                           for v, ids in versions.items())
                  for model, versions in by_model.items())
    evidence = (Evidence(probe.probe_id, probe.command, lines),)
    if not by_model:
        return meta.result(Status.SKIP, "no GPU in nvidia-smi -q -x: nothing to check",
                           evidence=evidence)
    mixed = [line for line, versions in zip(lines, by_model.values(), strict=True)
             if len(versions) > 1]
    if mixed:
        return meta.result(Status.WARN, "identical GPUs run different VBIOS: " + "; ".join(mixed),
                           actual=list(lines), evidence=evidence)
    return meta.result(Status.PASS, "; ".join(lines), actual=list(lines), evidence=evidence)


REBAR_ARCHITECTURES = ("Ampere", "Ada", "Hopper", "Blackwell")  # Resizable BAR from the RTX 30s
SMALL_BAR1_MIB = 256  # the legacy window: Resizable BAR off (or a board that fixes it there)


def _rebar_capable(g: Gpu) -> bool:
    """A GeForce RTX or RTX workstation card of an architecture that supports Resizable BAR
    (its size is a BIOS option there; data-centre boards fix their BAR1 by design)."""
    name = g.name.replace("NVIDIA ", "")
    return (name.startswith(("GeForce RTX", "RTX"))
            and any(a in (g.architecture or "") for a in REBAR_ARCHITECTURES))


@check("gpu.resizable-bar")
def resizable_bar(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    def judge(g: Gpu, f: GpuFaults) -> tuple[Status, str]:
        if f.bar1_total_mib is None or not g.memory_total_mib:
            return Status.SKIP, "BAR1 size not reported"
        window = f"BAR1 {f.bar1_total_mib} MiB of a {g.memory_total_mib} MiB card"
        if f.bar1_total_mib > SMALL_BAR1_MIB:
            return Status.PASS, f"{window}: Resizable BAR on"
        if _rebar_capable(g):
            return Status.WARN, (f"{window}: Resizable BAR is off (BIOS: Above 4G Decoding and "
                                 "Re-Size BAR Support)")
        return Status.PASS, f"{window}: fixed by this board ({g.architecture or 'its design'})"

    return _faulted(facts, meta, judge)


EDITIONS = ("Max-Q Workstation Edition", "Server Edition", "Workstation Edition", "Max-Q")


@check("gpu.clocks")
def clocks(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    locked: list[Gpu] = []

    def judge(g: Gpu, f: GpuFaults) -> tuple[Status, str]:
        edition = next((e for e in EDITIONS if e in g.name), None)
        sku = (f"edition {edition}" if edition else "") + (
            f"{', ' if edition else ''}memory clock max {f.mem_clock_max_mhz} MHz"
            if f.mem_clock_max_mhz else "") + (
            f", power limit {f.power_limit_w:g} W" if f.power_limit_w is not None else "")
        if f.app_clocks_mhz and f.app_clocks_default_mhz and any(
                now < default for now, default in zip(f.app_clocks_mhz, f.app_clocks_default_mhz,
                                                      strict=True)):
            locked.append(g)
            return Status.WARN, (f"applications clocks set to {f.app_clocks_mhz[0]}/"
                                 f"{f.app_clocks_mhz[1]} MHz (graphics/memory), below the "
                                 f"default {f.app_clocks_default_mhz[0]}/"
                                 f"{f.app_clocks_default_mhz[1]}" + (f"; {sku}" if sku else ""))
        if f.app_clocks_active:
            locked.append(g)
            return Status.WARN, ("the clocks are held by a clock setting now (applications or "
                                 "locked clocks: nvidia-smi -lgc/-lmc/-ac)" + (f"; {sku}" if sku
                                                                               else ""))
        if f.app_clocks_active is None and f.app_clocks_mhz is None and not sku:
            return Status.SKIP, "clock settings not reported"
        return Status.PASS, "no clock lock" + (f"; {sku}" if sku else "")

    result = _faulted(facts, meta, judge)
    if not locked:
        return result
    steps = tuple(f"nvidia-smi -i {g.index} -rac && nvidia-smi -i {g.index} -rgc && "
                  f"nvidia-smi -i {g.index} -rmc  # back to the driver's clocks; then find what "
                  "set them (a tuning script, a systemd unit)" for g in locked)
    return replace(result, remediation=Remediation("manual", None, steps))
