"""NVIDIA GPUs from ``nvidia-smi -q -x``, ``nvidia-smi topo -m`` / ``topo -p2p r`` and pynvml.

Lessons S-013 (driver floor and recommended version), S-003/F-002/F-024 (asymmetric VRAM wants
a layer split proportional to VRAM, never tensor parallel).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt, na

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU|NIC)\d+$")
_MIB = re.compile(r"^(\d+)\s*MiB$")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str | None
    pci_bus_id: str | None
    memory_total_mib: int | None
    architecture: str | None
    persistence_mode: bool | None
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    # Volatile uncorrectable ECC errors (SRAM + DRAM); None where the driver says N/A (ECC off
    # or not supported) or the tool does not report it.
    ecc_uncorrected: int | None = None

    @property
    def memory_gib(self) -> float | None:
        return None if self.memory_total_mib is None else self.memory_total_mib / 1024


@dataclass(frozen=True)
class GpuInventory:
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[Gpu, ...]
    source: str  # "nvidia-smi" or "pynvml"


@dataclass(frozen=True)
class TopoMatrix:
    """A GPU connection matrix: ``cells[(a, b)]`` is e.g. ``NV18``, ``SYS``, ``OK``, ``X``."""

    devices: tuple[str, ...]
    cells: dict[tuple[str, str], str]
    cpu_affinity: dict[str, str]
    rows: tuple[str, ...]

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    def links(self) -> list[tuple[str, str, str]]:
        """Each unordered GPU pair once, with its cell."""
        gpus = self.gpus
        return [(a, b, self.cells.get((a, b), "?")) for i, a in enumerate(gpus) for b in gpus[i + 1:]]


def _int(value: str | None) -> int | None:
    value = na(value)
    if value is None:
        return None
    match = re.match(r"^(\d+)", value)
    return int(match.group(1)) if match else None


def _mib(value: str | None) -> int | None:
    value = na(value)
    match = _MIB.match(value) if value else None
    return int(match.group(1)) if match else None


def _bool(value: str | None) -> bool | None:
    value = na(value)
    return None if value is None else value.lower() == "enabled"


def _ecc_uncorrected(el: ET.Element) -> int | None:
    """Sum of the volatile ``*uncorrectable*`` counters (``dram_uncorrectable``,
    ``sram_uncorrectable_parity``/``_secded`` in DTD v13, ``sram_uncorrectable`` before)."""
    values = [_int(c.text) for c in el.findall("ecc_errors/volatile/*")
              if "uncorrectable" in c.tag]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _gpu(index: int, el: ET.Element) -> Gpu:
    link = "pci/pci_gpu_link_info/"
    return Gpu(
        index=index,
        name=na(el.findtext("product_name")) or "unknown GPU",
        uuid=na(el.findtext("uuid")),
        pci_bus_id=na(el.findtext("pci/pci_bus_id")) or el.get("id"),
        memory_total_mib=_mib(el.findtext("fb_memory_usage/total")),
        architecture=na(el.findtext("product_architecture")),
        persistence_mode=_bool(el.findtext("persistence_mode")),
        pcie_gen_current=_int(el.findtext(link + "pcie_gen/current_link_gen")),
        pcie_gen_max=_int(el.findtext(link + "pcie_gen/max_link_gen")),
        pcie_width_current=_int(el.findtext(link + "link_widths/current_link_width")),
        pcie_width_max=_int(el.findtext(link + "link_widths/max_link_width")),
        ecc_uncorrected=_ecc_uncorrected(el),
    )


def parse_nvidia_smi_xml(text: str) -> GpuInventory:
    """``nvidia-smi -q -x`` (DTD v12 and v13). Only the GPU's own ``fb_memory_usage`` is read,
    not those nested under MIG devices."""
    start = text.find("<nvidia_smi_log")
    if start < 0:
        raise ParseError(f"no <nvidia_smi_log> element: {excerpt(text, 80)!r}")
    try:
        root = ET.fromstring(text[start:])
    except ET.ParseError as exc:
        raise ParseError(f"nvidia-smi XML is malformed or truncated ({exc})") from exc
    gpus = tuple(_gpu(i, el) for i, el in enumerate(root.findall("gpu")))
    attached = root.findtext("attached_gpus")
    if attached is not None and attached.strip().isdigit() and int(attached) != len(gpus):
        # A capture that lists fewer GPUs than it says are attached is incomplete: reading it
        # as a smaller machine would report GPUs "missing" that were merely not listed.
        raise ParseError(f"nvidia-smi reports attached_gpus {attached.strip()} but lists "
                         f"{len(gpus)} <gpu> element(s): an incomplete capture")
    return GpuInventory(na(root.findtext("driver_version")), na(root.findtext("cuda_version")),
                        gpus, "nvidia-smi")


def parse_topo_matrix(text: str) -> TopoMatrix:
    """``nvidia-smi topo -m`` or ``topo -p2p r``: tabs or spaces, ANSI underline in the header,
    extra columns (CPU/NUMA affinity) after the device columns, a legend after a blank line."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if line.split() and
                      _DEVICE.match(line.split()[0]) and "X" not in line.split()), None)
    if header_at is None:
        raise ParseError(f"no GPU header row in topology output: {excerpt(text, 80)!r}")
    devices = tuple(t for t in lines[header_at].split() if _DEVICE.match(t))
    cells: dict[tuple[str, str], str] = {}
    affinity: dict[str, str] = {}
    rows: list[str] = []
    for line in lines[header_at + 1:]:
        tokens = line.split()
        if not tokens or not _DEVICE.match(tokens[0]):
            break
        if len(tokens) < 1 + len(devices):
            raise ParseError(f"topology row has too few cells: {line.strip()!r}")
        rows.append(line.strip())
        for col, cell in zip(devices, tokens[1:1 + len(devices)], strict=True):
            cells[(tokens[0], col)] = cell
        rest = tokens[1 + len(devices):]
        if rest:
            affinity[tokens[0]] = rest[0]
    if not rows:
        raise ParseError(f"topology output has a header but no rows: {excerpt(text, 80)!r}")
    return TopoMatrix(devices, cells, affinity, tuple(rows))


def parse_pynvml(text: str) -> GpuInventory:
    """The collector helper's JSON of pynvml queries (see ``probes.PYNVML_CODE``)."""
    try:
        doc = json.loads(text)
        gpus = tuple(
            Gpu(index=g["index"], name=g["name"], uuid=g.get("uuid"), pci_bus_id=g.get("pci_bus_id"),
                memory_total_mib=g["memory_total_bytes"] // (1024 * 1024), architecture=None,
                persistence_mode=g.get("persistence_mode"), pcie_gen_current=g.get("pcie_gen_current"),
                pcie_gen_max=g.get("pcie_gen_max"), pcie_width_current=g.get("pcie_width_current"),
                pcie_width_max=g.get("pcie_width_max"))
            for g in doc["gpus"]
        )
        cuda = doc.get("cuda_driver_version")
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        return GpuInventory(doc["driver_version"], cuda_text, gpus, "pynvml")
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"pynvml output is not the expected JSON: {exc}") from exc
