"""The remediation plan: a pure function of the latest findings and the user's flags.

Which playbook fixes which check comes from the catalog (``checks/catalog.yaml``); manual
remediations (BIOS NPS1, serving flags) are listed, never attempted. The NVIDIA driver playbook
is refused unless reboots are allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omni_host.model import CheckResult, Status
from omni_host.reports import HostReport

NEEDS_REBOOT = frozenset({"nvidia-driver.yml"})
FIXABLE = (Status.FAIL, Status.WARN)


@dataclass(frozen=True)
class PlaybookRun:
    playbook: str
    hosts: tuple[str, ...]
    checks: tuple[str, ...]


@dataclass(frozen=True)
class ManualStep:
    host: str
    check: str
    lessons: tuple[str, ...]
    summary: str
    steps: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    runs: tuple[PlaybookRun, ...]
    manual: tuple[ManualStep, ...]
    refused: tuple[str, ...] = ()
    waived: tuple[str, ...] = ()  # findings a waiver accepts: not fixed, said so
    # (host, check id) -> the status before remediation, for the fixed / still failing verdict
    before: dict[tuple[str, str], Status] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.runs


def _wanted(result: CheckResult, only: frozenset[str]) -> bool:
    """A fixable finding the run asks for; a waived one only when named (``--check ID``):
    the waiver says the operator accepted it as it is."""
    if result.status not in FIXABLE or (only and result.id not in only):
        return False
    return result.waiver is None or result.id in only


def make_plan(reports: list[HostReport], *, only: frozenset[str] = frozenset(),
              allow_reboot: bool = False, available: frozenset[str] = frozenset()) -> Plan:
    """Group the fixable findings of reachable hosts by playbook (in catalog order)."""
    by_playbook: dict[str, tuple[list[str], list[str]]] = {}
    manual: list[ManualStep] = []
    refused: list[str] = []
    before: dict[tuple[str, str], Status] = {}
    waived: list[str] = []
    for host in reports:
        for result in host.results:
            if result.status in FIXABLE and result.waiver is not None and not only:
                w = result.waiver
                waived.append(f"{host.host}: {result.id} is waived by {w.approver} until "
                              f"{w.expires}: not fixed (--check {result.id} fixes it anyway)")
            if not _wanted(result, only) or result.remediation is None:
                continue
            fix = result.remediation
            if fix.kind != "playbook" or not fix.playbook or fix.playbook not in available:
                manual.append(ManualStep(host.host, result.id, result.lessons, result.summary,
                                         fix.steps))
                continue
            if fix.playbook in NEEDS_REBOOT and not allow_reboot:
                refused.append(f"{host.host}: {result.id}: {fix.playbook} needs a reboot; "
                               "refused without --allow-reboot")
                continue
            hosts, checks = by_playbook.setdefault(fix.playbook, ([], []))
            if host.host not in hosts:
                hosts.append(host.host)
            if result.id not in checks:
                checks.append(result.id)
            before[(host.host, result.id)] = result.status
    runs = tuple(PlaybookRun(pb, tuple(h), tuple(c)) for pb, (h, c) in by_playbook.items())
    return Plan(runs, tuple(manual), tuple(refused), tuple(waived), before)
