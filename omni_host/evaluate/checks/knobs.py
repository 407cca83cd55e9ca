"""The knob ledger's checks (issue 48): host settings that public reports measure as costing
CPU-side and hybrid inference tokens/s, read in the audit's one round trip
(``remote/knobs.py``, the serve helper's per-process reads) and judged against what runs.

kernel.thp, kernel.numa-balancing, cpu.frequency, cpu.threads, serve.memory, pcie.aspm. Each
says where its cost figure comes from (a lesson of the registry, else the public report,
labelled so in the catalog's rationale); none claims a cost on this host it has not measured.
"""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.measure.serve import option
from omni_host.model import CheckResult, Evidence, InferenceServer, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.knobs import HostKnobs, cpu_list

PROBE = "host.knobs"
SERVERS = "serve.servers"


def _knobs(facts: HostFacts, meta: CheckMeta) -> tuple[HostKnobs, Evidence] | CheckResult:
    probe = facts.get(PROBE)
    if not probe.ok:
        return meta.not_evaluated(probe)
    knobs: HostKnobs = probe.fact
    return knobs, Evidence(probe.probe_id, probe.command, ())


def _servers(facts: HostFacts, meta: CheckMeta) -> list[InferenceServer] | CheckResult:
    """The running servers; the check's skip where they were not read (an older bundle)."""
    probe = facts.get(SERVERS)
    return list(probe.fact) if probe.ok else meta.not_evaluated(probe)


def _name(server: InferenceServer) -> str:
    return f"llama-server pid {server.pid}" + (f" ({server.address})" if server.address else "")


@check("kernel.thp")
def thp(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    got = _knobs(facts, meta)
    if isinstance(got, CheckResult):
        return got
    knobs, evidence = got
    lines = (f"enabled: {knobs.thp_enabled}", f"defrag: {knobs.thp_defrag}")
    evidence = Evidence(evidence.probe, "/sys/kernel/mm/transparent_hugepage/{enabled,defrag}",
                        lines)
    actual = {"enabled": knobs.thp_enabled, "defrag": knobs.thp_defrag}
    if knobs.thp_enabled is None:
        return meta.result(Status.SKIP, "no transparent huge pages in this kernel "
                           "(/sys/kernel/mm/transparent_hugepage absent)", evidence=(evidence,))
    if knobs.thp_enabled == "never":
        return meta.result(Status.WARN, "transparent huge pages are off (never): no process "
                           "gets 2 MiB pages, the CPU's share of a model is read through 4 KiB "
                           "pages", expected="madvise or always", actual=actual,
                           evidence=(evidence,))
    if knobs.thp_defrag == "always":
        return meta.result(Status.WARN, f"transparent huge pages {knobs.thp_enabled}, defrag "
                           "always: an allocation waits for memory to be compacted (stalls "
                           "under load)", expected="defrag madvise, defer or defer+madvise",
                           actual=actual, evidence=(evidence,))
    got_lines = _huge_pages_got(facts)
    if got_lines:
        evidence = Evidence(evidence.probe, evidence.command, (*lines, *got_lines))
    return meta.result(Status.PASS, f"transparent huge pages {knobs.thp_enabled}, defrag "
                       f"{knobs.thp_defrag}" + (f"; what the servers got: {'; '.join(got_lines)}"
                                               if got_lines else ""),
                       actual=actual, evidence=(evidence,))


def _huge_pages_got(facts: HostFacts) -> list[str]:
    """Per running server, the part of its anonymous memory in huge pages and its file pages
    mapped 2 MiB at a time (smaps_rollup): what THP gave it, not what the switch allows."""
    probe = facts.get(SERVERS)
    if not probe.ok:
        return []
    out = []
    for server in probe.fact:
        if server.anon_kib is None or server.anon_huge_kib is None:
            continue
        share = server.anon_huge_kib / server.anon_kib if server.anon_kib else 0.0
        out.append(f"{_name(server)}: {server.anon_huge_kib // 1024} of "
                   f"{server.anon_kib // 1024} MiB anonymous in huge pages ({share:.0%})"
                   + (f", {server.file_pmd_kib // 1024} MiB of file pages (the model) in huge "
                      "pages" if server.file_pmd_kib else ""))
    return out


@check("kernel.numa-balancing")
def numa_balancing(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    got = _knobs(facts, meta)
    if isinstance(got, CheckResult):
        return got
    knobs, evidence = got
    evidence = Evidence(evidence.probe, "cat /proc/sys/kernel/numa_balancing",
                        (str(knobs.numa_balancing),))
    if knobs.numa_balancing is None:
        return meta.result(Status.SKIP, "no automatic NUMA balancing in this kernel "
                           "(/proc/sys/kernel/numa_balancing absent)", evidence=(evidence,))
    numa = facts.numa()
    nodes = numa.fact.cpu_node_count if numa.ok else None
    on = knobs.numa_balancing != 0
    if not on:
        return meta.result(Status.PASS, "automatic NUMA balancing off", actual=0,
                           evidence=(evidence,))
    if nodes == 1:
        return meta.result(Status.PASS, f"automatic NUMA balancing on "
                           f"({knobs.numa_balancing}), with one NUMA node: nothing to move",
                           actual=knobs.numa_balancing, evidence=(evidence,))
    where = f"{nodes} NUMA nodes" if nodes else "NUMA nodes not counted"
    return meta.result(Status.WARN, f"automatic NUMA balancing on ({knobs.numa_balancing}) "
                       f"with {where}: the kernel moves the model's pages and the threads "
                       "reading them (llama.cpp warns at start that it impairs performance)",
                       expected=0, actual=knobs.numa_balancing, evidence=(evidence,))


@check("cpu.frequency")
def frequency(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    got = _knobs(facts, meta)
    if isinstance(got, CheckResult):
        return got
    knobs, evidence = got
    said = [f"governor {g}: {n} CPU(s)" for g, n in knobs.governors.items()]
    said += [f"energy preference {e}: {n} CPU(s)" for e, n in knobs.epp.items()]
    said += [f"driver: {knobs.freq_driver}", f"boost: {knobs.boost}"]
    evidence = Evidence(evidence.probe, "/sys/devices/system/cpu/cpu*/cpufreq/"
                        "{scaling_governor,energy_performance_preference}, cpufreq/boost",
                        tuple(said))
    if not knobs.governors:
        return meta.result(Status.SKIP, "no CPU frequency scaling exposed (a virtual machine, "
                           "or a clock the firmware fixes)", evidence=(evidence,))
    slow = {g: n for g, n in knobs.governors.items() if g != "performance"}
    saving = {e: n for e, n in knobs.epp.items() if e != "performance"}
    problems = []
    if slow:
        problems.append("governor " + ", ".join(f"{g} on {n} CPU(s)" for g, n in slow.items()))
    if saving:
        problems.append("energy preference " + ", ".join(f"{e} on {n} CPU(s)"
                                                         for e, n in saving.items()))
    if knobs.boost is False:
        problems.append("frequency boost off")
    actual = {"governors": knobs.governors, "epp": knobs.epp, "boost": knobs.boost,
              "driver": knobs.freq_driver}
    if problems:
        return meta.result(Status.WARN, "the CPU's frequency policy trades speed for power: "
                           + "; ".join(problems) + f" (driver {knobs.freq_driver})",
                           expected="governor performance, energy preference performance, "
                           "boost on", actual=actual, evidence=(evidence,))
    return meta.result(Status.PASS, f"governor performance on every CPU (driver "
                       f"{knobs.freq_driver}, boost {knobs.boost})", actual=actual,
                       evidence=(evidence,))


def _threads(server: InferenceServer, physical: int) -> int:
    """The threads a server generates with: its -t (llama.cpp's default: the physical cores)."""
    given = option(server, ("-t", "--threads"), "LLAMA_ARG_THREADS")
    return int(given) if given and given.strip().lstrip("-").isdigit() and int(given) > 0 \
        else physical


@check("cpu.threads")
def threads(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    got = _knobs(facts, meta)
    if isinstance(got, CheckResult):
        return got
    knobs, evidence = got
    servers = _servers(facts, meta)
    if isinstance(servers, CheckResult):
        return servers
    if not servers:
        return meta.result(Status.SKIP, "no inference server running: no threads to weigh")
    lines, over, used = [], [], {}
    for server in servers:
        allowed = cpu_list(server.cpus_allowed_list)
        physical = knobs.physical_cores(allowed)
        if physical is None:
            lines.append(f"{_name(server)}: the cores under its CPUs are not known")
            continue
        count = _threads(server, physical)
        used[server.pid] = (count, set(allowed))
        lines.append(f"{_name(server)}: {count} threads on {physical} physical cores "
                     f"({len(allowed)} logical CPUs allowed)")
        if count > physical:
            over.append(f"{_name(server)} runs {count} threads on {physical} physical cores "
                        f"({len(allowed)} logical CPUs allowed)")
    evidence = Evidence(SERVERS, "/proc/PID/status Cpus_allowed_list, the server's -t; "
                        "/sys/devices/system/cpu/cpu*/topology", tuple(lines))
    shared = [pid for pid, (_, mine) in used.items()
              if any(mine & theirs for other, (_, theirs) in used.items() if other != pid)]
    if shared:  # servers sharing cores: their threads add up
        total = sum(used[pid][0] for pid in shared)
        cores = knobs.physical_cores(sorted(set().union(*(used[pid][1] for pid in shared))))
        if cores is not None and total > cores:
            over.append(f"{len(shared)} servers share {cores} physical cores with {total} "
                        "threads in all")
    if over:
        return meta.result(Status.WARN, "; ".join(over) + ": threads on logical cores (SMT "
                           "siblings) or on cores another server uses wait for each other",
                           expected="threads <= physical cores", evidence=(evidence,))
    if not used:
        return meta.result(Status.SKIP, "; ".join(lines), evidence=(evidence,))
    return meta.result(Status.PASS, "; ".join(lines), evidence=(evidence,))


@check("serve.memory")
def server_memory(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    servers = _servers(facts, meta)
    if isinstance(servers, CheckResult):
        return servers
    if not servers:
        return meta.result(Status.SKIP, "no inference server running")
    lines, swapped, unlocked = [], [], []
    for server in servers:
        mode = option(server, ("-lm", "--load-mode"), "LLAMA_ARG_LOAD_MODE") or ""
        mlock = "--mlock" in server.argv or "mlock" in mode or (server.env or {}).get(
            "LLAMA_ARG_MLOCK", "").lower() in ("1", "true", "on", "enabled")
        lines.append(f"{_name(server)}: {server.swap_kib} kB on swap, {server.locked_kib} kB "
                     f"locked{' (mlock asked)' if mlock else ''}")
        if server.swap_kib:
            swapped.append(f"{_name(server)} has {server.swap_kib / 1024:,.0f} MiB of its "
                           "pages on swap")
        if mlock and server.locked_kib == 0:
            where = f" in container {server.container[:12]}" if server.container else ""
            unlocked.append(f"{_name(server)} asked for mlock{where} and holds nothing "
                            "locked (the memlock limit refused it: Docker's default is 8 MiB)")
    evidence = Evidence(SERVERS, "/proc/PID/status VmSwap, VmLck", tuple(lines))
    if swapped or unlocked:
        return meta.result(Status.WARN, "; ".join(swapped + unlocked) + ": a layer read from "
                           "swap costs seconds a token", evidence=(evidence,))
    return meta.result(Status.PASS, "; ".join(lines), evidence=(evidence,))


@check("pcie.aspm")
def aspm(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    got = _knobs(facts, meta)
    if isinstance(got, CheckResult):
        return got
    knobs, evidence = got
    given = knobs.kernel_options("pcie_aspm", "pcie_aspm.policy", "pcie_port_pm", "iommu",
                                 "amd_iommu", "intel_iommu")
    lines = (f"policy: {knobs.aspm}",
             *(f"kernel command line: {k}={v}" if v else f"kernel command line: {k}"
               for k, v in given.items()))
    evidence = Evidence(evidence.probe, "cat /sys/module/pcie_aspm/parameters/policy "
                        "/proc/cmdline", lines)
    gpus = facts.gpus()
    if not (gpus.ok and gpus.fact.gpus):
        return meta.result(Status.SKIP, "no NVIDIA GPU found: no GPU link to keep awake",
                           evidence=(evidence,))
    if knobs.aspm is None:
        return meta.result(Status.SKIP, "no PCIe ASPM policy exposed by this kernel",
                           evidence=(evidence,))
    actual = {"policy": knobs.aspm, "cmdline": given}
    if knobs.aspm in ("powersave", "powersupersave") and given.get("pcie_aspm") != "off":
        return meta.result(Status.WARN, f"PCIe ASPM policy {knobs.aspm}: links to the GPUs may "
                           "drop to low-power states between transfers (links seen flapping "
                           "and trained down with no error logged)",
                           expected="default or performance, or pcie_aspm=off",
                           actual=actual, evidence=(evidence,))
    return meta.result(Status.PASS, f"PCIe ASPM policy {knobs.aspm}"
                       + (f" ({', '.join(lines[1:])})" if given else ""), actual=actual,
                       evidence=(evidence,))


def _numa_asked(server: InferenceServer) -> str | None:
    """How a server asks for a NUMA policy: llama.cpp's --numa, or numactl in its argv."""
    given = option(server, ("--numa",), "LLAMA_ARG_NUMA")
    if given:
        return f"--numa {given}"
    return "numactl" if any(a.endswith("numactl") for a in server.argv[:1]) else None


@check("containers.numa-policy")
def container_numa(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    servers = _servers(facts, meta)
    if isinstance(servers, CheckResult):
        return servers
    asking = [(s, how) for s in servers if s.container and (how := _numa_asked(s))]
    if not asking:
        return meta.result(Status.SKIP, "no server in a container asks for a NUMA policy")
    docker = facts.get("docker.containers")
    if not docker.ok:
        return meta.not_evaluated(docker)
    lines, blocked = [], []
    for server, how in asking:
        box = next((c for c in docker.fact if server.container and
                    server.container.startswith(c.container_id)), None)
        if box is None:
            lines.append(f"{_name(server)}: its container is not among those inspected")
            continue
        allowed = box.numa_calls_allowed
        lines.append(f"{_name(server)} ({how}) in container {box.name}: cap_add "
                     f"{list(box.cap_add)}, privileged {box.privileged}, seccomp "
                     f"{'unconfined' if box.seccomp_unconfined else 'default'}")
        if not allowed:
            blocked.append(f"{_name(server)} asks for {how} in container {box.name}, whose "
                           "seccomp profile refuses set_mempolicy and mbind without "
                           "CAP_SYS_NICE: the NUMA option does nothing")
    evidence = Evidence("docker.containers", "docker inspect: HostConfig.CapAdd, Privileged, "
                        "SecurityOpt", tuple(lines))
    if blocked:
        return meta.result(Status.WARN, "; ".join(blocked), evidence=(evidence,))
    return meta.result(Status.PASS, "; ".join(lines), evidence=(evidence,))


def _gib(kib: int) -> str:
    return f"{kib / 1024 / 1024:.1f} GiB"


@check("serve.model-pages")
def model_pages(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    """Where each running server's model lives in memory: its mapped pages per NUMA node
    (numa_maps), against the nodes its CPUs are on."""
    servers = _servers(facts, meta)
    if isinstance(servers, CheckResult):
        return servers
    read = [s for s in servers if s.model_pages_by_node is not None and s.model_path]
    if not read:
        return meta.result(Status.SKIP, "no running server whose model's pages were read"
                           if servers else "no inference server running")
    topo = facts.numa()
    nodes = topo.fact.nodes if topo.ok else ()
    lines, spread = [], []
    for server in read:
        pages = dict(server.model_pages_by_node or ())
        total = sum(pages.values())
        share = f" ({total / (server.model_bytes / 1024):.0%} of its file)" \
            if server.model_bytes else ""
        where = ", ".join(f"node {n} {_gib(k)}" for n, k in sorted(pages.items()) if k)
        line = f"{_name(server)}: {_gib(total)} of the model mapped{share}" + \
            (f": {where}" if where else "")
        lines.append(line)
        allowed = set(cpu_list(server.cpus_allowed_list))
        on = {n.node_id for n in nodes if allowed & set(n.cpus)} if allowed else set()
        held = {n for n, k in pages.items() if k >= 0.9 * total} if total else set()
        if len(on) > 1 and held:
            spread.append(f"{_name(server)}: the model's pages live on node "
                          f"{next(iter(held))} while its CPUs span nodes "
                          f"{', '.join(map(str, sorted(on)))}")
    evidence = Evidence(SERVERS, "/proc/PID/numa_maps (the model file's mappings)", tuple(lines))
    if spread:
        return meta.result(Status.WARN, "; ".join(spread) + ": threads on the other nodes read "
                           "them across the interconnect", evidence=(evidence,),
                           actual=lines)
    single = "one NUMA node" if len(nodes) <= 1 else f"{len(nodes)} NUMA nodes"
    return meta.result(Status.PASS, f"{single}: " + "; ".join(lines), evidence=(evidence,),
                       actual=lines)
