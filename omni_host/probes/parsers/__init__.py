"""Pure parsers: raw text in, typed frozen facts out. None of them runs a command or opens a
file, so each is tested on captured output alone. They raise ``ParseError`` on text they do
not recognise; vendor sentinels such as ``[N/A]`` become ``None`` in ``na``."""

from __future__ import annotations

from omni_host.errors import ParseError

NA_SENTINELS = frozenset({"", "n/a", "[n/a]", "na", "none", "not supported", "[not supported]",
                          "unknown", "[unknown error]", "requested functionality has been deprecated"})


def na(value: str | None) -> str | None:
    """The one place where vendor placeholders become None."""
    if value is None:
        return None
    stripped = value.strip()
    return None if stripped.lower() in NA_SENTINELS else stripped


def excerpt(text: str, limit: int = 240) -> str:
    """A short, single-line-safe excerpt of raw output for 'unparseable' reports."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


MAX_CPUS = 1 << 16  # more CPU ids than any machine has: the output is not what it claims


def cpu_list(spec: str) -> tuple[int, ...]:
    """'0-3,8 9' or numactl --cpu-compress's '0-15 (16)' -> (0, 1, 2, ...). Total: a token
    that is not a CPU id or range, or a range beyond any machine, is a ParseError."""
    cpus: list[int] = []
    for token in spec.replace(",", " ").split():
        if token.startswith("("):
            continue
        lo, _, hi = token.partition("-")
        if not lo.isdigit() or not (hi or lo).isdigit():
            raise ParseError(f"not a CPU list: {excerpt(spec, 80)!r}")
        first, last = int(lo), int(hi or lo)
        if last < first or last - first + len(cpus) >= MAX_CPUS:
            raise ParseError(f"CPU range out of bounds: {token!r}")
        cpus.extend(range(first, last + 1))
    return tuple(cpus)
