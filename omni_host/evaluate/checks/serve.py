"""serve.tokens-per-s (F-002, S-005): the running llama-server's own rate. Judged here without
the stored history (a bundle alone: no baseline to compare with); the audit's finish judges it
again against the host's bench baseline and its previous audit (``evaluate.serve``)."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check
from omni_host.evaluate.serve import judge_served
from omni_host.model import CheckResult
from omni_host.plan.policy import Policy


@check("serve.tokens-per-s")
def served_rate(facts: HostFacts, policy: Policy, meta: CheckMeta) -> CheckResult:
    servers = facts.get("serve.servers")
    if not servers.ok:
        return meta.not_evaluated(servers)
    return judge_served(meta, servers.fact, None, min_fraction=policy.serve_min_fraction)
