"""The init use case: a known-good host's observed state recorded as its host_vars, the
file's other values kept. Only what was observed becomes an expectation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omni_host.collect.run import collect_host
from omni_host.collect.transport.base import SshOptions
from omni_host.errors import UsageError
from omni_host.evaluate.facts import facts_from_bundle
from omni_host.evaluate.observed import diff, merged_text, observed_vars
from omni_host.plan.hosts import HostPlan
from omni_host.resources import atomic_write


@dataclass(frozen=True)
class Recorded:
    target: Path
    old: str  # the file's text now ("" when there is none)
    new: str  # what it would hold

    @property
    def unchanged(self) -> bool:
        return self.new == self.old

    def diff(self) -> str:
        return diff(self.old, self.new, str(self.target))


def host_vars_file(inventory: Path, name: str) -> Path:
    """``inventory/host_vars/<name>.yml``; a name from a dynamic inventory ("../../x",
    "/etc/x") must not steer the write."""
    host_vars = inventory / "host_vars"
    target = host_vars / f"{name}.yml"
    if target.parent.resolve() != host_vars.resolve() or "\0" in name or not name.strip("."):
        raise UsageError(f"init: host name {name!r} is not a file name in {host_vars}: "
                         "record it by hand")
    return target


def observe(plan: HostPlan, ssh: SshOptions, probe_timeout_s: float | None,
            target: Path) -> Recorded:
    """Collect the host (TransportError when it cannot be reached) and merge what it shows
    into its host_vars text."""
    import yaml

    bundle = collect_host(plan, ssh, probe_timeout_s)
    old = target.read_text() if target.is_file() else ""
    existing = (yaml.safe_load(old) or {}) if old else {}
    observed = observed_vars(facts_from_bundle(bundle, plan.policy), plan.policy)
    return Recorded(target, old, merged_text(existing, observed, plan.name))


def write(recorded: Recorded) -> None:
    """Atomically: a reader never sees half a file."""
    recorded.target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(recorded.target, recorded.new)
