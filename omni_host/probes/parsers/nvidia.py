"""NVIDIA GPUs from ``nvidia-smi -q -x``, ``nvidia-smi topo -m`` / ``topo -p2p r`` and pynvml.

Lessons S-013 (driver floor and recommended version), S-003/F-002/F-024 (asymmetric VRAM wants
a layer split proportional to VRAM, never tensor parallel).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from omni_host.documents import load_json
from omni_host.errors import ParseError
from omni_host.probes.parsers import excerpt, na

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU|NIC)\d+$")
_MIB = re.compile(r"^(\d+)\s*MiB$")


@dataclass(frozen=True)
class GpuFaults:
    """What ``nvidia-smi -q -x`` says of a GPU's health beyond its identity; None where the
    driver says N/A or the element is absent (older drivers, consumer parts)."""

    vbios: str | None = None
    remap_pending: bool | None = None  # a row remap waits for a GPU reset
    remap_failure: bool | None = None  # a row could not be remapped: hardware
    remap_uncorrectable: int | None = None
    retired_sbe: int | None = None  # pages retired for multiple single-bit errors
    retired_dbe: int | None = None  # pages retired for a double-bit error
    retire_pending: bool | None = None  # retired pages wait for a reboot / driver reload
    events: tuple[str, ...] | None = None  # clock event (throttle) reasons active now
    power_limit_w: float | None = None
    power_default_w: float | None = None
    link_gen_device_max: int | None = None  # the GPU's own best PCIe generation
    link_gen_host_max: int | None = None  # the slot's (host's) best generation
    utilization_pct: int | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    bar1_total_mib: int | None = None  # the BAR1 window: 256 MiB where Resizable BAR is off
    app_clocks_mhz: tuple[int, int] | None = None  # applications clocks (graphics, memory) set
    app_clocks_default_mhz: tuple[int, int] | None = None
    app_clocks_active: bool | None = None  # the applications clocks setting holds clocks now
    mem_clock_max_mhz: int | None = None
    subsystem_id: str | None = None  # PCI sub-system id: the board's edition (SKU)


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
    faults: GpuFaults | None = None  # nvidia-smi -q -x only (pynvml reports none of it)

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


def _yes(value: str | None) -> bool | None:
    value = na(value)
    return None if value is None else value.lower() == "yes"


def _watts(value: str | None) -> float | None:
    value = na(value)
    match = re.match(r"^([\d.]+)\s*W$", value) if value else None
    return float(match.group(1)) if match else None


def _first(el: ET.Element, paths: tuple[str, ...]) -> str | None:
    """The first of ``paths`` that holds a value (not N/A)."""
    return next((v for p in paths if (v := na(el.findtext(p))) is not None), None)


EVENT_PARENTS = ("clocks_event_reasons", "clocks_throttle_reasons")  # driver 535+, before


def _events(el: ET.Element) -> tuple[str, ...] | None:
    """Active clock event reasons by their element's suffix (sw_power_cap, hw_slowdown...)."""
    parent = next((p for name in EVENT_PARENTS if (p := el.find(name)) is not None), None)
    if parent is None:
        return None
    return tuple(c.tag.split("_reason_", 1)[-1] for c in parent
                 if (c.text or "").strip().lower() == "active")


def _faults(el: ET.Element) -> GpuFaults:
    link = "pci/pci_gpu_link_info/pcie_gen/"
    return GpuFaults(
        vbios=na(el.findtext("vbios_version")),
        remap_pending=_yes(el.findtext("remapped_rows/remapped_row_pending")),
        remap_failure=_yes(el.findtext("remapped_rows/remapped_row_failure")),
        remap_uncorrectable=_int(el.findtext("remapped_rows/remapped_row_unc")),
        retired_sbe=_int(el.findtext("retired_pages/multiple_single_bit_retirement/retired_count")),
        retired_dbe=_int(el.findtext("retired_pages/double_bit_retirement/retired_count")),
        retire_pending=_yes(_first(el, ("retired_pages/pending_retirement",
                                        "retired_pages/pending_blacklist"))),
        events=_events(el),
        power_limit_w=_watts(_first(el, ("gpu_power_readings/current_power_limit",
                                         "power_readings/current_power_limit",
                                         "power_readings/power_limit"))),
        power_default_w=_watts(_first(el, ("gpu_power_readings/default_power_limit",
                                           "power_readings/default_power_limit"))),
        link_gen_device_max=_int(el.findtext(link + "max_device_link_gen")),
        link_gen_host_max=_int(el.findtext(link + "max_host_link_gen")),
        utilization_pct=_int(el.findtext("utilization/gpu_util")),
        sm_clock_mhz=_int(el.findtext("clocks/sm_clock")),
        sm_clock_max_mhz=_int(el.findtext("max_clocks/sm_clock")),
        bar1_total_mib=_mib(el.findtext("bar1_memory_usage/total")),
        app_clocks_mhz=_pair(el, "applications_clocks"),
        app_clocks_default_mhz=_pair(el, "default_applications_clocks"),
        app_clocks_active=_active(_first(el, tuple(
            f"{parent}/{parent[:-1]}_applications_clocks_setting" for parent in EVENT_PARENTS))),
        mem_clock_max_mhz=_int(el.findtext("max_clocks/mem_clock")),
        subsystem_id=na(el.findtext("pci/pci_sub_system_id")),
    )


def _pair(el: ET.Element, parent: str) -> tuple[int, int] | None:
    """(graphics, memory) MHz of a clocks element; None where either is N/A or deprecated."""
    graphics, memory = (_int(el.findtext(f"{parent}/{c}")) for c in ("graphics_clock", "mem_clock"))
    return (graphics, memory) if graphics is not None and memory is not None else None


def _active(value: str | None) -> bool | None:
    text = (value or "").strip().lower()
    return True if text == "active" else False if text == "not active" else None


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
        faults=_faults(el),
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
        doc = load_json(text)
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


NVML_SECTIONS = ("q", "query", "topo", "p2p")


def parse_nvml(text: str) -> dict[str, str | None]:
    """The NVML reader's document (``remote/nvml.py``): nvidia-smi's forms by section, each
    read by the parser of the nvidia-smi run it stands in for (a section is None where there
    is nothing to read: the topology of one GPU)."""
    try:
        doc = load_json(text)
    except ValueError as exc:
        raise ParseError(f"NVML reader output is not JSON ({exc}): {excerpt(text, 80)!r}") from exc
    if not isinstance(doc, dict) or not all(
            isinstance(doc.get(k), str) or (k in ("topo", "p2p") and doc.get(k) is None)
            for k in NVML_SECTIONS):
        raise ParseError(f"NVML reader output lacks its sections: {excerpt(text, 80)!r}")
    return {k: doc[k] for k in NVML_SECTIONS}
