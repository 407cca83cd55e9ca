"""Evaluate: bundles -> facts -> checks (pure functions of facts and policy) -> host reports,
with the Sentinel layers (fact summary, Strategic)."""
