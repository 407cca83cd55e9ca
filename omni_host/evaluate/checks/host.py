"""disk.free (F-001), packages.build-deps (F-015), cpu.avx512 (S-002), gpu.health (DCGM)
and gpu.xid (NVIDIA's Xid catalog)."""

from __future__ import annotations

from functools import lru_cache

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.model import CheckResult, Evidence, Outcome, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.build import GpuQuery
from omni_host.resources import data_path, read_yaml

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
    cpu = facts.cpu()
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
    inv = facts.gpus()
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
        inventory = facts.gpus()
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
    source = query if query.ok else facts.gpus()
    evidence = [Evidence(source.probe_id, source.command, tuple(lines))]
    if fails:
        return meta.result(Status.FAIL, "; ".join(fails + warns), actual=lines,
                           evidence=tuple(evidence))
    if warns:
        return meta.result(Status.WARN, "; ".join(warns), actual=lines, evidence=tuple(evidence))
    ecc = "ECC counts not reported" if any(g.ecc_uncorrected is None for g in gpus) else \
        "no uncorrectable ECC error"
    return meta.result(Status.PASS, f"{len(lines)} GPU(s): persistence on, full PCIe width, "
                       f"{ecc} (Xid events: gpu.xid)", actual=lines, evidence=tuple(evidence))


ACTIONS = {"restart-app": "check the application that used the GPU and restart it",
           "reset-gpu": "drain the GPU and reset it (nvidia-smi -r -i N) or reboot",
           "reboot": "reboot the node, then check the GPU's power and seating",
           "hardware": "take the GPU out of service for inspection (RMA)",
           "ignore": "a consequence of an earlier Xid: act on that one",
           "unknown": "look the code up in NVIDIA's Xid catalog"}
SEVERE = frozenset({"reset-gpu", "reboot", "hardware"})


@lru_cache(maxsize=1)
def xid_catalog() -> dict[int, dict[str, str]]:
    return {int(k): v for k, v in read_yaml(data_path("checks") / "xid.yaml").items()}


@check("gpu.xid")
def gpu_xid(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    """Each Xid of the kernel log by its class (NVIDIA's catalog) and its age: within
    omni_xid_window_h, a reset, reboot or hardware Xid fails and an application's warns;
    older ones (still since this boot) warn only where the GPU may still need its reset."""
    probe = facts.get("gpu.xid")
    if not probe.ok:
        return meta.not_evaluated(probe)
    log = probe.fact
    window = policy.xid_window_h
    if not log.events:
        up = f" (up {log.uptime_s / 3600:.1f} h)" if log.uptime_s is not None else ""
        return meta.result(Status.PASS, f"no Xid event in the kernel log since boot{up}",
                           evidence=(Evidence(probe.probe_id, probe.command, ()),))
    catalog = xid_catalog()
    groups: dict[tuple[int, str], list[float | None]] = {}
    for event in log.events:
        groups.setdefault((event.code, event.pci), []).append(log.age_h(event))
    lines, fails, warns, old = [], [], [], []
    for (code, pci), ages in groups.items():
        entry = catalog.get(code, {"name": "not in omni-host's table", "action": "unknown"})
        known = [a for a in ages if a is not None]
        newest = min(known) if known else None
        when = f"{newest:.1f} h ago" if newest is not None else "time unknown"
        line = (f"Xid {code} ({entry['name']}) on {pci}, {len(ages)}x, last {when}: "
                f"{ACTIONS[entry['action']]}")
        lines.append(line)
        recent = newest is None or newest <= window
        if recent and entry["action"] in SEVERE:
            fails.append(line)
        elif recent and entry["action"] != "ignore":
            warns.append(line)
        elif entry["action"] in SEVERE:
            warns.append(line + " (if it was not done since)")
        else:
            old.append(line)
    evidence = (Evidence(probe.probe_id, probe.command,
                         tuple(f"[{e.at_s}] Xid {e.code} {e.pci}: {e.detail}"[:160]
                               for e in log.events[-8:])),)
    details = {"window_h": window, "uptime_s": log.uptime_s}
    if fails:
        return meta.result(Status.FAIL, "; ".join(fails + warns), actual=lines,
                           evidence=evidence, details=details)
    if warns:
        return meta.result(Status.WARN, "; ".join(warns), actual=lines, evidence=evidence,
                           details=details)
    return meta.result(Status.PASS, f"no Xid that needs action in the last {window:g} h; "
                       + "; ".join(old), actual=lines, evidence=evidence, details=details)
