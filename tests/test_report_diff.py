"""`report diff` says what changed and only that (issue 47): fixed is fixed (the word
"resurrected" is the engines'), a served rate that moved within the bench's tolerance is no
change (an idle llama-server read 80.6 -> 80.6, "+0%", and the host never diffed to "no
change"), and a bench drop says what its own attribution found changed on the host."""

from __future__ import annotations

from typing import Any

from omni_host import codec
from omni_host.cli.report import _diff_text
from omni_host.model import CheckResult, Severity, Status
from omni_host.report.history import diff_hosts
from omni_host.reports import HostReport, PolicyRecord


def _result(check: str, status: str, details: dict[str, Any] | None = None) -> CheckResult:
    return CheckResult(check, check, Status(status), Severity.HIGH, (), status,
                       details=details or {})


def _entry(*, swap: str = "pass", served: float | None = None, bench: dict | None = None,
           tolerance: Any = None) -> HostReport:
    results = [_result("swap.capacity", swap)]
    if served is not None:
        results.append(_result("serve.tokens-per-s", "pass", {
            "servers": [{"server": "llama-server pid 41", "served_ts": served}]}))
    if bench is not None:
        results.append(_result("perf.tokens-per-s", bench["status"],
                               {"changed": bench["changed"], "tests": {
                                   "tg128": {"kind": "tg", "samples_ts": [50.0, 50.0]}},
                                "verdicts": bench.get("verdicts", {})}))
    values = {"omni_bench": {"tolerance_pct": tolerance}} if tolerance is not None else {}
    return HostReport("box", None, "local", True, None, 1.0, tuple(results),
                      policy=PolicyRecord(values, {}))


def _text(old: HostReport, new: HostReport) -> str:
    d = {"host": "box", "previous": "A", "latest": "B", **codec.to_dict(diff_hosts(old, new))}
    return _diff_text([d])


def test_a_fixed_check_is_fixed_not_resurrected() -> None:
    text = _text(_entry(swap="fail"), _entry(swap="pass"))
    assert "  fixed on the host: swap.capacity" in text.splitlines()
    assert "resurrected" not in text


def test_a_pass_because_the_expected_state_moved_is_no_fix_and_values_read_as_yaml() -> None:
    """Issue 63: a check that passed because its expected state was lowered was called fixed,
    and the policy's values printed as Python's repr (None)."""
    import dataclasses

    old = dataclasses.replace(_entry(swap="fail"), policy=PolicyRecord(
        {"omni_swap_size_mib": 4096, "omni_build_packages": ["numactl"]}, {}))
    new = dataclasses.replace(_entry(swap="pass"), policy=PolicyRecord(
        {"omni_swap_size_mib": None, "omni_build_packages": []}, {}))
    lines = _text(old, new).splitlines()
    assert not any(line.startswith("  fixed") for line in lines), lines
    assert "  policy changed: omni_swap_size_mib: 4096 -> null" in lines
    assert "  policy changed: omni_build_packages: [numactl] -> []" in lines
    assert "  verdicts that moved with the expected state, not the host (a pass here is no fix): " \
        "swap.capacity" in lines
    assert not any("None" in line for line in lines)


def test_a_served_rate_within_the_benchs_tolerance_is_no_change() -> None:
    assert _text(_entry(served=80.6), _entry(served=80.6000001)).splitlines()[1] == \
        "  no change in verdicts, state or policy"
    assert "tokens/s" not in _text(_entry(served=80.6), _entry(served=78.0))  # -3.2% < 5%
    moved = _text(_entry(served=80.6), _entry(served=70.0))
    assert "  tokens/s: served by llama-server pid 41: 80.6 -> 70.0 (-13%)" in moved
    assert "no change" not in moved
    # the operator's tolerance for generation is the one a served rate is held to
    assert "tokens/s" in _text(_entry(served=80.6), _entry(served=78.0, tolerance={"tg": 2}))
    assert "tokens/s" not in _text(_entry(served=80.6), _entry(served=70.0, tolerance=20))


def test_a_bench_drop_says_what_changed_on_the_host() -> None:
    cause = "GPU processes: 0 -> 1 (4242 python3, 20 GiB)"
    text = _text(_entry(bench={"status": "pass", "changed": []}),
                 _entry(bench={"status": "fail", "changed": [cause]}))
    assert f"  the bench found changed on the host since its baseline: {cause}" in text


def test_a_diff_names_what_the_bench_read_in_its_history() -> None:
    """Issue 67: a slide or a step the newer bench read over its runs is named by the diff."""
    text = _text(_entry(bench={"status": "pass", "changed": []}),
                 _entry(bench={"status": "warn", "changed": [], "verdicts": {
                     "tg128": {"status": "warn", "drop": 0.03, "step": 0.031}}}))
    assert "  over its history: tg128: a step, its last runs 3.1% below the runs before them" \
        in text.splitlines()
    assert "no change" not in text
