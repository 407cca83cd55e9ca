"""serve.tokens-per-s (F-002, S-005): each running llama-server's own rate, judged against the
host's past (``evaluate.prior``): its bench baseline, the window since its previous audit
(the same server there), and the stored placement plan's winner beside a server of the
plan's model. A bundle judged without a store has none of them and says what it can."""

from __future__ import annotations

from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.meta import CheckMeta, check_with_past
from omni_host.evaluate.prior import Prior
from omni_host.measure.plan import served_against_plan
from omni_host.measure.serve import judge_served
from omni_host.model import CheckResult, InferenceServer
from omni_host.plan.policy import Policy


@check_with_past("serve.tokens-per-s")
def served_rate(facts: HostFacts, policy: Policy, meta: CheckMeta, prior: Prior) -> CheckResult:
    servers = facts.get("serve.servers")
    if not servers.ok:
        return meta.not_evaluated(servers)
    result = judge_served(meta, servers.fact, prior.baseline,
                          min_fraction=policy.serve_min_fraction,
                          previous=prior.previous_servers, previous_audit=prior.previous_audit)
    return _with_plan(result, servers.fact, prior)


def _with_plan(result: CheckResult, servers: tuple[InferenceServer, ...],
               prior: Prior) -> CheckResult:
    """Beside each server of the stored plan's model: the plan's winner and the gain it
    predicts for the server's placement."""
    if prior.plan is None:
        return result
    plan_id, plan, proof = prior.plan
    model = (plan.get("model") or {}).get("fingerprint")
    notes = []
    for server in servers:
        if model and server.model_fingerprint == model:
            found = served_against_plan(server.argv, plan_id, plan, proof,
                                        server.gpu_memory_by_gpu)
            if found is not None:
                notes.append((server.pid, *found))
    if not notes:
        return result
    return result.noted("; ".join(f"pid {pid}: {line}" for pid, line, _ in notes), "plan",
                        {str(p): d for p, _, d in notes})
