"""How this run was invoked, so that every command it prints runs when pasted (issue 62).

The README installs omni-host into ``.venv/bin`` and puts nothing on ``PATH``: a hint that said
bare ``omni-host`` failed pasted (``command not found``, exit 127). ``program()`` is the program
as it was run: the path typed (``.venv/bin/omni-host``), ``python -m omni_host`` with the
interpreter that ran it, or bare ``omni-host`` only where that name on ``PATH`` is this very
program. The entry point (``omni_host/__main__.py``) records it once; a run that did not come
through it (a library caller, the tests' in-process CLI) reads ``omni-host``.

``command_lines`` writes one command for a terminal of some width: whole on a line where it
fits, else broken only between its shell words, each broken line ending in `` \\``; a word is
never cut (a quoted ``printf`` string wrapped inside its quotes wrote a two-line hosts.ini).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys

_PROGRAM = "omni-host"


def program() -> str:
    """The program as this run was invoked, quoted for a shell."""
    return _PROGRAM


def record(argv0: str, module: bool) -> None:
    """Called once by the entry point: ``argv0`` as the shell gave it; ``module``: run as
    ``python -m omni_host``."""
    global _PROGRAM
    if module:
        _PROGRAM = f"{shlex.quote(sys.executable)} -m omni_host"
        return
    found = shutil.which("omni-host")
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        _PROGRAM = "omni-host"
    elif os.sep in argv0:
        _PROGRAM = shlex.quote(argv0)
    else:  # a name the shell found on PATH that is not the omni-host PATH gives now
        _PROGRAM = shlex.quote(os.path.realpath(shutil.which(argv0) or argv0))


def words(command: str) -> list[str]:
    """A shell command's words as written (quotes kept): where a line may break."""
    lexer = shlex.shlex(command, posix=False, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: never broken
        return [command]


def command_lines(command: str, width: int, first: str = "  ", rest: str | None = None) -> list[str]:
    """``command`` on lines of at most ``width`` columns where its words allow, the first
    after ``first``, the others after ``rest`` (default: ``first`` and two spaces): broken only
    between words, each broken line ending in `` \\``; a word longer than a line overflows it."""
    rest = first + "  " if rest is None else rest
    if len(first) + len(command) <= width:
        return [first + command]
    lines: list[str] = []
    line, empty = first, True
    for word in words(command):
        if not empty and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line, empty = rest + word, False
        else:
            line, empty = (f"{line} {word}" if not empty else line + word), False
    lines.append(line)
    return lines
