"""One bounded reader for every document (issue 61): a JSON document from a host, the store, a
cache or a bundle is decoded by ``documents.load_json`` within limits on size, nesting and
count; past them it is refused with one line and the rest of the run goes on."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_host.documents import MAX_DEPTH, DocumentError, load_json

FIXTURES = Path(__file__).parent / "fixtures"
STORE = FIXTURES / "captures" / "bench-h100-quiet" / "steady.stores.tar.gz"

_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
documents = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=40)


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@settings(max_examples=200, deadline=None)
@given(documents, st.integers(min_value=1, max_value=8))
def test_a_document_within_its_limits_reads_as_json_reads_it_and_one_past_them_is_refused(
        value: object, max_depth: int) -> None:
    """The property: load_json gives what json.loads gives, or DocumentError exactly when the
    document nests deeper than the limit; never another exception."""
    text = json.dumps(value)
    if _depth(value) > max_depth:
        with pytest.raises(DocumentError, match=f"nested deeper than {max_depth} levels"):
            load_json(text, max_depth=max_depth)
    else:
        assert load_json(text, max_depth=max_depth) == json.loads(text)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_is_a_document_error_never_another_exception(data: bytes) -> None:
    try:
        load_json(data)
    except DocumentError as exc:
        assert str(exc)  # a reason to name beside the file


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "[" * 900 + "]" * 900,
                                  '{"a":' * 5000 + "1" + "}" * 5000])
def test_deep_nesting_is_refused_whatever_the_decoder_would_do(text: str) -> None:
    """100,000 nested arrays overflow json.loads (RecursionError); 900 load and then overflow
    whatever walks them: both are one DocumentError."""
    with pytest.raises(DocumentError, match=f"nested deeper than {MAX_DEPTH} levels"):
        load_json(text)


def test_size_and_count_are_bounded() -> None:
    with pytest.raises(DocumentError, match="larger than 10 bytes"):
        load_json("[1, 2, 3, 4, 5]", max_bytes=10)
    with pytest.raises(DocumentError, match="more than 3 values"):
        load_json("[1, 2, 3]", max_items=3)


def test_every_stored_report_of_the_fixtures_is_within_the_limits() -> None:
    """The limits are not tighter than what omni-host writes: every report the lent machines
    stored reads through the bounded reader."""
    count = 0
    for path in FIXTURES.rglob("*.stores.tar.gz"):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                if member.name.endswith("report.json"):
                    found = tar.extractfile(member)
                    assert found is not None
                    data = found.read()
                    assert load_json(data) == json.loads(data)
                    count += 1
    assert count >= 20


def test_a_nested_report_in_the_store_is_skipped_with_a_line_and_the_store_still_reads(
        tmp_path: Path) -> None:
    """One report.json of 100,000 nested arrays (200 KB) blinded report list, show, diff and
    bench with a RecursionError traceback (issue 61)."""
    from conftest import run_cli

    with tarfile.open(STORE) as tar:
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "steady"
    good = sorted(p.name for p in root.iterdir())
    planted = root / "20261127T000000000Z-abcdef"
    planted.mkdir(mode=0o700)
    (planted / "report.json").write_text("[" * 100_000 + "]" * 100_000)
    (planted / "report.json").chmod(0o600)
    listed = run_cli("report", "list", "--report-dir", str(root))
    assert listed.code == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    assert f"{planted / 'report.json'}: corrupt or truncated report, skipped (nested deeper than " \
           f"{MAX_DEPTH} levels)" in listed.stderr
    assert all(name[:15] in listed.stdout for name in good)
    for args in (("show",), ("diff",)):
        result = run_cli("report", *args, "--report-dir", str(root))
        assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
        assert result.code in (0, 1), result.stderr


# --- patterns from a policy or a host are matched in linear time (RE2), or not at all ---

STARS = ".*" * 14 + "Z"  # fourteen .* in a row: omni-host plan was killed at 60 s on it


@pytest.mark.parametrize("pattern", [STARS, "(a+)+$", "(a|aa)*b", "(.*)*x", "((a*)*)*b"])
def test_a_pattern_that_backtracks_in_python_is_matched_in_linear_time(pattern: str) -> None:
    """Each of these takes seconds to hours in Python's re over one long tensor name; the
    ceiling places a 2,000-tensor model under it in well under a second."""
    import time

    from omni_host.measure.ceiling import bytes_per_token, placement
    from omni_host.probes.parsers.bench_run import TensorMap

    names = [f"blk.{i}.ffn_up_exps.weight" + "a" * 40 for i in range(2000)]
    tensors = TensorMap("llama", 2000, 0, 0, tuple((n, 1 << 20, 16) for n in names))
    started = time.monotonic()
    where = placement({"n_gpu_layers": 99, "tensor_buft_overrides": f"{pattern}=CPU"}, [1 << 40])
    assert not isinstance(where, str), where
    bytes_per_token(tensors, where)
    assert time.monotonic() - started < 5


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab.*+?|()[]{}^$\\1=", max_size=30))
def test_any_pattern_is_matched_or_named_as_not_evaluated(pattern: str) -> None:
    """The property: whatever the pattern, the ceiling places the model or says why not, in
    bounded time; it never raises."""
    import time

    from omni_host.measure.ceiling import bytes_per_token, placement
    from omni_host.probes.parsers.bench_run import TensorMap

    tensors = TensorMap("llama", 50, 0, 0, tuple((f"blk.{i}.a" + "ab" * 20, 1024, 16)
                                                 for i in range(50)))
    started = time.monotonic()
    where = placement({"n_gpu_layers": 99, "tensor_buft_overrides": f"{pattern}=CPU"}, [1 << 40])
    if not isinstance(where, str):
        bytes_per_token(tensors, where)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(("pattern", "refused"), [
    (r"\.ffn_(up|down|gate)_exps", False), (r"blk\.(1[0-9]|2[0-9])\.ffn_.*_exps", False),
    (r"blk\..*\.ffn_.*_exps", False), ("exps", False), (r"a{2,5}b", False),
    (STARS, True), ("(a+)+$", True), ("(a|ab)*c", True), (".*a.*b.*c", True), ("a+b+c*", True),
])
def test_a_pattern_the_hosts_backtracking_engine_would_hang_on_is_refused_where_it_enters(
        pattern: str, refused: bool) -> None:
    """llama.cpp matches -ot with std::regex on the host: what it would backtrack through is
    refused in the policy, by name (real placements pass)."""
    from omni_host.errors import InventoryError
    from omni_host.plan.host_patterns import host_cost
    from omni_host.plan.policy import policy_from_vars

    assert (host_cost(pattern) is not None) == refused
    bench = {"llama_bench": "/b/llama-bench", "model": "/m.gguf", "args": ["-ot", f"{pattern}=CPU"]}
    if refused:
        with pytest.raises(InventoryError, match="omni_bench.args: -ot pattern"):
            policy_from_vars({"omni_bench": bench}, "t")
    else:
        assert policy_from_vars({"omni_bench": bench}, "t").bench is not None


def test_the_last_stored_audit_is_an_audit_and_the_last_bench_is_said_apart(tmp_path: Path) -> None:
    """Issue 63: schedule status named a bench report as the "last stored audit"."""
    from omni_host.app.stored import newest

    with tarfile.open(STORE) as tar:  # a store of benches only (the lent H100's steady runs)
        tar.extractall(tmp_path, filter="data")
    root = tmp_path / "steady"
    stamps = sorted(p.name for p in root.iterdir() if (p / "report.json").is_file())
    assert newest(root) is None
    last = newest(root, benches=True)
    assert last is not None and last.id == stamps[-1]
    assert json.loads((root / stamps[-1] / "report.json").read_text())["source"] == "bench"


# --- numbers bounded by the physical world ---

def test_a_number_with_more_digits_than_hardware_has_is_a_parse_error_of_its_field_only() -> None:
    """A 5,000-digit speed raised out of int() (Python refuses 4,300 digits and more) and
    killed the memory parsers; a DIMM rated 4,000,000,000 MT/s was believed."""
    from omni_host.errors import ParseError
    from omni_host.probes.parsers.memory import parse_dmidecode_memory, parse_meminfo

    with pytest.raises(ParseError, match="lacks MemTotal"):
        parse_meminfo(f"MemTotal: {'9' * 5000} kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
    dimm = ("Handle 0x1, DMI type 17, 40 bytes\nMemory Device\n\tSize: 16 GB\n"
            f"\tSpeed: {'9' * 5000} MT/s\n\tConfigured Memory Speed: 4000000000 MT/s\n"
            "\tLocator: DIMM_A1\n\tBank Locator: P0 CHANNEL A\n")
    (read,) = parse_dmidecode_memory(dimm).dimms
    assert (read.size_mib, read.rated_mts, read.configured_mts) == (16384, None, None)
    real = dimm.replace("9" * 5000, "6400").replace("4000000000", "5600")
    (read,) = parse_dmidecode_memory(real).dimms
    assert (read.rated_mts, read.configured_mts) == (6400, 5600)


@pytest.mark.parametrize(("args", "why"), [
    (("plan", "box", "--ctx", str(2**63)), "--ctx 1 to 134,217,728"),
    (("plan", "box", "--depth", str(2**63)), "--depth 0 to 134,217,728"),
    (("serve", "watch", "box", "--for", "1e22h"), "not a duration"),
    (("serve", "watch", "box", "--for", "25h"), "--for at most a day (24h)"),
    (("serve", "watch", "box", "--for", "9" * 30 + "h"), "not a duration"),
])
def test_a_window_or_a_context_past_the_physical_world_is_refused(args: tuple[str, ...],
                                                                   why: str) -> None:
    from conftest import run_cli

    done = run_cli(*args)
    assert done.code == 2 and why in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
