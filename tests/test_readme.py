"""The README's figures are checked, not remembered (issue 62: it said about 930 tests and 760
in the fast tier while 1,060 and 885 were collected): the counts it states are what pytest
collects from this tree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATED = re.compile(r"the whole suite, ([\d,]+) tests.*?the fast tier, .*?: ([\d,]+) tests\)", re.S)


def _collected(*args: str) -> int:
    """How many tests ``pytest --collect-only`` selects from this tree with ``args``."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                           "no:cacheprovider", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    last = done.stdout.strip().splitlines()[-1]
    found = re.match(r"(\d+)(?:/\d+)? tests? collected", last)
    assert found, done.stdout[-500:] + done.stderr[-500:]
    return int(found.group(1))


def test_the_readme_states_the_counts_pytest_collects() -> None:
    stated = STATED.search((ROOT / "README.md").read_text())
    assert stated, "the README no longer states the suite's counts where this test reads them"
    whole, fast = (int(n.replace(",", "")) for n in stated.groups())
    assert (whole, fast) == (_collected(), _collected("-m", "not system")), \
        "update the README's counts (the whole suite; the fast tier) to what pytest collects"
