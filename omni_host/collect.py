"""Collection: ship the collector and the probe plan to a host in one round trip.

The same payload (``collector.py`` + one ``main(plan)`` line) runs over every engine: a local
subprocess, an SSH channel, or Ansible's ``script`` module. Only the transport differs.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from importlib import resources

from omni_host.bundle import Bundle
from omni_host.collector import MARKER
from omni_host.errors import TransportError
from omni_host.model import CommandResult
from omni_host.probes import PROBES, Probe
from omni_host.transport.base import Transport

DEFAULT_PYTHON = "python3"
# Room for the fallbacks that run after the primaries, and for the connection itself.
_SLACK_S = 15.0


@lru_cache(maxsize=1)
def collector_source() -> str:
    return resources.files("omni_host").joinpath("collector.py").read_text(encoding="utf-8")


def payload(probes: tuple[Probe, ...], probe_timeout_s: float | None = None) -> str:
    plan = json.dumps([p.plan_entry(probe_timeout_s) for p in probes])
    return f"{collector_source()}\nmain({plan!r})\n"


def deadline_s(probes: tuple[Probe, ...], probe_timeout_s: float | None = None) -> float:
    """The host's whole deadline: the slowest primary, then the slowest fallback, plus slack."""
    def limit(p: Probe) -> float:
        return probe_timeout_s or p.timeout_s

    longest = max(limit(p) for p in probes if not p.fallback_for)
    longest_fallback = max((limit(p) for p in probes if p.fallback_for), default=0.0)
    return longest + longest_fallback + _SLACK_S


def _diagnose(code: int, stderr: str) -> str:
    text = stderr.strip().splitlines()
    last = text[-1] if text else ""
    if code == 127 or "python3: not found" in stderr or "No such file" in last:
        return "python3 is not installed on the host (the agentless audit needs it; " \
            "set ansible_python_interpreter if it lives elsewhere)"
    if "sudo" in stderr and ("password" in stderr or "not allowed" in stderr):
        return f"become needs passwordless sudo: {last}"
    return f"collector failed (exit {code}): {last or 'no output'}"


def collect(
    host: str,
    transport: Transport,
    *,
    become: bool = False,
    probes: tuple[Probe, ...] = PROBES,
    probe_timeout_s: float | None = None,
    python: str = DEFAULT_PYTHON,
) -> Bundle:
    """Run every probe on ``host`` through ``transport``; raises TransportError when the host
    cannot be reached or the collector itself cannot run. ``python`` is the host's
    interpreter (Ansible's ``ansible_python_interpreter``; default: python3 on its PATH)."""
    started = time.time()
    raw = transport.run((python, "-"), stdin=payload(probes, probe_timeout_s),
                        timeout_s=deadline_s(probes, probe_timeout_s), sudo=become)
    return bundle_from_output(host, transport.name, stdout=raw.stdout, stderr=raw.stderr,
                              exit_code=raw.exit_code, duration_s=raw.duration_s,
                              started=started)


def bundle_from_output(host: str, transport: str, *, stdout: str, stderr: str, exit_code: int,
                       duration_s: float, started: float) -> Bundle:
    """The collector's output (whichever engine carried it) -> a bundle, or TransportError."""
    head, sep, body = stdout.partition(MARKER + "\n")
    if not sep:
        raise TransportError(_diagnose(exit_code, stderr or head))
    try:
        doc = json.loads(body)
        records = doc.pop("probes")
        results = {
            r["id"]: CommandResult(r["id"], tuple(r["argv"]), r["status"], r["exit_code"],
                                   r["stdout"], r["stderr"], float(r["duration_s"]), r["reason"])
            for r in records
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise TransportError(f"collector output was cut off or corrupted ({exc})") from exc
    doc["round_trip_s"] = round(duration_s, 4)
    return Bundle(host=host, collected_at=started, transport=transport, meta=doc,
                  results=results)
