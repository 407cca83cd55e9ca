"""Parsers are total: every real capture in tests/fixtures, mutated (cut, repeated, spliced
with digits, signs, brackets and newlines, huge or negative numbers), fed to every parser,
ends in a fact or a ParseError: never another exception, never a hang. Bounded and
derandomized so that CI runs the same inputs each time, in a few seconds."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_host.collect.bundle import read_bundles
from omni_host.errors import ParseError
from omni_host.probes.catalog import PROBES_BY_ID

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXAMPLES = 120  # per parser; PROBES_BY_ID has 23, so about 2,800 inputs a run


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


@pytest.mark.parametrize("probe_id", sorted(PROBES_BY_ID))
@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=mutated())
def test_every_parser_is_total(probe_id: str, text: str) -> None:
    parse = PROBES_BY_ID[probe_id].parse
    with contextlib.suppress(ParseError):
        parse(text)
