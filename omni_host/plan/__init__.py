"""Plan: the expected state and the targets, before any host is touched (inventory, policy,
waivers, host plans)."""
