"""The remediation flow: current findings -> plan -> preview (check mode) -> apply -> re-audit.

Each step is a function the CLI calls in order, printing between them; nothing here prints or
prompts. A host whose preview failed is never applied to; a host that failed or went
unreachable during the apply is never reported fixed.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omni_host.collect.runner import PlaybookOutcome, TaskOutcome, run_playbook
from omni_host.model import Status
from omni_host.remediate.plan import Plan, PlaybookRun
from omni_host.reports import FixOutcome, FixVerdict, HostReport
from omni_host.resources import collection_path


def available_playbooks() -> frozenset[str]:
    return frozenset(p.name for p in collection_path("playbooks").glob("*.yml"))


@dataclass(frozen=True)
class Step:
    run: PlaybookRun
    outcome: PlaybookOutcome

    def failed_hosts(self) -> list[str]:
        return [h for h in self.run.hosts if self.outcome.failure(h) is not None]


def execute(plan: Plan, *, inventory: Path, check_mode: bool, allow_reboot: bool,
            known_hosts: Path, artifacts_root: Path, hosts: set[str] | None = None,
            on_task: Callable[[TaskOutcome], None] | None = None,
            vault_password_files: tuple[Path, ...] = ()) -> list[Step]:
    """Run every playbook of the plan (limited to ``hosts`` when given)."""
    steps = []
    for run in plan.runs:
        targets = tuple(h for h in run.hosts if hosts is None or h in hosts)
        if not targets:
            continue
        mode = "check" if check_mode else "apply"
        outcome = run_playbook(
            playbook=collection_path("playbooks") / run.playbook, inventory=inventory, hosts=targets,
            check_mode=check_mode, artifacts_dir=artifacts_root / f"{mode}-{run.playbook[:-4]}",
            known_hosts=known_hosts, extravars={"omni_allow_reboot": allow_reboot},
            on_task=on_task, vault_password_files=vault_password_files)
        steps.append(Step(PlaybookRun(run.playbook, targets, run.checks), outcome))
    return steps


def hosts_ok(steps: list[Step], hosts: tuple[str, ...]) -> set[str]:
    failed = {h for s in steps for h in s.failed_hosts()}
    return {h for h in hosts if h not in failed}


def artifacts_dir(store_root: Path) -> Path:
    store_root.mkdir(parents=True, exist_ok=True, mode=0o700)  # as the store makes it
    return Path(tempfile.mkdtemp(prefix=".ansible-", dir=store_root))


def outcomes(plan: Plan, applied: list[Step], after: list[HostReport]) -> tuple[FixOutcome, ...]:
    """Per (host, check): fixed, still failing or error, with the evidence of why."""
    after_by_host = {h.host: h for h in after}
    records = []
    for step in applied:
        for host in step.run.hosts:
            failure = step.outcome.failure(host)
            report = after_by_host.get(host)
            for check_id in step.run.checks:
                if (host, check_id) not in plan.before:
                    continue
                record = functools.partial(
                    FixOutcome, host, check_id, step.run.playbook,
                    plan.before[(host, check_id)].value,
                    tuple(t.task for t in step.outcome.changed(host)))
                result = None if report is None else next(
                    (r for r in report.results if r.id == check_id), None)
                if failure is not None:
                    records.append(record(None, FixVerdict.ERROR, f"{failure.status} at task "
                                          f"'{failure.task}': {failure.message}"))
                elif report is None or not report.reachable or result is None:
                    records.append(record(None, FixVerdict.ERROR, "re-audit failed: "
                                          f"{report.error if report else 'not run'}"))
                elif result.status is Status.PASS:
                    records.append(record(result.status.value, FixVerdict.FIXED, result.summary))
                else:
                    records.append(record(result.status.value, FixVerdict.STILL_FAILING,
                                          result.summary))
    return tuple(records)
