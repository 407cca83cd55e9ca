"""CUDA toolkit and build facts: ``nvcc --version``, ``cuobjdump --list-elf`` and ``readelf``
of llama.cpp's binaries, and the ``nvidia-smi --query-gpu`` health and capability fields.

Lessons F-012 (CUDA 12.1 cannot build sm_120; 12.8 can), F-003 (a build with CUDA VMM off lost
300%), S-001 (sm_120 code in the bare-metal build).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt, na

_NVCC = re.compile(r"release (\d+)\.(\d+), V([\d.]+)")
_ELF = re.compile(r"ELF file\s+\d+:\s+\S*?\.(sm_\d+a?)\.cubin")
_SECTION = re.compile(r"^== (.+)$", re.M)
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")


@dataclass(frozen=True)
class CudaToolkit:
    version: tuple[int, int]
    full: str


@dataclass(frozen=True)
class GpuQuery:
    index: int
    name: str
    compute_cap: tuple[int, int] | None
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    persistence_mode: bool | None
    ecc_uncorrected: int | None


@dataclass(frozen=True)
class BinaryFacts:
    path: str
    error: str | None  # why nothing could be read, e.g. the file does not exist
    archs: tuple[str, ...] = ()  # cuobjdump: sm_90, sm_120a...
    needed: tuple[str, ...] = ()  # readelf: NEEDED shared libraries
    imports_vmm: bool = False  # readelf: a cuMemCreate dynamic symbol

    @property
    def vmm(self) -> bool:
        """CUDA VMM is compiled in: llama.cpp links the driver API (libcuda) only for it."""
        return self.imports_vmm or any(n.startswith("libcuda.so") for n in self.needed)


def parse_nvcc_version(text: str) -> CudaToolkit:
    match = _NVCC.search(text)
    if not match:
        raise ParseError(f"no 'release X.Y' in nvcc output: {excerpt(text, 80)!r}")
    return CudaToolkit((int(match.group(1)), int(match.group(2))), match.group(3))


def _int(value: str) -> int | None:
    value = na(value) or ""
    return int(value) if value.isdigit() else None


def parse_gpu_query(text: str) -> tuple[GpuQuery, ...]:
    """``nvidia-smi --query-gpu=index,name,compute_cap,pcie.link.gen.current,
    pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,persistence_mode,
    ecc.errors.uncorrected.volatile.total --format=csv,noheader``."""
    gpus = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 9 or not cells[0].isdigit():
            raise ParseError(f"unexpected nvidia-smi --query-gpu line: {line!r}")
        cap = na(cells[2])
        major, _, minor = (cap or "").partition(".")
        gpus.append(GpuQuery(
            int(cells[0]), cells[1],
            (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None,
            _int(cells[3]), _int(cells[4]), _int(cells[5]), _int(cells[6]),
            None if na(cells[7]) is None else cells[7].lower() == "enabled", _int(cells[8])))
    if not gpus:
        raise ParseError("nvidia-smi --query-gpu printed no GPU line")
    return tuple(gpus)


def _sections(text: str) -> list[tuple[str, str]]:
    """Outputs of a per-file loop, each after a ``== <path>`` line."""
    marks = list(_SECTION.finditer(text))
    if not marks:
        raise ParseError(f"no '== <file>' section: {excerpt(text, 80)!r}")
    return [(m.group(1), text[m.end():marks[i + 1].start() if i + 1 < len(marks) else None])
            for i, m in enumerate(marks)]


def _file_error(body: str) -> str | None:
    for line in body.splitlines():
        if "Could not open" in line or "No such file" in line or "not found" in line:
            return line.strip()
    return None


def parse_cuobjdump(text: str) -> dict[str, BinaryFacts]:
    """``cuobjdump --list-elf`` of each binary: the SASS architectures it carries."""
    out = {}
    for path, body in _sections(text):
        archs = tuple(sorted(set(_ELF.findall(body))))
        out[path] = BinaryFacts(path, None if archs else _file_error(body) or
                                "no CUDA device code (not a CUDA binary?)", archs=archs)
    return out


def parse_readelf(text: str) -> dict[str, BinaryFacts]:
    """``readelf -d --dyn-syms -W`` of each binary: NEEDED libraries and cuMem* imports."""
    out = {}
    for path, body in _sections(text):
        needed = tuple(_NEEDED.findall(body))
        error = None if needed or "Symbol table" in body else _file_error(body) or \
            f"not an ELF file: {excerpt(body, 60)!r}"
        out[path] = BinaryFacts(path, error, needed=needed,
                                imports_vmm=re.search(r"\bcuMemCreate\b", body) is not None)
    return out
