"""memory.channels and memory.speed (S-005's lesson at the DIMM level): the CPU's share of a
model is read at the bandwidth of the memory channels that hold DIMMs, at the speed they were
trained to. An empty channel or a DIMM below its rating is bandwidth the box was bought with
and does not use, whatever the BIOS NUMA mode.

Both read ``dmidecode -t 4 -t 17`` (root only): each slot's names, size, rated ``Speed`` and
``Configured Memory Speed``, and which CPU sockets are populated (the slots of an empty socket
are not channels of this machine). A channel is known only where the slot's names say it (AMD
``P0 CHANNEL A``, Supermicro ``P0_Node0_Channel2_Dimm0``, ``CPU1_DIMM_A1``, ``DIMM_A1`` on
``NODE 1``...); Dell's ``A1``..``A12`` number slots, so there the channel check declines.
"""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.memory import Dimm, MemorySystem, cpu_channels

PROBE = "mem.dimms"


def _line(d: Dimm) -> str:
    if not d.size_mib:
        return f"{d.name}: empty"
    rated = f"{d.rated_mts} MT/s" if d.rated_mts else "rating unknown"
    run = f"{d.configured_mts} MT/s" if d.configured_mts else "speed unknown"
    return f"{d.name}: {d.size_mib // 1024 or d.size_mib} {'GB' if d.size_mib >= 1024 else 'MB'} " \
           f"{d.kind}, rated {rated}, runs at {run}"


def _observed(facts: HostFacts, meta: CheckMeta) -> tuple[MemorySystem, tuple[Evidence, ...]] | CheckResult:
    """The memory system dmidecode gave, with its evidence; or the check's skip/error."""
    probe = facts.get(PROBE)
    if not probe.ok:
        return meta.not_evaluated(probe)
    system: MemorySystem = probe.fact
    cpus = [f"CPU socket populated: {c}" for c in system.cpus]
    return system, (Evidence(probe.probe_id, probe.command,
                             (*cpus, *(_line(d) for d in system.dimms))),)


def _names(keys: list[tuple[str, str]]) -> str:
    """"channels F, J, L of socket 0; ..." as the slots name them."""
    sockets: dict[str, list[str]] = {}
    for socket, channel in keys:
        sockets.setdefault(socket, []).append(channel)
    return "; ".join(f"channel{'s' if len(cs) > 1 else ''} {', '.join(cs)} of socket {s}"
                     for s, cs in sockets.items())


@check("memory.channels")
def channels(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    observed = _observed(facts, meta)
    if isinstance(observed, CheckResult):
        return observed
    system, evidence = observed
    slots, filled = len(system.dimms), len(system.populated)
    if not system.channels_named:
        return meta.result(Status.SKIP, f"{filled} of {slots} memory slots hold a DIMM; the "
                           "slots' names do not say their channels, so empty channels cannot be "
                           "told", actual={"slots": slots, "populated": filled}, evidence=evidence)
    by_channel = system.channels()
    empty = sorted(c for c, dimms in by_channel.items() if not dimms)
    per_channel = sorted({len(d) for d in by_channel.values() if d})
    bandwidth = system.bandwidth_gbs()
    width = f"; {bandwidth:g} GB/s theoretical" if bandwidth else ""
    sockets = sorted({c[0] for c in by_channel})
    own = cpu_channels(system.cpus[0]) if system.cpus else None
    total, used = len(by_channel), len(by_channel) - len(empty)
    listed = ""
    if own is not None:  # the CPU says how many channels a socket has; the slots may list more
        total = own * len(sockets)
        used = sum(min(own, sum(1 for c, d in by_channel.items() if c[0] == s and d))
                   for s in sockets)
        if len(by_channel) != total:
            listed = (f"; the {system.cpus[0].strip()} has {own} per socket, the board lists "
                      f"{len(by_channel)} channel slot(s)")
    actual = {"channels": total, "populated": used, "empty": [list(c) for c in empty],
              "dimms_per_channel": per_channel, "bandwidth_gbs": bandwidth,
              "cpu_channels": own}
    if used >= total:
        return meta.result(Status.PASS, f"all {total} memory channels hold a DIMM "
                           f"({' or '.join(map(str, per_channel))} per channel){width}{listed}",
                           actual=actual, evidence=evidence)
    share = used / total
    status = Status.FAIL if share <= 0.5 else Status.WARN
    which = f" ({_names(empty)} empty)" if not listed else ""
    return meta.result(status, f"{used} of {total} memory channels hold a DIMM{which}: the CPU "
                       f"reads memory at {share:.0%} of the bandwidth its channels "
                       f"give{width}{listed}",
                       expected={"channels_populated": total}, actual=actual,
                       evidence=evidence)


@check("memory.speed")
def speed(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    observed = _observed(facts, meta)
    if isinstance(observed, CheckResult):
        return observed
    system, evidence = observed
    known = [d for d in system.populated if d.rated_mts and d.configured_mts]
    if not known:
        return meta.result(Status.SKIP, "no DIMM states both its rated and its configured "
                           "speed", evidence=evidence)
    runs = min(d.configured_mts or 0 for d in known)
    slow = [d for d in known if (d.configured_mts or 0) < (d.rated_mts or 0)]
    actual = {"configured_mts": sorted({d.configured_mts or 0 for d in known}),
              "rated_mts": sorted({d.rated_mts or 0 for d in known}), "below_rating": len(slow)}
    if not slow:
        each = f"all {len(known)} DIMMs run at their" if len(known) > 1 else \
            "the one DIMM runs at its"
        return meta.result(Status.PASS, f"{each} rated {runs} MT/s ({known[0].kind})",
                           actual=actual, evidence=evidence)
    slowest = min(d.rated_mts or 0 for d in known)
    rated = "/".join(str(r) for r in sorted({d.rated_mts or 0 for d in slow}))
    if runs >= slowest:  # the slowest DIMMs set the speed of all
        setters = [d.name for d in known if d.rated_mts == slowest]
        why = (f"the slowest DIMMs set it: {len(setters)} rated {slowest} MT/s "
               f"({', '.join(setters[:4])}{'...' if len(setters) > 4 else ''}); DIMMs of one "
               f"rating would run at {rated} MT/s")
    else:
        cpu = f" ({system.cpus[0]})" if system.cpus else ""
        why = (f"below every DIMM's rating, so not the DIMMs' limit: the CPU's memory "
               f"controller{cpu}, two DIMMs per channel, or the BIOS memory frequency caps it")
    return meta.result(Status.WARN, f"{len(slow)} of {len(known)} DIMMs rated {rated} MT/s run "
                       f"at {runs} MT/s ({1 - runs / max(d.rated_mts or 0 for d in slow):.0%} "
                       f"of their bandwidth lost): {why}",
                       expected={"configured_mts": "the DIMMs' rated speed"}, actual=actual,
                       evidence=evidence)
