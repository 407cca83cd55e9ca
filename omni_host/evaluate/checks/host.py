"""disk.free (F-001), packages.build-deps (F-015), cpu.avx512 (S-002), gpu.health (DCGM)."""

from __future__ import annotations

from omni_host.evaluate.checks import CheckMeta, check
from omni_host.evaluate.facts import HostFacts
from omni_host.model import CheckResult, Evidence, Outcome, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.build import GpuQuery

AVX512 = ("avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni")


@check("disk.free")
def disk_free(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    if not policy.disk_free:
        return meta.no_policy("omni_disk_free")
    df = facts.get("disk.df")
    if not df.ok:
        return meta.not_evaluated(df)
    bad, lines = [], []
    for want in policy.disk_free:
        usage = df.fact.get(want.path)
        if usage is None or usage.error:
            bad.append(usage.error if usage and usage.error else f"{want.path}: not measured")
            continue
        free_gib = usage.avail_kib / 1024 ** 2
        lines.append(f"{want.path} (on {usage.mount}): {free_gib:,.1f} GiB free")
        if free_gib < want.min_free_gib:
            wanted = want.min_free_gib
            wanted_text = f"{wanted:,.0f}" if wanted == int(wanted) else f"{wanted:,.1f}"
            bad.append(f"{want.path}: {free_gib:,.1f} GiB free, policy wants {wanted_text} GiB")
    evidence = (Evidence(df.probe_id, df.command, tuple(lines)),)
    if bad:
        return meta.result(Status.FAIL, "; ".join(bad), actual=lines, evidence=evidence)
    return meta.result(Status.PASS, "; ".join(lines), actual=lines, evidence=evidence)


@check("packages.build-deps")
def build_deps(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    if not policy.build_packages:
        return meta.no_policy("omni_build_packages")
    dpkg = facts.get("packages.dpkg")
    if not dpkg.ok:
        return meta.not_evaluated(dpkg)
    missing = [p for p in policy.build_packages if not dpkg.fact.get(p)]
    lines = tuple(f"{p}: {'installed' if dpkg.fact.get(p) else 'missing'}"
                  for p in policy.build_packages)
    evidence = (Evidence(dpkg.probe_id, dpkg.command, lines),)
    if missing:
        return meta.result(Status.FAIL, f"missing: {', '.join(missing)}",
                           expected=list(policy.build_packages), actual=list(lines), evidence=evidence)
    return meta.result(Status.PASS, f"{len(lines)} build package(s) installed",
                       expected=list(policy.build_packages), actual=list(lines), evidence=evidence)


@check("cpu.avx512")
def avx512(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    cpu = facts.first_observed("cpu.cpuinfo", "cpu.pycpuinfo")
    if not cpu.ok:
        return meta.not_evaluated(cpu)
    have = [f for f in AVX512 if f in cpu.fact.flags]
    evidence = (Evidence(cpu.probe_id, cpu.command, (cpu.fact.describe(), "flags: " + " ".join(have))),)
    if "avx512f" in have:
        zen5 = "; on Zen 5 containers may need the GLIBC_TUNABLES mask (F-010)" if cpu.fact.is_zen5 else ""
        return meta.result(Status.PASS, f"AVX-512 present ({', '.join(have)}){zen5}",
                           actual=have, evidence=evidence)
    return meta.result(Status.WARN, f"{cpu.fact.describe()} has no AVX-512: CPU executors will "
                       "be far slower than S-002's 16 tok/s", actual=have, evidence=evidence)


def _gpu_problems(g: GpuQuery) -> tuple[list[str], list[str]]:
    fails, warns = [], []
    if g.ecc_uncorrected:
        fails.append(f"GPU{g.index}: {g.ecc_uncorrected} uncorrectable ECC error(s)")
    if g.persistence_mode is False:
        warns.append(f"GPU{g.index}: persistence mode off")
    if g.pcie_width_current and g.pcie_width_max and g.pcie_width_current < g.pcie_width_max:
        warns.append(f"GPU{g.index}: PCIe x{g.pcie_width_current} of x{g.pcie_width_max}")
    return fails, warns


def _from_inventory(facts: HostFacts) -> tuple[GpuQuery, ...] | None:
    """The health fields nvidia-smi -q -x (or pynvml) also has, for drivers whose
    --query-gpu lacks a field (ECC counts are then unknown)."""
    inv = facts.first_observed("gpu.nvidia-smi", "gpu.pynvml")
    if not inv.ok:
        return None
    return tuple(GpuQuery(g.index, g.name, None, g.pcie_gen_current, g.pcie_gen_max,
                          g.pcie_width_current, g.pcie_width_max, g.persistence_mode,
                          g.ecc_uncorrected) for g in inv.fact.gpus)


@check("gpu.health")
def gpu_health(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    query = facts.get("gpu.query")
    gpus = query.fact if query.ok else _from_inventory(facts)
    if gpus is None:
        inventory = facts.first_observed("gpu.nvidia-smi", "gpu.pynvml")
        # Say what could not be read (the XML, not a query that was never collected), and
        # conclude nothing from what was never collected.
        unread = next((p for p in (inventory, query) if p.outcome is Outcome.UNPARSEABLE), None)
        if unread is not None or query.not_collected:
            return meta.not_evaluated(unread or (query if inventory.not_collected else inventory))
        if policy.gpus:
            return meta.result(Status.FAIL, f"policy expects GPUs: {query.why_not()}")
        return meta.not_evaluated(query)
    lines, fails, warns = [], [], []
    for g in gpus:
        lines.append(f"GPU{g.index} {g.name}: persistence {g.persistence_mode}, PCIe gen "
                     f"{g.pcie_gen_current}/{g.pcie_gen_max} x{g.pcie_width_current}/"
                     f"x{g.pcie_width_max}, uncorrectable ECC {g.ecc_uncorrected}")
        f, w = _gpu_problems(g)
        fails += f
        warns += w
    source = query if query.ok else facts.first_observed("gpu.nvidia-smi", "gpu.pynvml")
    evidence = [Evidence(source.probe_id, source.command, tuple(lines))]
    xid = facts.get("gpu.xid")
    if xid.ok and xid.fact:
        events = ", ".join(f"Xid {code} on {pci}" for pci, code in xid.fact[-5:])
        fails.append(f"{len(xid.fact)} Xid event(s) in the kernel log ({events})")
        evidence.append(Evidence(xid.probe_id, "dmesg | grep 'NVRM: Xid'", (events,)))
    # An unreadable kernel log (dmesg is root-only on many hosts) is said, not failed.
    unread = "" if xid.ok else f"; Xid events not readable ({xid.reason})"
    if fails:
        return meta.result(Status.FAIL, "; ".join(fails + warns) + unread, actual=lines,
                           evidence=tuple(evidence))
    if warns:
        return meta.result(Status.WARN, "; ".join(warns) + unread, actual=lines,
                           evidence=tuple(evidence))
    ecc = "ECC counts not reported" if any(g.ecc_uncorrected is None for g in gpus) else \
        "no uncorrectable ECC error"
    xids = "no Xid event in the kernel log" if xid.ok else unread.lstrip("; ")
    return meta.result(Status.PASS, f"{len(lines)} GPU(s): persistence on, full PCIe width, "
                       f"{ecc}, {xids}", actual=lines, evidence=tuple(evidence))
