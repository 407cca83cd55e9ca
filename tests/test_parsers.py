"""Every parser on real captures: tests/fixtures/public (public sources, see PROVENANCE.md)
and the bundles collected on the lent NVIDIA machines (tests/fixtures/bundles). One parametrized
test per probe, each capture with its expected fact; plus odd-but-real and garbage inputs."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, public_capture
from helpers import raw

from omni_host.errors import ParseError
from omni_host.probes.parsers import cpu, memory, numa, nvidia, system

NUMACTL = [
    # capture, node count, cpus on node 0, size of node 0 (MiB)
    ("numactl/epyc-7713-2s-nps4_8nodes.txt", 8, 16, 63965),
    ("numactl/epyc-9375f-2s-zen5-smtoff_2nodes.txt", 2, 32, 773271),
    ("numactl/epyc-9135-2s-zen5_2nodes_cpu-compress.txt", 2, 16, 580088),
    ("numactl/epyc-7551-2s_8nodes_memoryless_PARTIAL.txt", 8, 16, 0),
    ("numactl/threadripper-3960x-1s-nps4_4nodes_2memoryless.txt", 4, 12, 0),
    ("numactl/threadripper-1950x-1s-numa-mode_2nodes.txt", 2, 16, 32117),
    ("numactl/aws-c5n.18xlarge-2s-intel_2nodes.txt", 2, 36, 94590),
    ("numactl/aurora-2s-xeon-max-hbm-flat_4nodes_2cpuless.txt", 4, 104, 515524),
]


@pytest.mark.parametrize(("capture", "nodes", "cpus0", "size0"), NUMACTL)
def test_numactl_public_captures(capture: str, nodes: int, cpus0: int, size0: int) -> None:
    topo = numa.parse_numactl_hardware(public_capture(capture))
    assert topo.node_count == nodes
    assert len(topo.nodes[0].cpus) == cpus0
    assert topo.nodes[0].size_mib == size0
    assert topo.source == "numactl"


@pytest.mark.parametrize(("capture", "sockets"), [
    ("numactl/epyc-7713-2s-nps4_8nodes.txt", 2),
    ("numactl/epyc-9375f-2s-zen5-smtoff_2nodes.txt", 2),
    ("numactl/epyc-9135-2s-zen5_2nodes_cpu-compress.txt", 2),
    ("numactl/epyc-7551-2s_8nodes_memoryless_PARTIAL.txt", None),  # matrix cut off
    ("numactl/nodejs-benchmark-1s_1node.txt", 1),
    ("numactl/threadripper-3960x-1s-nps4_4nodes_2memoryless.txt", 1),  # all four 12 apart
    ("numactl/threadripper-1950x-1s-numa-mode_2nodes.txt", 1),  # two dies, 16 apart
    ("numactl/aws-c5n.18xlarge-2s-intel_2nodes.txt", 2),  # 21 apart
    # Cluster-on-Die: dies 21 apart, sockets 31 apart; its lscpu: "Socket(s): 2"
    ("numactl/broadwell-ep-e5-2697v4-2s-cod_4nodes.txt", 2),
    # Aurora: each HBM node is 13 from its own CPU's node, 23 from the other socket's
    ("numactl/aurora-2s-xeon-max-hbm-flat_4nodes_2cpuless.txt", 2),
])
def test_numactl_distance_matrix_gives_the_sockets(capture: str, sockets: int | None) -> None:
    topo = numa.parse_numactl_hardware(public_capture(capture))
    assert topo.sockets_from_distances() == sockets
    assert topo.distances[0][0] == 10


def test_cpuinfo_counts_sockets_by_physical_id() -> None:
    info = cpu.parse_cpuinfo((FIXTURES / "captures" / "proc-cpuinfo_h200x2.txt").read_text())
    assert info.sockets == 1  # every "physical id" line of the capture says 0


@pytest.mark.parametrize("text", ["node 0 cpus: 0-400000000\n", "node 0 cpus: 0 -1\n",
                                  "node 0 cpus: x-y\n"])
def test_numactl_impossible_cpu_lists_are_unparseable(text: str) -> None:
    with pytest.raises(ParseError):
        numa.parse_numactl_hardware("available: 1 nodes (0)\n" + text)


def test_numactl_memoryless_nodes_are_reported() -> None:
    topo = numa.parse_numactl_hardware(
        public_capture("numactl/epyc-7551-2s_8nodes_memoryless_PARTIAL.txt"))
    assert topo.memoryless_nodes == (0, 2, 3, 4, 6, 7)
    # numactl#165: "Nodes 0 and 3 have CPUs but no memory attached"
    tr = numa.parse_numactl_hardware(
        public_capture("numactl/threadripper-3960x-1s-nps4_4nodes_2memoryless.txt"))
    assert (tr.memoryless_nodes, tr.cpuless_nodes, tr.cpu_node_count) == ((0, 3), (), 4)


def test_numactl_cpuless_memory_nodes_are_told_apart() -> None:
    """Aurora's guide: "The 64 GB HBM for the first CPU is in node 2 and the second is node 3"."""
    topo = numa.parse_numactl_hardware(
        public_capture("numactl/aurora-2s-xeon-max-hbm-flat_4nodes_2cpuless.txt"))
    assert topo.cpuless_nodes == (2, 3)
    assert [n.size_mib for n in topo.nodes if not n.cpus] == [65536, 65536]
    assert topo.cpu_node_count == 2 and topo.memoryless_nodes == ()


def test_sysfs_nodes_without_cpus_come_from_their_meminfo_line() -> None:
    """`grep -H .` prints nothing for an empty cpulist: a CPU-less node shows only in meminfo."""
    text = ("/sys/devices/system/node/node0/cpulist:0-51,104-155\n"
            "/sys/devices/system/node/node1/cpulist:52-103,156-207\n"
            + "".join(f"/sys/devices/system/node/node{n}/meminfo:Node {n} MemTotal:       "
                      f"{kib} kB\n" for n, kib in ((0, 527896576), (1, 527353856),
                                                    (2, 67108864), (3, 67108864))))
    topo = numa.parse_sysfs_nodes(text)
    assert (topo.node_count, topo.cpuless_nodes, topo.cpu_node_count) == (4, (2, 3), 2)


@pytest.mark.parametrize(("machine", "cpus"), [("h100-x1", 16), ("h200-x2", 32)])
def test_numactl_gpu_machines(machine: str, cpus: int) -> None:
    topo = numa.parse_numactl_hardware(raw(machine, "numa.numactl"))
    assert topo.node_count == 1
    assert len(topo.nodes[0].cpus) == cpus


def test_numactl_no_numa_message_is_unparseable() -> None:
    with pytest.raises(ParseError, match="available"):
        numa.parse_numactl_hardware("No NUMA available on this system\n")


XML = [
    # capture, driver, cuda, [(name, MiB, persistence, pcie gen max)]
    ("nvidia-smi/telegraf_rtx-pro-6000-maxq-blackwell_590.44.01_q-x.xml", "590.44.01", "13.1",
     [("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, True, 4)]),
    # each <gpu> of the capture: <total>24564 MiB</total>, Enabled, <max_link_gen>4</max_link_gen>
    ("nvidia-smi/telegraf_dual-rtx-a5000_590.44.01_q-x.xml", "590.44.01", "13.1",
     [("NVIDIA RTX A5000", 24564, True, 4)] * 2),
    ("nvidia-smi/telegraf_dual-rtx-2080_590.44.01_q-x.xml", "590.44.01", "13.1",
     [("NVIDIA GeForce RTX 2080", 8192, True, 3)] * 2),
    ("nvidia-smi/telegraf_rtx-3060_570.124.04_q-x.xml", "570.124.04", "12.8",
     [("NVIDIA GeForce RTX 3060", 12288, True, 4)]),
    ("nvidia-smi/telegraf_rtx-3080_595.58.03_q-x.xml", "595.58.03", "13.2",
     [("NVIDIA GeForce RTX 3080", 10240, False, 4)]),
    ("nvidia-smi/telegraf_rtx-4000-sff-ada_595.84_q-x.xml", "595.84", "13.2",
     [("NVIDIA RTX 4000 SFF Ada Generation", 20475, True, 4)]),
    ("nvidia-smi/telegraf_tesla-t4_515.105.01_q-x.xml", "515.105.01", "11.7",
     [("Tesla T4", 15360, False, 3)]),
]


def test_an_incomplete_xml_is_unparseable_never_a_smaller_machine() -> None:
    """telegraf's 4x A100 test data says <attached_gpus>4</attached_gpus> and keeps one <gpu>:
    read as a one-GPU host, three A100s would be reported missing."""
    text = public_capture("nvidia-smi/telegraf_4x-a100-sxm4-80gb_535.54.03_q-x.xml")
    assert "<attached_gpus>4</attached_gpus>" in text and text.count("<gpu id=") == 1
    with pytest.raises(ParseError, match="attached_gpus 4 but lists 1 <gpu> element"):
        nvidia.parse_nvidia_smi_xml(text)


@pytest.mark.parametrize(("capture", "driver", "cuda", "gpus"), XML)
def test_nvidia_smi_xml_public_captures(capture: str, driver: str, cuda: str | None,
                                        gpus: list) -> None:
    inv = nvidia.parse_nvidia_smi_xml(public_capture(capture))
    assert (inv.driver_version, inv.cuda_version) == (driver, cuda)
    assert [(g.name, g.memory_total_mib, g.persistence_mode, g.pcie_gen_max)
            for g in inv.gpus] == gpus  # memory: the GPU's own, never a MIG slice's


@pytest.mark.parametrize(("machine", "name", "count", "mib"), [
    ("h100-x1", "NVIDIA H100 80GB HBM3", 1, 81559),
    ("h200-x2", "NVIDIA H200", 2, 143771),
])
def test_nvidia_smi_xml_gpu_machines(machine: str, name: str, count: int, mib: int) -> None:
    inv = nvidia.parse_nvidia_smi_xml(raw(machine, "gpu.nvidia-smi"))
    assert inv.driver_version == "580.159.04"
    assert inv.cuda_version == "13.0"
    assert [g.name for g in inv.gpus] == [name] * count
    assert {g.memory_total_mib for g in inv.gpus} == {mib}
    assert all(g.persistence_mode is True for g in inv.gpus)


@pytest.mark.parametrize("machine", ["h100-x1", "h200-x2"])
def test_pynvml_agrees_with_nvidia_smi(machine: str) -> None:
    smi = nvidia.parse_nvidia_smi_xml(raw(machine, "gpu.nvidia-smi"))
    nvml = nvidia.parse_pynvml(raw(machine, "gpu.pynvml"))
    assert nvml.driver_version == smi.driver_version
    assert nvml.cuda_version == smi.cuda_version
    assert [(g.name, g.memory_total_mib) for g in nvml.gpus] == \
        [(g.name, g.memory_total_mib) for g in smi.gpus]


def test_nvidia_smi_xml_truncated_is_unparseable() -> None:
    text = raw("h200-x2", "gpu.nvidia-smi")
    with pytest.raises(ParseError, match="malformed or truncated"):
        nvidia.parse_nvidia_smi_xml(text[: len(text) // 2])


@pytest.mark.parametrize("capture", [
    "nvidia-smi/exporter_win-rtx2080super_610.62_default-idle.txt",  # Windows table, not XML
    "nvidia-smi/exporter_h100-80gb-hbm3_590.48.01_q-idle.txt",  # -q text, not -q -x
])
def test_nvidia_smi_xml_rejects_other_formats(capture: str) -> None:
    with pytest.raises(ParseError):
        nvidia.parse_nvidia_smi_xml(public_capture(capture))


TOPO = [
    # capture, gpus, a pair and its link, cpu affinity of GPU0
    ("nvidia-smi-topo/exporter_h100-80gb-hbm3_590.48.01_topo-m.txt", 1, None, "0-19"),
    ("nvidia-smi-topo/exporter_h200_590.48.01_topo-m.txt", 1, None, "0-23"),
    ("nvidia-smi-topo/rtx-pro-6000-maxq-x4_dell7960t_topo-m.txt", 4, ("GPU0", "GPU3", "NODE"), "0-119"),
    ("nvidia-smi-topo/club3090-issue46_5gpu-mixed-5090-4090_topo-m.txt", 5, ("GPU1", "GPU2", "PHB"),
     "8-15,24-31"),
]


@pytest.mark.parametrize(("capture", "count", "pair", "affinity"), TOPO)
def test_topo_matrix_public_captures(capture: str, count: int, pair: tuple | None,
                                     affinity: str) -> None:
    matrix = nvidia.parse_topo_matrix(public_capture(capture))
    assert len(matrix.gpus) == count
    assert matrix.cells[("GPU0", "GPU0")] == "X"
    if pair:
        assert matrix.cells[(pair[0], pair[1])] == pair[2]
    assert matrix.cpu_affinity["GPU0"] == affinity
    assert len(matrix.links()) == count * (count - 1) // 2


def test_topo_and_p2p_on_two_h200_with_nvlink() -> None:
    topo = nvidia.parse_topo_matrix(raw("h200-x2", "gpu.topo"))
    assert topo.links() == [("GPU0", "GPU1", "NV18")]
    p2p = nvidia.parse_topo_matrix(raw("h200-x2", "gpu.p2p"))
    assert p2p.links() == [("GPU0", "GPU1", "OK")]


def test_p2p_on_two_geforce_cards_without_peer_support() -> None:
    """club-3090#1130, `nvidia-smi topo -p2p rw` on 2x RTX 5090: GNS, "GPU not supported"."""
    p2p = nvidia.parse_topo_matrix(
        public_capture("nvidia-smi-topo/club3090-issue1130_2x-rtx5090_topo-p2p-rw.txt"))
    assert p2p.gpus == ("GPU0", "GPU1")
    assert p2p.links() == [("GPU0", "GPU1", "GNS")]


def test_topo_single_gpu_p2p_capture() -> None:
    p2p = nvidia.parse_topo_matrix(raw("h100-x1", "gpu.p2p"))
    assert p2p.gpus == ("GPU0",)
    assert p2p.links() == []


def test_topo_garbage_is_unparseable() -> None:
    with pytest.raises(ParseError):
        nvidia.parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with "
                                 "the NVIDIA driver.\n")


CPUS = [
    # capture text getter, vendor, family, zen5, has avx512f
    (lambda: public_capture("cpu/lscpu_ryzen9-9950x_zen5-fam26_pytorch-collect-env.txt"),
     "AuthenticAMD", 26, True, True),
    # processor 0 of a Ryzen 9 9950X from a kernel bug report (PROVENANCE.md)
    (lambda: public_capture("cpu/proc-cpuinfo_ryzen9-9950x_zen5_processor0_lkml.txt"),
     "AuthenticAMD", 26, True, True),
    (lambda: raw("h100-x1", "cpu.cpuinfo"), "GenuineIntel", 6, False, None),
    (lambda: (FIXTURES / "captures" / "proc-cpuinfo_h200x2.txt").read_text(), "GenuineIntel", 6,
     False, None),
]


@pytest.mark.parametrize(("text", "vendor", "family", "zen5", "avx512f"), CPUS)
def test_cpuinfo_captures(text, vendor: str, family: int, zen5: bool, avx512f: bool | None) -> None:
    info = cpu.parse_cpuinfo(text())
    assert (info.vendor, info.family, info.is_zen5) == (vendor, family, zen5)
    if avx512f is not None:
        assert ("avx512f" in info.flags) is avx512f
    assert info.logical_cpus and info.logical_cpus > 0


def test_cpuinfo_counts_processors_of_a_real_capture() -> None:
    info = cpu.parse_cpuinfo((FIXTURES / "captures" / "proc-cpuinfo_h200x2.txt").read_text())
    assert info.logical_cpus == 32
    assert info.source == "/proc/cpuinfo"


def test_cpuinfo_garbage_is_unparseable() -> None:
    with pytest.raises(ParseError):
        cpu.parse_cpuinfo("\x00\x01garbage")


@pytest.mark.parametrize("machine", ["h100-x1", "h200-x2"])
def test_memory_captures(machine: str) -> None:
    assert memory.parse_proc_swaps(raw(machine, "mem.swaps")) == ()
    meminfo = memory.parse_meminfo(raw(machine, "mem.meminfo"))
    assert meminfo.mem_total_kib > 100 * 1024 * 1024  # both machines have > 100 GiB
    from_psutil = memory.parse_psutil(raw(machine, "mem.psutil"))
    assert from_psutil.mem_total_kib == meminfo.mem_total_kib
    assert from_psutil.swap_total_kib == meminfo.swap_total_kib == 0
    memory.parse_fstab(raw(machine, "fs.fstab"))


def test_proc_swaps_with_areas_and_escaped_space() -> None:
    # /proc/swaps as the kernel prints it for a file with a space in its name (octal escape).
    text = ("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
            "/dev/nvme0n1p3                          partition\t8388604\t\t0\t\t-2\n"
            "/nvme/swap\\040file                       file\t\t209715196\t1024\t\t-3\n")
    areas = memory.parse_proc_swaps(text)
    assert [a.path for a in areas] == ["/dev/nvme0n1p3", "/nvme/swap file"]
    assert areas[1].size_kib == 209715196


def test_proc_swaps_garbage_is_unparseable() -> None:
    with pytest.raises(ParseError):
        memory.parse_proc_swaps("Filename Type\n/swap file not-a-number 0 -2\n")


@pytest.mark.parametrize("machine", ["h100-x1", "h200-x2"])
def test_uname_captures(machine: str) -> None:
    kernel = system.parse_uname_r(raw(machine, "system.kernel"))
    assert kernel.version[:2] == (6, 18)


def test_uname_garbage() -> None:
    with pytest.raises(ParseError):
        system.parse_uname_r("Linux\nsomething else")


def test_sysfs_fallback_capture() -> None:
    topo = numa.parse_sysfs_nodes((FIXTURES / "captures" / "sysfs-nodes_vm-xeon.txt").read_text())
    assert topo.node_count == 1 and topo.source == "sysfs"
    assert topo.nodes[0].cpus == (0, 1)
    assert topo.nodes[0].size_mib and topo.nodes[0].size_mib > 1024


def test_sysfs_fallback_garbage() -> None:
    with pytest.raises(ParseError):
        numa.parse_sysfs_nodes("grep: /sys/devices/system/node/node*/cpulist: No such file\n")


def test_pycpuinfo_capture_agrees_with_proc_cpuinfo() -> None:
    info = cpu.parse_pycpuinfo((FIXTURES / "captures" / "py-cpuinfo_vm-xeon.json").read_text())
    assert info.vendor == "GenuineIntel" and info.family == 6 and info.source == "py-cpuinfo"
    assert "sse2" in info.flags


# --- packages.dpkg: one dpkg-query for every package ----------------------------------------

def test_dpkg_query_capture_answers_by_name_and_by_name_arch() -> None:
    """This VM's Debian, asked for build-essential, binutils-common, freeglut3-dev:amd64,
    libcurl4-openssl-dev and nosuch-package: dpkg prints only the three it knows."""
    from omni_host.probes.parsers import host

    text = (FIXTURES / "captures" / "dpkg-query-W_vm-debian.txt").read_text()
    found = host.parse_dpkg(text)
    assert found["build-essential"] is True
    assert found["binutils-common"] is True and found["binutils-common:amd64"] is True
    assert found["freeglut3-dev:amd64"] is True
    assert "libcurl4-openssl-dev" not in found and "nosuch-package" not in found


def test_dpkg_query_any_installed_architecture_counts_for_the_bare_name() -> None:
    from omni_host.probes.parsers import host

    found = host.parse_dpkg("== dpkg-query -W\nlibfoo libfoo:i386 config-files\n"
                            "libfoo libfoo:amd64 installed\n")
    assert found == {"libfoo": True, "libfoo:i386": False, "libfoo:amd64": True}
    assert host.parse_dpkg("== dpkg-query -W\n") == {}  # dpkg knows none of them: all missing
    with pytest.raises(ParseError):
        host.parse_dpkg("== dpkg-query -W\ngarbage\n")
    with pytest.raises(ParseError):
        host.parse_dpkg("")  # not even the header: the probe did not run as planned
