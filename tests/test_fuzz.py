"""Parsers are total: every real capture in tests/fixtures, mutated (cut, repeated, spliced
with digits, signs, brackets and newlines, huge or negative numbers), fed to every parser,
ends in a fact or a ParseError: never another exception, never a hang. Bounded and
derandomized so that CI runs the same inputs each time, in a few seconds."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_host.collect.bundle import read_bundles
from omni_host.errors import ParseError
from omni_host.probes.catalog import PROBES_BY_ID

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXAMPLES = 250  # mutated inputs a run, each fed to every parser (PROBES_BY_ID has 23)


def seeds() -> list[str]:
    texts: set[str] = set()
    for folder in ("bundles", "bundles-full", "bundles-audit"):
        for archive in sorted((FIXTURES / folder).glob("*.tar.gz")):
            for bundle in read_bundles(archive):
                texts |= {r.stdout for r in bundle.results.values() if r.stdout}
    for path in sorted((FIXTURES / "public").rglob("*")) + sorted((FIXTURES / "captures").rglob("*")):
        if path.is_file():
            texts.add(path.read_text(encoding="utf-8", errors="replace"))
    return sorted(texts)


SEEDS = seeds()
_NUMBER = re.compile(r"\d+")
NOISE = st.text(alphabet="0123456789-:,.<>/ \n\t()[]xX", max_size=12)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        n = len(text)
        a = draw(st.integers(0, n))
        b = draw(st.integers(a, min(n, a + 200)))
        kind = draw(st.sampled_from(["cut", "repeat", "splice", "number", "truncate"]))
        if kind == "cut":
            text = text[:a] + text[b:]
        elif kind == "repeat":
            text = text[:b] + text[a:b] + text[b:]
        elif kind == "splice":
            text = text[:a] + draw(NOISE) + text[a:]
        elif kind == "number":
            huge = draw(st.sampled_from(["-1", "400000000", "99999999999999999999", "0", "-0"]))
            text = _NUMBER.sub(huge, text, count=draw(st.integers(1, 3)))
        else:
            text = text[:a]
    return text


def test_the_seeds_are_many_real_captures() -> None:
    assert len(SEEDS) > 60


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=mutated())
def test_every_parser_is_total(text: str) -> None:
    """One input, every parser: the seeds are captures of every probe, so each parser meets
    its own kind of output and everyone else's. A failure names the parser."""
    for probe_id, probe in sorted(PROBES_BY_ID.items()):
        try:
            probe.parse(text)
        except ParseError:
            pass
        except Exception as exc:
            raise AssertionError(f"{probe_id}: {type(exc).__name__}: {exc}") from exc


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=mutated())
def test_the_bench_parsers_are_total(text: str) -> None:
    """The tokens/s readers (llama-bench's JSON, the bench helper's run record; the seeds hold
    the H100's real ones) end in a value or a ParseError."""
    from omni_host.probes.parsers.bench import parse_bench_run, parse_llama_bench_json

    for parse in (parse_llama_bench_json, parse_bench_run):
        with contextlib.suppress(ParseError):
            parse(text)


WAIVERS_SEED = """version: 1
waivers:
  - check: swap.capacity
    hosts: "gpu-0*"
    justification: swap arrives with the new NVMe
    approver: ops-lead
    expires: 2027-03-31
"""


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)
@given(text=mutated().map(lambda t: t[:2000]) | st.just(WAIVERS_SEED),
       cut=st.integers(0, len(WAIVERS_SEED)), noise=NOISE)
def test_the_waivers_reader_is_total(tmp_path_factory, text: str, cut: int, noise: str) -> None:
    """Any text, and the real format cut and spliced: waivers, or one InventoryError line."""
    from omni_host.errors import InventoryError
    from omni_host.evaluate.checks import catalog
    from omni_host.plan.waivers import load_waivers

    path = tmp_path_factory.mktemp("w") / "waivers.yml"
    for body in (text, WAIVERS_SEED[:cut] + noise + WAIVERS_SEED[cut:]):
        path.write_text(body, encoding="utf-8")
        try:
            load_waivers(path, set(catalog()))
        except InventoryError as exc:
            assert "\n" not in str(exc)


@settings(max_examples=100, derandomize=True, deadline=None, database=None)
@given(cut=st.integers(0, 4000), noise=NOISE, number=st.sampled_from(
    ["-1", "1e309", "NaN", "99999999999999999999", "null", '"x"', "[]", "{}"]))
def test_the_bundle_manifest_reader_is_total(tmp_path_factory, cut: int, noise: str,
                                             number: str) -> None:
    """A real manifest cut, spliced, or with a number replaced: bundles, or a BundleError."""
    from helpers import gpu_bundle

    from omni_host.collect.bundle import write_bundle_dir
    from omni_host.errors import BundleError

    root = write_bundle_dir(gpu_bundle("h100-x1"), tmp_path_factory.mktemp("b"))
    manifest = root / "manifest.json"
    real = manifest.read_text()
    for body in (real[:cut] + noise + real[cut:], _NUMBER.sub(number, real, count=1 + cut % 5)):
        manifest.write_text(body)
        try:
            read_bundles(root)
        except BundleError as exc:
            assert "\n" not in str(exc)
