"""swap.capacity (S-009, S-012, F-001, F-022): swap active at the policy size and path,
persisted in /etc/fstab, and not in heavy use."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.model import CheckResult, Evidence, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.memory import FstabEntry, SwapArea

# mkswap keeps one page for its header, so a 200 GiB file shows 4 KiB short in /proc/swaps.
_TOLERANCE_KIB = 1024


def _mib(kib: int) -> str:
    return f"{kib / 1024:,.0f} MiB"


def _persisted(fstab: tuple[FstabEntry, ...], path: str) -> FstabEntry | None:
    return next((e for e in fstab if e.spec == path and e.fstype == "swap"), None)


@check("swap.capacity")
def capacity(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    if policy.swap_size_mib is None:
        return meta.no_policy("omni_swap_size_mib")
    want_kib = policy.swap_size_mib * 1024
    expected = {"size_mib": policy.swap_size_mib, "path": policy.swap_path}
    probe = facts.get("mem.swaps")
    if not probe.ok:
        return meta.not_evaluated(probe, expected=expected)
    areas: tuple[SwapArea, ...] = probe.fact
    total_kib = sum(a.size_kib for a in areas)
    used_kib = sum(a.used_kib for a in areas)
    actual = {"total_mib": total_kib // 1024, "used_mib": used_kib // 1024,
              "areas": [a.path for a in areas]}
    evidence = [Evidence(probe.probe_id, probe.command, tuple(a.line for a in areas) or
                         ("(no active swap area)",))]
    target = [a for a in areas if a.path == policy.swap_path] if policy.swap_path else list(areas)
    have_kib = sum(a.size_kib for a in target)
    where = f" at {policy.swap_path}" if policy.swap_path else ""
    if have_kib + _TOLERANCE_KIB < want_kib:
        got = f"{_mib(have_kib)}{where}" if target else f"no active swap{where}"
        return meta.result(Status.FAIL, f"{got}, expected {_mib(want_kib)}{where} "
                           f"(total active swap {_mib(total_kib)})",
                           expected=expected, actual=actual, evidence=tuple(evidence))
    if policy.swap_path:
        fstab = facts.get("fs.fstab")
        if fstab.ok:
            entry = _persisted(fstab.fact, policy.swap_path)
            line = entry.line if entry else f"(no swap entry for {policy.swap_path})"
            evidence.append(Evidence(fstab.probe_id, fstab.command, (line,)))
            if entry is None:
                return meta.result(Status.WARN, f"{_mib(have_kib)}{where} is active but not in "
                                   "/etc/fstab: it will be gone after a reboot (S-012)",
                                   expected=expected, actual=actual, evidence=tuple(evidence))
    if total_kib and used_kib * 100 > policy.swap_max_used_pct * total_kib:
        pct = used_kib * 100 / total_kib
        return meta.result(Status.WARN, f"swap is {pct:.0f}% used ({_mib(used_kib)}): the host is "
                           f"thrashing (policy warns above {policy.swap_max_used_pct:g}%)",
                           expected=expected, actual=actual, evidence=tuple(evidence))
    return meta.result(Status.PASS, f"{_mib(have_kib)} of swap{where} active, as expected",
                       expected=expected, actual=actual, evidence=tuple(evidence))
