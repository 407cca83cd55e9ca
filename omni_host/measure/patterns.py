"""Patterns from a policy or a host (``-ot``/``--override-tensor`` in ``omni_bench.args``, in a
server's argv, in llama-bench's echoed ``tensor_buft_overrides``), matched in linear time.

Python's ``re`` backtracks: ``(a+)+$`` takes exponential time and fourteen ``.*`` in a row a
polynomial one (``omni-host plan`` was killed at 60 s on one). A guard that guesses which
patterns backtrack is one spelling behind the next pattern; RE2 (google-re2, Google's own
binding) guarantees time linear in the text for every pattern it accepts. What RE2 cannot
express (backreferences, lookaround) is not evaluated, and the caller says so.
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Any

MAX_PATTERN = 256  # characters: -ot patterns of real placements are under 80


@functools.lru_cache(maxsize=1024)
def linear(pattern: str) -> Any:
    """The compiled pattern (an RE2 object: ``.search(text)``), or the reason it is not
    matched here, as a ``str``: past ``MAX_PATTERN``, or outside what RE2 can express."""
    import re2  # google-re2; imported where a pattern is matched (7 ms)

    if len(pattern) > MAX_PATTERN:
        return f"is longer than {MAX_PATTERN} characters"
    options = re2.Options()
    options.log_errors = False  # its parse errors went to stderr, unasked
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) \
            else str(exc)
    try:
        with warnings.catch_warnings():  # Python's own FutureWarnings of odd sets: not ours
            warnings.simplefilter("ignore")
            re.compile(pattern)  # compiling backtracks nothing: only matching does
    except re.error as exc:
        return f"does not compile here: {exc}"
    return f"is not a pattern a linear-time engine (RE2) matches ({why[:80]})"
