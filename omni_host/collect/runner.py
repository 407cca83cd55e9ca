"""A thin adapter over ansible-runner: one playbook, some hosts, check mode or not, the
artifacts kept. Events become plain task records; nothing here prints."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_host.errors import PlayCanceled, RemediationError
from omni_host.plan.connection import DEFAULT_PYTHON
from omni_host.resources import collections_root


@dataclass(frozen=True)
class TaskOutcome:
    host: str
    task: str
    status: str  # ok, changed, failed, skipped, unreachable
    message: str
    diff: str


@dataclass(frozen=True)
class PlaybookOutcome:
    playbook: str
    check_mode: bool
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    tasks: tuple[TaskOutcome, ...]
    artifacts: Path

    def for_host(self, host: str) -> list[TaskOutcome]:
        return [t for t in self.tasks if t.host == host]

    def changed(self, host: str) -> list[TaskOutcome]:
        return [t for t in self.for_host(host) if t.status == "changed"]

    def failure(self, host: str) -> TaskOutcome | None:
        return next((t for t in self.for_host(host) if t.status in ("failed", "unreachable")), None)


def _diff_text(diff: Any) -> str:
    """Ansible's diff (a dict or a list of dicts with before/after or prepared) as unified text."""
    parts = diff if isinstance(diff, list) else [diff] if diff else []
    lines: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("prepared"):
            lines.append(str(part["prepared"]).rstrip("\n"))
            continue
        before, after = part.get("before"), part.get("after")
        if isinstance(before, str) and isinstance(after, str) and before != after:
            lines.extend(difflib.unified_diff(
                before.splitlines(), after.splitlines(),
                str(part.get("before_header", "before")), str(part.get("after_header", "after")),
                lineterm=""))
        elif isinstance(before, dict) and isinstance(after, dict):
            lines.extend(_attribute_changes(before, after))
    return "\n".join(lines)


def _attribute_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """A file's state, mode or owner change (the file module's diff is a pair of dicts): one
    line per attribute that differs, so a preview never hides a mode or ownership change."""
    path = after.get("path") or before.get("path") or "?"
    return [f"{path}: {key} {before.get(key, '(unset)')} -> {after.get(key, '(unset)')}"
            for key in sorted(set(before) | set(after))
            if key != "path" and before.get(key) != after.get(key)]


_EVENTS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_skipped": "skipped",
           "runner_on_unreachable": "unreachable"}


def _task(event: dict[str, Any]) -> TaskOutcome | None:
    kind = _EVENTS.get(event.get("event", ""))
    data = event.get("event_data") or {}
    if kind is None or "host" not in data:
        return None
    res = data.get("res") or {}
    if kind == "ok" and res.get("changed"):
        kind = "changed"
    if kind == "failed" and data.get("ignore_errors"):
        kind = "ok"
    msg = res.get("msg")
    message = (", ".join(map(str, msg)) if isinstance(msg, list)
               else str(msg or res.get("stderr") or "")).strip()
    return TaskOutcome(str(data["host"]), str(data.get("task", "")), kind,
                       message.splitlines()[0] if message else "", _diff_text(res.get("diff")))


def _envvars(known_hosts: Path) -> dict[str, str]:
    """The environment ansible-playbook runs in: host keys verified against the audit's
    known_hosts, the collector's Python, our collection, the venv's ansible-playbook."""
    return {
        "ANSIBLE_SSH_COMMON_ARGS": f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        # the Python the audit's collector ran with (python3 on the host's PATH), unless the
        # inventory names one: Ansible's discovery picked another (a pyenv shim of a version
        # not installed) and the preview failed where the audit had worked
        "ANSIBLE_PYTHON_INTERPRETER": DEFAULT_PYTHON,
        # the omni.host collection (roles, filters) that the thin playbooks name
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join((str(collections_root()), os.environ.get(
            "ANSIBLE_COLLECTIONS_PATH", "~/.ansible/collections:/usr/share/ansible/collections"))),
        # ansible-playbook is installed beside this interpreter (a venv need not be activated)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _recorder(on_task: Callable[[TaskOutcome], None] | None
              ) -> tuple[list[TaskOutcome], dict[tuple[str, str], None],
                         Callable[[dict[str, Any]], bool]]:
    """ansible-runner's event handler, with the tasks it has ended (each handed to
    ``on_task`` as it ends) and the (host, task) begun and not yet ended, in order."""
    tasks: list[TaskOutcome] = []
    started: dict[tuple[str, str], None] = {}

    def handler(event: dict[str, Any]) -> bool:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_start" and "host" in data:
            started[(str(data["host"]), str(data.get("task", "")))] = None
        outcome = _task(event)
        if outcome is not None:
            started.pop((outcome.host, outcome.task), None)
            tasks.append(outcome)
            if on_task is not None:
                on_task(outcome)
        return True

    return tasks, started, handler


def run_playbook(
    *,
    playbook: Path,
    inventory: Path,
    hosts: tuple[str, ...],
    check_mode: bool,
    artifacts_dir: Path,
    known_hosts: Path,
    extravars: dict[str, Any],
    on_task: Callable[[TaskOutcome], None] | None = None,
    forks: int | None = None,
    vault_password_files: tuple[Path, ...] = (),
) -> PlaybookOutcome:
    """Run one playbook limited to ``hosts``; check mode adds ``--check --diff``; the vault
    password files the inventory was read with go to ansible-playbook as they are (a vaulted
    omni_* value is then readable by the play, as it was by the audit)."""
    import shlex

    import ansible_runner

    if not playbook.is_file():
        raise RemediationError(f"{playbook}: no such playbook")
    artifacts_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # evidence: its owner's
    cmdline = " ".join(["--check --diff" if check_mode else "--diff",
                        *(f"--vault-password-file {shlex.quote(str(f.resolve()))}"
                          for f in vault_password_files)])
    tasks, started, handler = _recorder(on_task)
    envvars = _envvars(known_hosts)
    try:
        runner = ansible_runner.run(
            private_data_dir=str(artifacts_dir),
            playbook=str(playbook.resolve()),
            inventory=str(inventory.resolve()),
            limit=",".join(hosts),
            extravars=extravars,
            cmdline=cmdline,
            envvars=envvars,
            quiet=True,
            event_handler=handler,
            forks=forks,
        )
    except Exception as exc:  # ansible-runner raises its own and plain exceptions alike
        raise RemediationError(f"{playbook.name}: ansible-runner failed to start: {exc}") from exc
    if str(runner.status) == "canceled":  # ansible-runner took the signal: it never reaches us
        raise PlayCanceled(playbook.name, tuple(f"{t.host}: {t.task} ({t.status})" for t in tasks),
                           tuple(f"{host}: {task}" for host, task in started), check_mode)
    return PlaybookOutcome(playbook.name, check_mode, str(runner.status), int(runner.rc or 0),
                           tuple(tasks), artifacts_dir)
