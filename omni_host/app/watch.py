"""The stability watch use case: one host's servers sampled every ``every_s`` seconds for
``duration_s`` over one connection, the window judged (``measure.watch``), and the report
(source ``serve-watch``) finished and stored like an audit's. Ctrl-C or SIGTERM ends the window
early: what was sampled is judged and stored, marked interrupted."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omni_host import interrupts
from omni_host.app.audit import Audited, Hosts, conclude
from omni_host.collect.run import collect, open_transport
from omni_host.collect.transport.base import SshOptions, Transport
from omni_host.errors import TransportError, UsageError
from omni_host.evaluate.audit import evaluate_watch, unreachable
from omni_host.measure.asked import Asked, Sample, WatchAsked
from omni_host.model import Source
from omni_host.plan.hosts import HostPlan, Targets
from omni_host.probes.catalog import evaluate, serve_probe

SAMPLE_SHARE = 0.75  # of the interval, for the servers' answers: the rest is the round trip


def sample(plan: HostPlan, transport: Transport, within_s: float) -> Sample:
    """One round: the servers as the serve helper sees them now, asked as the audit asks them
    (the policy's key and its accounts: one credential path), every server's answers within
    ``within_s`` in all (a server that trickles its answer is cut and named: one slow server
    stretched an 8 s window to 31 s)."""
    at = time.time()
    probe = serve_probe(plan.policy, "--gpu", "--within", f"{within_s:.3f}")
    try:
        bundle = collect(plan.name, transport, become=plan.become, probes=(probe,),
                         python=plan.python)
    except TransportError as exc:
        return Sample(at, (), str(exc))
    found = evaluate(probe, bundle.results.get(probe.id))
    if not found.ok:
        return Sample(at, (), found.why_not())
    return Sample(at, found.fact)


@dataclass(frozen=True)
class WatchRequest:
    """``omni-host serve watch``, parsed: one host (``targets`` must select one), the window
    and its interval."""

    targets: Targets
    ssh: SshOptions
    duration_s: float
    every_s: float
    store_root: Path | None = None  # None: the default store
    store: bool = True
    inventory: str | None = None
    hint_args: tuple[str, ...] = ()


def run(req: WatchRequest,
        on_sample: Callable[[int, int, Sample], None] = lambda i, n, s: None) -> Audited:
    """Sample, judge, store (in the request's store, unless it says not to); ``on_sample``
    is told of each round (progress)."""
    from omni_host.app.stored import store_at

    plans = req.targets.plans()
    if len(plans) != 1:
        raise UsageError(f"serve watch watches one host; the pattern selects {len(plans)}")
    plan = plans[0]
    store_root = store_at(req.store_root) if req.store else None
    started, samples, interrupted, terminated = time.time(), [], False, False
    rounds = max(2, int(req.duration_s // req.every_s) + 1)
    transport = open_transport(plan, req.ssh)
    try:
        for i in range(rounds):
            due = started + i * req.every_s
            while (left := due - time.time()) > 0:
                interrupts.check()
                time.sleep(min(0.2, left))
            samples.append(sample(plan, transport, SAMPLE_SHARE * req.every_s))
            on_sample(i + 1, rounds, samples[-1])
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (the CLI's subclass of it)
        interrupts.handled()
        interrupted, terminated = True, interrupts.terminated(exc)
    finally:
        transport.close()
    elapsed = time.time() - started
    if not samples:
        report = unreachable(plan, "interrupted before the first sample", elapsed)
    else:
        report = evaluate_watch(plan, Asked(watch=WatchAsked(tuple(samples), interrupted,
                                                             req.duration_s)), elapsed)
    return conclude(Hosts([report], Source.WATCH, started, interrupted, terminated),
                    inventory=req.inventory, waivers=(), history=None, store_root=store_root,
                    hint_args=req.hint_args)
