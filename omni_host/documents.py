"""The one bounded reader of JSON documents: every document from a host, a store, a cache or a
bundle is decoded here, within limits on its size, its nesting and its element count.

Without it each reader had its own guard or none: one stored report.json of 100,000 nested
arrays (200 KB) raised ``RecursionError`` out of ``json.loads`` and blinded ``report list``,
``show``, ``diff`` and ``bench`` with a traceback; one that nests 900 deep loads and then
overflows whatever walks it (the codec, a renderer). Past a limit the document is refused
with ``DocumentError`` (a ``ValueError``: every reader that handles corrupt input already
catches it), whose message names the limit; the caller names the file and goes on.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # omni-host's own documents nest at most 12 deep; a host's JSON as little
MAX_ITEMS = 2_000_000  # values in one document: a 16 MB report holds about 400,000
MAX_BYTES = 64 * 1024 * 1024  # the largest any reader accepts; most pass a smaller cap


class DocumentError(ValueError):
    """A document past a limit of the bounded reader, or not JSON at all."""


def load_json(data: str | bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH,
              max_items: int = MAX_ITEMS, known: bool = False) -> Any:
    """The value of one JSON document, or DocumentError naming what is wrong: larger than
    ``max_bytes``, not JSON, nested deeper than ``max_depth``, more than ``max_items`` values.
    Time and memory are linear in the size: the C decoder first (its own recursion bound
    turned into this error), then the depth and count of its text (``_text_bounds``), unless
    ``known``: a document this reader passed before, unchanged since (the store's checked
    record: its inode, size, mtime and ctime), whose bounds cost 2.5 ms a stored report."""
    if len(data) > max_bytes:
        raise DocumentError(f"larger than {max_bytes:,} bytes")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text)
    except RecursionError:
        raise DocumentError(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise DocumentError(f"not JSON: {str(exc)[:120]}") from None
    if not known:
        _text_bounds(text, max_depth, max_items)
    return value


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  # on valid JSON: each string matched once, linearly
_NOT_STRUCTURE = re.compile(r"[^\[\]{},]+")
_PARENS = str.maketrans("[]{}", "()()")


def _text_bounds(text: str, max_depth: int, max_items: int) -> None:
    """DocumentError where a document json.loads has read (so its strings are well formed)
    nests deeper than ``max_depth`` or holds more than ``max_items`` values, told from its
    brackets and commas, strings taken out, at C speed (a walk over the decoded value cost
    4.7x the decode on a 900 KB report)."""
    structure = _NOT_STRUCTURE.sub("", _STRING.sub("", text)).translate(_PARENS)
    if structure.count(",") + structure.count("(") + 1 > max_items:
        raise DocumentError(f"more than {max_items:,} values")
    nested = structure.replace(",", "")
    for _ in range(max_depth):  # each pass takes the innermost pairs away
        shorter = nested.replace("()", "")
        if len(shorter) == len(nested):
            return  # none left (json.loads read it: no bracket is unbalanced)
        nested = shorter
    if nested:
        raise DocumentError(f"nested deeper than {max_depth} levels")
