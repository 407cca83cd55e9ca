"""What a tensor-override pattern costs the host's own engine. llama.cpp matches ``-ot`` /
``--override-tensor`` with ``std::regex`` (ECMAScript, backtracking) against every tensor name,
in llama-bench, llama-server and llama-fit-params alike: that engine is not ours to replace,
so a pattern it would take polynomial or exponential time on is refused where it enters the
policy, before any host runs it (fourteen ``.*`` in a row held the plan past 60 s on the host).
omni-host's own matching (``measure/patterns.py``) is RE2, linear for any pattern; this rule
is only about what is sent to the host's tools.

The rule, one pass over the pattern: no repeated group that itself repeats or alternates
(``(a+)+``, ``(a|ab)*``: exponential), and at most ``MAX_UNBOUNDED`` unbounded repetitions
(``*``, ``+``, ``{n,}``) in all: a backtracking match then costs at most the name's length to
that power (names are under 100 characters: 10,000 steps a name).
"""

from __future__ import annotations

MAX_UNBOUNDED = 2  # blk\..*\.ffn_.*_exps holds two; real placements need no more


def host_cost(pattern: str) -> str | None:
    """Why ``pattern`` is not sent to the host's backtracking engine, or None."""
    stack = [False]  # per open group: it holds a repetition or an alternation
    unbounded, i = 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a class is one atom
            i += 1
            while i < len(pattern) and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            stack.append(False)
            if pattern[i + 1:i + 2] == "?":
                i += 2  # (?: (?= (?! ...: not a quantifier
                continue
        elif c == ")" and len(stack) > 1:
            inner = stack.pop()
            repeated = pattern[i + 1:i + 2] in ("*", "+", "{")
            if inner and repeated:
                return "repeats a group that repeats or alternates (exponential backtracking)"
            stack[-1] = stack[-1] or inner or repeated
        elif c in "*+|" or (c == "{" and _open_ended(pattern, i)):
            stack[-1] = True
            if c != "|":
                unbounded += 1
        elif c == "{":
            stack[-1] = True
        i += 1
    if unbounded > MAX_UNBOUNDED:
        return (f"holds {unbounded} unbounded repetitions (at most {MAX_UNBOUNDED}: llama.cpp's "
                "std::regex backtracks through every split of a name among them)")
    return None


def _open_ended(pattern: str, at: int) -> bool:
    """``{n,}`` (no upper bound) at ``at``."""
    end = pattern.find("}", at)
    return end > at and pattern[end - 1] == ","
