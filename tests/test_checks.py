"""Check verdicts on facts from real captures, against policies written for each case."""

from __future__ import annotations

import dataclasses
import re

import pytest
from conftest import FIXTURES, public_capture
from helpers import gpu_bundle

from omni_host.collect.bundle import Bundle
from omni_host.evaluate.audit import evaluate_bundle
from omni_host.evaluate.prior import NO_PRIOR
from omni_host.measure.rules import tensor_split
from omni_host.model import CommandResult, Status
from omni_host.plan.policy import masked_hwcaps, policy_from_vars, reference_vars


def verdicts(bundle: Bundle, **policy_vars) -> dict:
    policy = policy_from_vars(policy_vars, "test policy")
    return {r.id: r for r in evaluate_bundle(bundle, policy).results}


def with_output(bundle: Bundle, probe_id: str, stdout: str, *, status: str = "ran",
                exit_code: int | None = 0) -> Bundle:
    """The same real bundle with one probe's output replaced by another real capture."""
    results = dict(bundle.results)
    old = results[probe_id]
    results[probe_id] = dataclasses.replace(old, stdout=stdout, status=status, exit_code=exit_code)
    return dataclasses.replace(bundle, results=results)


# --- gpu.driver-version on the real GPU machines (driver 580.159.04, kernel 6.18) --------------

@pytest.mark.parametrize("machine", ["h100-x1", "h200-x2"])
@pytest.mark.parametrize(("minimum", "recommended", "status"), [
    ("580.95.05", "580.126.09", Status.PASS),   # the reference policy (S-013)
    ("580.95.05", "590.48.01", Status.WARN),    # works, newer recommended
    ("590.44.01", None, Status.FAIL),           # below the floor
])
def test_driver_version_on_gpu_machines(machine, minimum, recommended, status) -> None:
    policy = {"omni_gpu_driver_min": minimum} | (
        {"omni_gpu_driver_recommended": recommended} if recommended else {})  # else the default
    result = verdicts(gpu_bundle(machine), **policy)["gpu.driver-version"]
    assert result.status is status, result.summary
    assert result.actual == "580.159.04"
    assert result.evidence[0].command == "nvidia-smi -q -x"


@pytest.mark.parametrize(("driver", "status"), [
    # the driver of telegraf's A100 capture (its XML lists one GPU of four: unparseable as a
    # whole, so its version is taken from its own <driver_version> line) and the H100's own
    (re.search(r"<driver_version>([\d.]+)<", public_capture(
        "nvidia-smi/telegraf_4x-a100-sxm4-80gb_535.54.03_q-x.xml")).group(1), Status.FAIL),
    (None, Status.PASS),
])
def test_driver_version_kernel_619_needs_580_126_09(driver, status) -> None:
    from omni_host.evaluate.checks import catalog, registry
    from omni_host.evaluate.facts import facts_from_bundle

    bundle = with_output(gpu_bundle("h100-x1"), "system.kernel", "6.19.2-generic\n")
    facts = facts_from_bundle(bundle)
    if driver is not None:
        gpu = facts.probes["gpu.nvidia-smi"]
        facts.probes["gpu.nvidia-smi"] = dataclasses.replace(
            gpu, fact=dataclasses.replace(gpu.fact, driver_version=driver))
    policy = policy_from_vars({"omni_gpu_driver_min": "535.0"}, "test policy")
    result = registry()["gpu.driver-version"](facts, policy, catalog()["gpu.driver-version"],
                                              NO_PRIOR)
    assert result.status is status, result.summary
    if status is Status.FAIL:
        assert f"6.19.2-generic needs driver >= 580.126.09, found {driver}" in result.summary


def test_driver_version_fails_when_policy_expects_gpus_and_there_are_none() -> None:
    bundle = with_output(gpu_bundle("h100-x1"), "gpu.nvidia-smi", "", status="missing",
                         exit_code=None)
    bundle = with_output(bundle, "gpu.pynvml", "", exit_code=4)
    result = verdicts(bundle, **reference_vars())["gpu.driver-version"]
    assert result.status is Status.FAIL
    assert "policy expects 2 GPU(s) but no NVIDIA driver answers" in result.summary
    assert result.remediation is not None and result.remediation.playbook == "nvidia-driver.yml"


def test_driver_version_skips_without_gpu_policy() -> None:
    bundle = with_output(gpu_bundle("h100-x1"), "gpu.nvidia-smi", "", status="missing",
                         exit_code=None)
    bundle = with_output(bundle, "gpu.pynvml", "", exit_code=4)
    assert verdicts(bundle)["gpu.driver-version"].status is Status.SKIP


def test_driver_version_falls_back_to_pynvml() -> None:
    bundle = with_output(gpu_bundle("h200-x2"), "gpu.nvidia-smi", "", status="timeout",
                         exit_code=-9)
    result = verdicts(bundle, omni_gpu_driver_min="580.95.05")["gpu.driver-version"]
    assert result.status is Status.PASS
    assert result.evidence[0].probe == "gpu.pynvml"


# --- gpu.topology ------------------------------------------------------------------------------

def test_topology_two_h200_nvlink_as_planned() -> None:
    result = verdicts(gpu_bundle("h200-x2"),
                      omni_gpus=[{"model": "H200", "vram_gib": 141}] * 2)["gpu.topology"]
    assert result.status is Status.PASS, result.summary
    assert result.details["links"] == [{"a": "GPU0", "b": "GPU1", "link": "NV18"}]
    assert result.details["p2p_read"] == [{"a": "GPU0", "b": "GPU1", "status": "OK"}]
    assert result.details["tensor_split"] == [50, 50]
    assert "symmetric VRAM (NVLink present)" in result.summary


def test_topology_reference_policy_on_h100_fails_naming_the_difference() -> None:
    result = verdicts(gpu_bundle("h100-x1"), **reference_vars())["gpu.topology"]
    assert result.status is Status.FAIL
    assert "missing RTX PRO 6000 Blackwell (96 GiB)" in result.summary
    assert "missing RTX 5090 (32 GiB)" in result.summary
    assert "unexpected NVIDIA H100 80GB HBM3" in result.summary


def test_topology_wrong_vram_is_named() -> None:
    result = verdicts(gpu_bundle("h100-x1"),
                      omni_gpus=[{"model": "H100", "vram_gib": 94}])["gpu.topology"]
    assert result.status is Status.FAIL
    assert "H100: expected 94 GiB, found 80 GiB" in result.summary


def test_topology_missing_second_gpu() -> None:
    result = verdicts(gpu_bundle("h100-x1"),
                      omni_gpus=[{"model": "H100", "vram_gib": 80}] * 2)["gpu.topology"]
    assert result.status is Status.FAIL
    assert "missing H100 (80 GiB)" in result.summary


def test_topology_asymmetric_split_from_a_real_blackwell_capture() -> None:
    # The real RTX PRO 6000 Blackwell capture (97887 MiB) as GPU set: one GPU, no split.
    bundle = with_output(gpu_bundle("h100-x1"), "gpu.nvidia-smi", public_capture(
        "nvidia-smi/telegraf_rtx-pro-6000-maxq-blackwell_590.44.01_q-x.xml"))
    result = verdicts(bundle, omni_gpus=[{"model": "RTX PRO 6000 Blackwell", "vram_gib": 96}])
    assert result["gpu.topology"].status is Status.PASS
    assert "single GPU" in result["gpu.topology"].summary


@pytest.mark.parametrize(("vram", "split"), [
    ([97887, 32607], [75, 25]),          # RTX PRO 6000 96 GB + RTX 5090 32 GB (S-003)
    ([143771, 143771], [50, 50]),
    ([24576, 24576, 24576], [34, 33, 33]),
])
def test_tensor_split_is_proportional_and_sums_to_100(vram, split) -> None:
    assert tensor_split(vram) == split


# --- numa.nps1 ---------------------------------------------------------------------------------

def without_cpu(bundle: Bundle) -> Bundle:
    """A real bundle with its CPU probes removed: a numactl capture of another machine then
    stands alone, and the sockets come from its own distance matrix."""
    return dataclasses.replace(bundle, results={k: v for k, v in bundle.results.items()
                                                if not k.startswith("cpu.")})


# Expected values from the captures' own text: the distance matrices show two groups of
# nodes 32 apart (two sockets), and the sources say NPS4 (7713) and NPS1 (9375F, 9135).
@pytest.mark.parametrize(("capture", "expected", "status", "words"), [
    ("numactl/epyc-7713-2s-nps4_8nodes.txt", 1, Status.FAIL,
     "2 sockets (numactl distance matrix), 4 NUMA nodes per socket, expected 1: set the BIOS "
     "setting that gives 1 NUMA node(s) per socket"),  # no CPU facts: no vendor's words
    ("numactl/epyc-7713-2s-nps4_8nodes.txt", 4, Status.PASS, "4 NUMA nodes per socket"),
    ("numactl/epyc-9375f-2s-zen5-smtoff_2nodes.txt", 1, Status.PASS,
     "2 sockets (numactl distance matrix), 1 NUMA node per socket, as expected"),
    ("numactl/epyc-9135-2s-zen5_2nodes_cpu-compress.txt", 1, Status.PASS, "1 NUMA node per socket"),
    ("numactl/epyc-9375f-2s-zen5-smtoff_2nodes.txt", 2, Status.FAIL, "1 NUMA node per socket"),
    ("numactl/epyc-7551-2s_8nodes_memoryless_PARTIAL.txt", 1, Status.SKIP,
     "sockets are unknown"),  # the pasted matrix is cut off: no verdict without sockets
    ("numactl/nodejs-benchmark-1s_1node.txt", 1, Status.PASS,
     "1 socket (numactl distance matrix), 1 NUMA node per socket, as expected"),
    # numactl#165: "a Threadripper 3960X in NPS4 configuration"; nodes 0 and 3 memoryless
    ("numactl/threadripper-3960x-1s-nps4_4nodes_2memoryless.txt", 1, Status.FAIL,
     "1 socket (numactl distance matrix), 4 NUMA nodes per socket, expected 1"),
    ("numactl/threadripper-3960x-1s-nps4_4nodes_2memoryless.txt", 4, Status.PASS,
     "4 NUMA nodes per socket, as expected; memoryless node(s): 0, 3"),
    # OpenBLAS#1461: a TR 1950X in NUMA mode, "naturally a NUMA architecture": two dies
    ("numactl/threadripper-1950x-1s-numa-mode_2nodes.txt", 1, Status.FAIL,
     "1 socket (numactl distance matrix), 2 NUMA nodes per socket, expected 1"),
    # Two Xeon sockets at distance 21 read exactly as the two dies of one Cluster-on-Die
    # socket: without the CPU topology, no verdict (the false pass the issue saw on CoD)
    ("numactl/aws-c5n.18xlarge-2s-intel_2nodes.txt", 1, Status.SKIP,
     "the distance matrix is ambiguous: groups of nodes at distance 21: another socket, or "
     "another die of the same socket; the distances cannot tell"),
    # Cluster-on-Die on two Broadwell-EP sockets: the matrix goes past 21 (31 between the
    # sockets), so 21 is the die level; its lscpu says "Socket(s): 2", "NUMA node(s): 4"
    ("numactl/broadwell-ep-e5-2697v4-2s-cod_4nodes.txt", 1, Status.FAIL,
     "2 sockets (numactl distance matrix), 2 NUMA nodes per socket, expected 1"),
    # Aurora: 2 CPUs, each with its DDR node and its HBM node (flat mode) without CPUs
    ("numactl/aurora-2s-xeon-max-hbm-flat_4nodes_2cpuless.txt", 1, Status.SKIP,
     "distance matrix is ambiguous: groups of nodes at distance 21"),
])
def test_nps_per_socket_on_real_captures(capture, expected, status, words) -> None:
    bundle = with_output(without_cpu(gpu_bundle("h100-x1")), "numa.numactl",
                         public_capture(capture))
    result = verdicts(bundle, omni_numa_nps=expected)["numa.nps1"]
    assert result.status is status, result.summary
    assert words in result.summary
    assert result.evidence[0].lines[0].startswith("available:")
    if "9375f" in capture or "9135" in capture:
        assert "NPS" not in result.summary.split("expected")[0]  # no NPS advice on NPS1


def test_groups_too_large_to_share_a_socket_are_each_one() -> None:
    """The real two-socket NPS4 EPYC matrix with its sockets 21 apart instead of 32: two
    groups of four nodes cannot be one socket (four at most), so the matrix settles two."""
    text = public_capture("numactl/epyc-7713-2s-nps4_8nodes.txt").replace("  32", "  21")
    from omni_host.probes.parsers import numa

    topo = numa.parse_numactl_hardware(text)
    assert topo.distance_ambiguity() is None and topo.sockets_from_distances() == 2
    bundle = with_output(without_cpu(gpu_bundle("h100-x1")), "numa.numactl", text)
    result = verdicts(bundle, omni_numa_nps=4)["numa.nps1"]
    assert result.status is Status.PASS and "2 sockets (numactl distance matrix)" in result.summary
    for words in ("NPS", "SNC", "Cluster-on-Die"):  # no CPU identity: no vendor's BIOS mode
        assert words not in result.summary


def test_nps_default_is_one_per_socket_on_the_gpu_machines() -> None:
    for machine in ("h100-x1", "h200-x2"):
        result = verdicts(gpu_bundle(machine))["numa.nps1"]  # the role default: 1
        assert result.status is Status.PASS, result.summary
        assert "/proc/cpuinfo physical id" in result.summary


@pytest.mark.parametrize(("vendor", "family", "model", "words"), [
    ("AuthenticAMD", 26, 2, "NPS1 (BIOS: CbsDfCmnDramNpsSHP=NPS1)"),   # Zen 5
    ("AuthenticAMD", 23, 0x31, "NPS1"),                                # Zen 2 (Rome)
    ("AuthenticAMD", 23, 0x01, "no NPS setting on Zen 1"),             # Naples, TR 1950X
    ("GenuineIntel", 6, 143, "Sub-NUMA Clustering (SNC)"),
])
def test_the_fix_names_the_cpus_own_setting(vendor, family, model, words) -> None:
    from omni_host.evaluate.checks.numa import bios_setting
    from omni_host.probes.parsers.cpu import CpuInfo

    cpu = CpuInfo(vendor, family, model, "", frozenset(), None, "/proc/cpuinfo", 2)
    assert words in bios_setting(cpu, 1)


def test_nps1_garbage_is_error_with_excerpt() -> None:
    bundle = with_output(gpu_bundle("h100-x1"), "numa.numactl", "segmentation fault\n")
    result = verdicts(bundle, omni_numa_nps=1)["numa.nps1"]
    assert result.status is Status.ERROR
    assert "unparseable" in result.summary
    assert result.evidence[0].lines == ("segmentation fault",)


# --- swap.capacity -----------------------------------------------------------------------------

SWAPS = ("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
         "/nvme/swap200g                          file\t\t209715196\t{used}\t\t-2\n")


def test_swap_missing_fails() -> None:
    result = verdicts(gpu_bundle("h100-x1"), **reference_vars())["swap.capacity"]
    assert result.status is Status.FAIL
    assert "no active swap at /nvme/swap200g, expected 204,800 MiB" in result.summary


def test_swap_active_but_not_in_fstab_warns() -> None:
    bundle = with_output(gpu_bundle("h100-x1"), "mem.swaps", SWAPS.format(used=0))
    result = verdicts(bundle, **reference_vars())["swap.capacity"]
    assert result.status is Status.WARN
    assert "not in /etc/fstab" in result.summary


def test_swap_active_persisted_passes_and_thrashing_warns() -> None:
    bundle = with_output(gpu_bundle("h100-x1"), "mem.swaps", SWAPS.format(used=0))
    bundle = with_output(bundle, "fs.fstab", "/nvme/swap200g none swap sw 0 0\n")
    assert verdicts(bundle, **reference_vars())["swap.capacity"].status is Status.PASS
    busy = with_output(bundle, "mem.swaps", SWAPS.format(used=180_000_000))
    result = verdicts(busy, **reference_vars())["swap.capacity"]
    assert result.status is Status.WARN
    assert "86% used" in result.summary


# --- containers.glibc-tunables -----------------------------------------------------------------

ZEN5 = "cpu/lscpu_ryzen9-9950x_zen5-fam26_pytorch-collect-env.txt"


# A real `docker inspect` of three running containers on this VM (Debian docker.io, an image
# made with `docker import`), as the collector redacted it: memgraph masks two hwcaps (the
# "partial" attempt of F-010), memgraph-ok all five, qdrant none.
INSPECT = (FIXTURES / "captures" / "docker-inspect_vm-busybox-3containers_redacted.json").read_text()


@pytest.mark.parametrize(("container", "status", "words"), [
    ("memgraph-ok", Status.PASS, "mask all five"),
    ("memgraph", Status.FAIL, "leaves AVX512BW,AVX512CD,AVX512DQ unmasked"),
    ("qdrant", Status.FAIL, "qdrant: no GLIBC_TUNABLES"),
])
def test_tunables_on_zen5_real_containers(container, status, words) -> None:
    bundle = with_output(gpu_bundle("h100-x1"), "cpu.cpuinfo", public_capture(ZEN5))
    bundle = with_output(bundle, "docker.containers", INSPECT)
    result = verdicts(bundle, omni_zen5_tunables_containers=[container])
    assert result["containers.glibc-tunables"].status is status
    assert words in result["containers.glibc-tunables"].summary


def test_tunables_container_not_running_fails() -> None:
    bundle = with_output(gpu_bundle("h100-x1"), "cpu.cpuinfo", public_capture(ZEN5))
    bundle = with_output(bundle, "docker.containers", "[]")
    result = verdicts(bundle, omni_zen5_tunables_containers=["memgraph"])["containers.glibc-tunables"]
    assert result.status is Status.FAIL
    assert "memgraph: not running" in result.summary


def test_tunables_not_applicable_on_intel() -> None:
    result = verdicts(gpu_bundle("h100-x1"), omni_zen5_tunables_containers=["memgraph"])
    assert result["containers.glibc-tunables"].status is Status.SKIP
    assert "not Zen 5" in result["containers.glibc-tunables"].summary


def test_tunables_skipped_when_docker_missing_on_zen5() -> None:
    bundle = with_output(gpu_bundle("h100-x1"), "cpu.cpuinfo", public_capture(ZEN5))
    result = verdicts(bundle, omni_zen5_tunables_containers=["memgraph"])["containers.glibc-tunables"]
    assert result.status is Status.SKIP
    assert "not installed" in result.summary  # the real capture: "sh: 1: docker: not found"


def test_masked_hwcaps_reads_colon_separated_tunables() -> None:
    value = "glibc.malloc.arena_max=2:glibc.cpu.hwcaps=-AVX512F,-avx512vl,AVX2"
    assert masked_hwcaps(value) == {"AVX512F", "AVX512VL"}


def test_unavailable_probe_result_is_never_a_pass() -> None:
    """Every check with its inputs missing is skipped or failed, never passed by accident."""
    bundle = gpu_bundle("h100-x1")
    empty = dataclasses.replace(bundle, results={
        k: CommandResult(k, v.argv, "timeout", -9, "", "", 1.0, "timed out after 1s")
        for k, v in bundle.results.items()})
    for result in evaluate_bundle(empty, policy_from_vars(reference_vars(), "ref")).results:
        assert result.status in (Status.SKIP, Status.FAIL), (result.id, result.summary)


def test_a_parser_crash_costs_its_checks_never_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser bug (not a ParseError) is that probe's unparseable outcome with the reason and
    an excerpt: its checks say error, every other check still judges the evidence."""
    from omni_host.probes import catalog

    def crash(text: str) -> object:
        raise ZeroDivisionError("a bug")

    numactl = catalog.PROBES_BY_ID["numa.numactl"]
    monkeypatch.setitem(catalog.PROBES_BY_ID, "numa.numactl",
                        dataclasses.replace(numactl, parse=crash))
    results = verdicts(gpu_bundle("h100-x1"), omni_numa_nps=1)
    assert results["numa.nps1"].status is Status.ERROR
    assert "parser crashed: ZeroDivisionError: a bug" in results["numa.nps1"].summary
    assert results["gpu.driver-version"].status is not Status.ERROR


def test_cpu_topology_decides_where_distances_are_ambiguous() -> None:
    """The same two-node Xeon matrix (nodes 21 apart) with the CPU topology beside it: the
    package ids count the sockets, the distance matrix is not needed."""
    bundle = with_output(gpu_bundle("h200-x2"), "numa.numactl",
                         public_capture("numactl/aws-c5n.18xlarge-2s-intel_2nodes.txt"))
    result = verdicts(bundle, omni_numa_nps=1)["numa.nps1"]
    cpu = verdicts(bundle)["numa.nps1"].details["sockets_from"]
    assert cpu == "/proc/cpuinfo physical id"
    # this H200 host's cpuinfo lists one physical id: 2 nodes on 1 socket, NPS2-like
    assert result.status is Status.FAIL
    assert "1 socket (/proc/cpuinfo physical id), 2 NUMA nodes per socket" in result.summary


def test_a_vm_whose_vcpus_claim_two_sockets_on_one_node_is_not_judged() -> None:
    """sonar#450: a 2-vCPU VM whose /proc/cpuinfo gives each vCPU its own physical id, on one
    NUMA node (this bundle's own): the sources disagree, and the check says so."""
    bundle = with_output(gpu_bundle("h100-x1"), "cpu.cpuinfo", public_capture(
        "cpu/proc-cpuinfo_vm-2vcpu-haswell_2-physical-ids_sonar450.txt"))
    result = verdicts(bundle, omni_numa_nps=1)["numa.nps1"]
    assert result.status is Status.SKIP
    assert result.summary.startswith("the sources disagree: 2 sockets by /proc/cpuinfo physical "
                                     "id, but only 1 NUMA node with CPUs")


@pytest.mark.parametrize("expected", [1, 2, 4])
def test_the_nps_fix_never_contradicts_its_summary(expected: int) -> None:
    """Each manual step names the policy's own value, as the summary does (the steps said
    NPS1 under a finding that said 'set NPS4')."""
    bundle = with_output(gpu_bundle("h100-x1"), "numa.numactl",
                         public_capture("numactl/epyc-7713-2s-nps4_8nodes.txt"))
    bundle = with_output(bundle, "cpu.cpuinfo", public_capture(
        "cpu/proc-cpuinfo_ryzen9-9950x_zen5_processor0_lkml.txt"))
    result = verdicts(bundle, omni_numa_nps=expected)["numa.nps1"]
    assert result.status is Status.FAIL  # 8 nodes on the one socket this cpuinfo names
    assert f"set NPS{expected} (BIOS: CbsDfCmnDramNpsSHP=NPS{expected})" in result.summary
    steps = " ".join(result.remediation.steps)
    assert f"NPS{expected}" in steps
    assert not [n for n in ("NPS1", "NPS2", "NPS4") if n in steps and n != f"NPS{expected}"]


def test_eight_nodes_all_closer_than_20_are_not_one_socket() -> None:
    """No real capture of an eight-socket Xeon whose SLIT reads all distances below 20 was
    found: the real EPYC 7713 capture with its cross-socket distance (32) changed to 16, and
    nothing else, reads as one group of eight nodes, which no NPS or SNC mode gives one socket."""
    text = public_capture("numactl/epyc-7713-2s-nps4_8nodes.txt").replace(" 32", " 16")
    bundle = with_output(without_cpu(gpu_bundle("h100-x1")), "numa.numactl", text)
    result = verdicts(bundle, omni_numa_nps=1)["numa.nps1"]
    assert result.status is Status.SKIP
    assert ("8 nodes all closer than 20 to each other: one socket has at most 4 (the most any "
            "BIOS mode gives)" in result.summary)  # no CPU identity: no vendor's mode named


def test_the_fix_steps_follow_the_cpus_vendor() -> None:
    """The NPS fix on an Intel machine mixed `AMD CBS > DF Common Options` with "set SNC4"
    (issue 47): the lent H100's Xeon (its own /proc/cpuinfo) asked for 4 nodes a socket is sent
    to the Intel menu only; an AMD CPU keeps the catalog's AMD path."""
    from omni_host.evaluate.checks import catalog
    from omni_host.evaluate.checks.numa import fix_steps
    from omni_host.probes.parsers.cpu import CpuInfo

    result = verdicts(gpu_bundle("h100-x1"), omni_numa_nps=4)["numa.nps1"]
    assert result.status is Status.FAIL and "SNC4 in the BIOS" in result.summary
    steps = result.remediation.steps
    assert "Uncore General Configuration > SNC" in steps[0] and "AMD" not in " ".join(steps)
    zen5 = CpuInfo("AuthenticAMD", 26, 2, "", frozenset(), None, "/proc/cpuinfo", 1)
    amd = fix_steps(catalog()["numa.nps1"], "NPS1", 1, zen5).steps
    assert amd[0].startswith("Reboot into the BIOS/UEFI setup (AMD CBS > DF Common Options")
