"""The host's GPUs through one NVML session (libnvidia-ml, the library nvidia-smi itself reads),
written in nvidia-smi's own forms so that the same parsers read them: the elements of
``nvidia-smi -q -x`` omni-host reads, the ``--query-gpu`` line of its build checks and, on two
GPUs or more, the ``topo -m`` and ``topo -p2p r`` matrices. One process and one NVML start
where there were four nvidia-smi runs, each of which starts NVML again and reads every field it
knows (``-q -x`` alone: 0.07 CPU-s a GPU on an H100).

Run as ``python3 -I -S -c <nvml_session.py, then this file>``. Prints one JSON document:
``{"q", "query", "topo", "p2p"}`` (the last two null on one GPU). Exit 4 where NVML cannot be
opened (no library, no driver), 5 where a GPU it counts gives no handle (fallen off the bus):
the collector then runs nvidia-smi itself. Standard library only, Python 3.6.
"""

import ctypes
import json
import os
import sys

NA = "N/A"
# nvmlDeviceArchitecture_t, as nvidia-smi names them
ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
                 8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell"}
# nvmlClocksEventReasons bits, by nvidia-smi's element suffixes (clocks_event_reason_*)
EVENT_REASONS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                 (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                 (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
                 (0x100, "display_clocks_setting"))
# nvmlGpuTopologyLevel_t as topo -m prints it
LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# nvmlGpuP2PStatus_t as topo -p2p prints it
P2P = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "NS", 5: "NS", 6: "U"}
P2P_READ, P2P_NVLINK = 0, 2  # nvmlGpuP2PCapsIndex_t
MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS
CLOCK_GRAPHICS, CLOCK_SM, CLOCK_MEM = 0, 1, 2


if "Session" not in globals():  # imported as a module; on the host nvml_session.py comes first
    from omni_host.remote.nvml_session import PciInfo, Session  # noqa: F401


def escape(text):
    """Text for XML (xml.sax.saxutils pulls in urllib.request: 0.05 CPU-s of a host's start)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _na(value, unit=""):
    return NA if value is None else "%s%s" % (value, unit)


def _mib(value):
    return None if value is None else value // (1 << 20)


def _watts(milliwatts):
    return NA if milliwatts is None else "%.2f W" % (milliwatts / 1000.0)


def _yes(value):
    return NA if value is None else ("Yes" if value else "No")


def _enabled(value):
    return NA if value is None else ("Enabled" if value else "Disabled")


def _el(tag, children):
    """An element of nested (tag, text or list) pairs, its text escaped."""
    if isinstance(children, list):
        return "<%s>%s</%s>" % (tag, "".join(_el(t, c) for t, c in children), tag)
    return "<%s>%s</%s>" % (tag, escape(str(children)), tag)


def shared_reads(s, h):
    """What both forms print of a GPU (the XML and the --query-gpu line) and the topology
    needs, each read once: a driver call costs the host (most first calls take milliseconds)."""
    pci = s.pci_info(h)
    return {"handle": h, "name": s.text("nvmlDeviceGetName", h),
            "bus_id": pci.busId.decode("ascii", "replace") if pci is not None else None,
            "subsystem": pci.pciSubSystemId if pci is not None else None,
            "persistence": s.uint("nvmlDeviceGetPersistenceMode", h),
            "gen_now": s.uint("nvmlDeviceGetCurrPcieLinkGeneration", h),
            "gen_max": s.uint("nvmlDeviceGetMaxPcieLinkGeneration", h),  # the GPU's and slot's
            "gen_device": s.uint("nvmlDeviceGetGpuMaxPcieLinkGeneration", h),
            "width_now": s.uint("nvmlDeviceGetCurrPcieLinkWidth", h),
            "width_max": s.uint("nvmlDeviceGetMaxPcieLinkWidth", h),
            # uncorrected, volatile
            "ecc": s.value(ctypes.c_ulonglong, "nvmlDeviceGetTotalEccErrors", h, 1, 0)}


def _link(r):
    gen_max, device = r["gen_max"], r["gen_device"]
    # NVML names no slot maximum; where the link's maximum is below the GPU's, the slot is it
    host = gen_max if gen_max is not None and device is not None and gen_max < device else None
    return [("pcie_gen", [("max_link_gen", _na(gen_max)),
                          ("current_link_gen", _na(r["gen_now"])),
                          ("max_device_link_gen", _na(device)),
                          ("max_host_link_gen", _na(host))]),
            ("link_widths", [("max_link_width", _na(r["width_max"], "x")),
                             ("current_link_width", _na(r["width_now"], "x"))])]


def _pages(s, h, cause):
    count = ctypes.c_uint(0)
    fn = getattr(s.lib, "nvmlDeviceGetRetiredPages", None)
    code = fn(h, cause, ctypes.byref(count), None) if fn is not None else -1
    return count.value if code in (0, 7) else None  # 7: INSUFFICIENT_SIZE, the count is set


def _rows(s, h):
    out = [ctypes.c_uint() for _ in range(4)]  # corrected, uncorrected, pending, failure
    if not s.ok("nvmlDeviceGetRemappedRows", h, *[ctypes.byref(v) for v in out]):
        return [("remapped_row_unc", NA), ("remapped_row_pending", NA),
                ("remapped_row_failure", NA)]
    return [("remapped_row_corr", out[0].value), ("remapped_row_unc", out[1].value),
            ("remapped_row_pending", _yes(out[2].value)),
            ("remapped_row_failure", _yes(out[3].value))]


def _clocks(s, h, name):
    return [("graphics_clock", _na(s.uint(name, h, CLOCK_GRAPHICS), " MHz")),
            ("mem_clock", _na(s.uint(name, h, CLOCK_MEM), " MHz"))]


def gpu_element(s, r):
    """One ``<gpu>`` of ``nvidia-smi -q -x``: the elements the parser reads (``r``: its
    ``shared_reads``)."""
    h, bus_id = r["handle"], _na(r["bus_id"])
    memory = s.ulongs("nvmlDeviceGetMemoryInfo", h, 3)  # total, free, used
    bar1 = s.ulongs("nvmlDeviceGetBAR1MemoryInfo", h, 3)
    util = (ctypes.c_uint * 2)()
    mask = s.value(ctypes.c_ulonglong, "nvmlDeviceGetCurrentClocksEventReasons", h)
    if mask is None:  # its name before driver 535
        mask = s.value(ctypes.c_ulonglong, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    pending = s.uint("nvmlDeviceGetRetiredPagesPendingStatus", h)
    children = [
        ("product_name", _na(r["name"])),
        ("product_architecture", ARCHITECTURES.get(s.uint("nvmlDeviceGetArchitecture", h), NA)),
        ("persistence_mode", _enabled(r["persistence"])),
        ("uuid", _na(s.text("nvmlDeviceGetUUID", h))),
        ("vbios_version", _na(s.text("nvmlDeviceGetVbiosVersion", h))),
        ("pci", [("pci_bus_id", bus_id),
                 ("pci_sub_system_id", NA if r["subsystem"] is None else "%08X" % r["subsystem"]),
                 ("pci_gpu_link_info", _link(r))]),
        ("clocks_event_reasons", [("clocks_event_reason_" + name, NA if mask is None else
                                   ("Active" if mask & bit else "Not Active"))
                                  for bit, name in EVENT_REASONS]),
        ("fb_memory_usage", [("total", _na(_mib(memory[0]) if memory else None, " MiB"))]),
        ("bar1_memory_usage", [("total", _na(_mib(bar1[0]) if bar1 else None, " MiB"))]),
        ("utilization", [("gpu_util", "%d %%" % util[0] if s.ok(
            "nvmlDeviceGetUtilizationRates", h, ctypes.byref(util)) else NA)]),
        ("ecc_errors", [("volatile", [("total_uncorrectable", _na(r["ecc"]))])]),
        ("retired_pages", [
            ("multiple_single_bit_retirement", [("retired_count", _na(_pages(s, h, 0)))]),
            ("double_bit_retirement", [("retired_count", _na(_pages(s, h, 1)))]),
            ("pending_retirement", _yes(pending))]),
        ("remapped_rows", _rows(s, h)),
        ("gpu_power_readings", [
            ("current_power_limit", _watts(s.uint("nvmlDeviceGetEnforcedPowerLimit", h))),
            ("default_power_limit",
             _watts(s.uint("nvmlDeviceGetPowerManagementDefaultLimit", h)))]),
        ("clocks", [("sm_clock", _na(s.uint("nvmlDeviceGetClockInfo", h, CLOCK_SM), " MHz"))]),
        ("applications_clocks", _clocks(s, h, "nvmlDeviceGetApplicationsClock")),
        ("default_applications_clocks", _clocks(s, h, "nvmlDeviceGetDefaultApplicationsClock")),
        ("max_clocks", [("sm_clock", _na(s.uint("nvmlDeviceGetMaxClockInfo", h, CLOCK_SM), " MHz")),
                        ("mem_clock", _na(s.uint("nvmlDeviceGetMaxClockInfo", h, CLOCK_MEM),
                                          " MHz"))]),
    ]
    return '<gpu id="%s">%s</gpu>' % (escape(bus_id), "".join(_el(t, c) for t, c in children))


def smi_log(s, reads):
    """The ``nvidia-smi -q -x`` document of every GPU (``reads``: each one's ``shared_reads``)."""
    cuda = s.value(ctypes.c_int, "nvmlSystemGetCudaDriverVersion_v2")
    head = [("driver_version", _na(s.text("nvmlSystemGetDriverVersion"))),
            ("cuda_version", NA if not cuda else "%d.%d" % (cuda // 1000, cuda % 1000 // 10)),
            ("attached_gpus", len(s.handles))]
    return "<nvidia_smi_log>%s%s</nvidia_smi_log>\n" % (
        "".join(_el(t, c) for t, c in head),
        "".join(gpu_element(s, r) for r in reads))


def query_line(s, i, r):
    """One line of ``--query-gpu=index,name,compute_cap,pcie.link.gen.current,
    pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,persistence_mode,
    ecc.errors.uncorrected.volatile.total --format=csv,noheader``."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    cap = "%d.%d" % (major.value, minor.value) if s.ok(
        "nvmlDeviceGetCudaComputeCapability", r["handle"], ctypes.byref(major),
        ctypes.byref(minor)) \
        else None
    values = [i, r["name"] or None, cap, r["gen_now"], r["gen_max"], r["width_now"], r["width_max"],
              None if r["persistence"] is None else _enabled(r["persistence"]), r["ecc"]]
    return ", ".join("[N/A]" if v is None else str(v) for v in values)


def _nvlinks(s, h):
    """The active NVLinks of ``h``: each link's far end, a PCI bus id or "switch"."""
    ends = []
    for link in range(MAX_LINKS):
        if not s.uint("nvmlDeviceGetNvLinkState", h, link):
            continue  # down, or no such link (the loop ends there on most boards)
        if s.uint("nvmlDeviceGetNvLinkRemoteDeviceType", h, link) == 2:  # an NVSwitch
            ends.append("switch")
            continue
        remote = s.pci("nvmlDeviceGetNvLinkRemotePciInfo_v2", h, link)
        ends.append(remote.busId.decode("ascii", "replace").lower() if remote is not None else "?")
    return ends


def _sysfs(bus_id, name):
    """A file of the GPU's PCI device in sysfs (its domain in 4 digits there, 8 in NVML's id):
    where nvidia-smi itself reads the nearest CPUs and NUMA node, at no driver call."""
    domain, _, rest = bus_id.partition(":")
    try:
        with open("/sys/bus/pci/devices/%s:%s/%s" % (domain[-4:], rest, name)) as handle:
            return handle.read(4096).strip() or None
    except (IOError, OSError, ValueError):
        return None


def _cpus(s, h, bus_id):
    """The CPUs nearest the GPU, as ranges (0-31,64-95): sysfs, else NVML."""
    listed = _sysfs(bus_id, "local_cpulist")
    if listed:
        return listed
    words = (ctypes.c_ulong * 64)()
    if not s.ok("nvmlDeviceGetCpuAffinity", h, 64, words):
        return NA
    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    cpus = [w * bits + b for w in range(64) for b in range(bits) if words[w] >> b & 1]
    ranges, start = [], None
    for n, cpu in enumerate(cpus):
        if start is None:
            start = cpu
        if n + 1 == len(cpus) or cpus[n + 1] != cpu + 1:
            ranges.append(str(start) if start == cpu else "%d-%d" % (start, cpu))
            start = None
    return ",".join(ranges) or NA


def _numa(bus_id):
    node = _sysfs(bus_id, "numa_node")
    return node if node and node.lstrip("-").isdigit() and not node.startswith("-") else NA


def matrices(s, reads):
    """``topo -m`` and ``topo -p2p r`` as nvidia-smi prints them (GPUs only: NVML sees no NIC)."""
    names = ["GPU%d" % i for i in range(len(s.handles))]
    buses = [(r["bus_id"] or "").lower() for r in reads]
    topo = ["\t" + "\t".join(names + ["CPU Affinity", "NUMA Affinity"])]
    p2p = ["\t" + "\t".join(names)]
    ends = [_nvlinks(s, h) for h in s.handles]  # once a GPU, not once a pair
    for i, a in enumerate(s.handles):
        links, reads = [], []
        for j, b in enumerate(s.handles):
            if i == j:
                links.append(" X ")
                reads.append(" X ")
                continue
            reads.append(P2P.get(s.uint("nvmlDeviceGetP2PStatus", a, b, P2P_READ), "U"))
            direct = ends[i].count(buses[j]) if buses[j] else 0
            switched = ends[i].count("switch") if ends[i] and ends[j] else 0
            if direct or switched and s.uint("nvmlDeviceGetP2PStatus", a, b, P2P_NVLINK) == 0:
                links.append("NV%d" % (direct or switched))
            else:
                links.append(LEVELS.get(s.uint("nvmlDeviceGetTopologyCommonAncestor", a, b), "?"))
        topo.append("\t".join([names[i]] + links + [_cpus(s, a, buses[i]), _numa(buses[i])]))
        p2p.append("\t".join([names[i]] + reads))
    return "\n".join(topo) + "\n", "\n".join(p2p) + "\n"


def main():
    try:
        s = Session()
    except (OSError, AttributeError) as exc:
        sys.stderr.write("NVML: %s\n" % exc)
        sys.exit(4)
    if s.count is None or s.lost:  # nvidia-smi says what is wrong with a GPU in its own words
        s.close()
        sys.stderr.write("NVML: %s: nvidia-smi reads the GPUs instead\n" % (
            "no GPU count" if s.count is None else "; ".join(
                "GPU %d gave no handle (NVML error %d)" % lost for lost in s.lost)))
        sys.exit(5)
    try:
        reads = [shared_reads(s, h) for h in s.handles]
        doc = {"q": smi_log(s, reads),
               "query": "".join(query_line(s, i, r) + "\n" for i, r in enumerate(reads)),
               "topo": None, "p2p": None}
        if len(s.handles) > 1:
            doc["topo"], doc["p2p"] = matrices(s, reads)
    finally:
        s.close()
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
    sys.stdout.flush()  # then end at once: the collector waits for this process's end, and the
    sys.stderr.flush()  # interpreter's teardown (ctypes, the library) would only delay it
    os._exit(0)
