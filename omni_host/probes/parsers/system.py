"""Small system facts: the kernel release from ``uname -r``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt

_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Kernel:
    release: str
    version: tuple[int, int, int]


def parse_uname_r(text: str) -> Kernel:
    release = text.strip()
    match = _RELEASE.match(release)
    if not match or "\n" in release:
        raise ParseError(f"not a kernel release: {excerpt(text, 80)!r}")
    return Kernel(release, (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)))
