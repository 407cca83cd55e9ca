"""memory.channels and memory.speed on real `dmidecode` captures of EPYC, Threadripper PRO and
Xeon machines (tests/fixtures/PROVENANCE.md): the expected values are read from each capture's
own lines here, never from omni-host's output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from omni_host.errors import ParseError
from omni_host.evaluate.checks import catalog, registry
from omni_host.evaluate.facts import HostFacts
from omni_host.evaluate.prior import NO_PRIOR
from omni_host.evaluate.sentinel import fact_summary
from omni_host.model import CheckResult, Outcome, ProbeResult, Status
from omni_host.plan.policy import Policy
from omni_host.probes.parsers.memory import parse_dmidecode_memory, parse_l3_domains

DMI = Path(__file__).resolve().parent / "fixtures" / "public" / "dmidecode"


def _devices(name: str) -> list[dict[str, str]]:
    """The capture's memory devices, field by field, read here with a regex of our own."""
    text = (DMI / name).read_text()
    return [dict(re.findall(r"^\t([^:\n]+): (.*?)\s*$", block, re.M))
            for block in text.split("\n\n") if "\nMemory Device\n" in block]


def _judge(name: str, l3: int | None = None) -> dict[str, CheckResult]:
    probes = {"mem.dimms": ProbeResult("mem.dimms", "dmidecode -t 4 -t 17", Outcome.OBSERVED,
                                       fact=parse_dmidecode_memory((DMI / name).read_text()))}
    if l3 is not None:
        probes["cpu.l3"] = ProbeResult("cpu.l3", "l3", Outcome.OBSERVED, fact=l3)
    facts = HostFacts("h", probes)
    return {cid: registry()[cid](facts, Policy(), catalog()[cid], NO_PRIOR)
            for cid in ("memory.channels", "memory.speed")}


def test_a_genoa_with_three_empty_channels_warns_naming_them() -> None:
    name = "epyc-9454p_genoad12m3_9of12-channels.txt"
    devices = _devices(name)
    empty = [d["Bank Locator"][-1] for d in devices if d["Size"] == "No Module Installed"]
    assert len(devices) == 12 and empty == ["F", "J", "L"]  # the capture's own slots
    got = _judge(name)
    channels = got["memory.channels"]
    assert channels.status is Status.WARN
    assert "9 of 12 memory channels hold a DIMM (channels F, J, L of socket 0 empty)" \
        in channels.summary
    assert "75% of the bandwidth" in channels.summary
    # 9 channels x 8 bytes x 4800 MT/s (the capture's "Configured Memory Speed: 4800 MT/s")
    assert channels.actual["bandwidth_gbs"] == pytest.approx(9 * 8 * 4800e6 / 1e9)
    assert got["memory.speed"].status is Status.PASS
    assert "all 9 DIMMs run at their rated 4800 MT/s (DDR5)" in got["memory.speed"].summary


def test_a_threadripper_pro_with_every_channel_filled_passes_both() -> None:
    name = "threadripper-pro-7985wx_wrx90-ws-evo_8of8-channels.txt"
    devices = _devices(name)
    assert {d["Bank Locator"] for d in devices} == {f"P0 CHANNEL {c}" for c in "ABCDEFGH"}
    got = _judge(name, l3=8)
    assert got["memory.channels"].status is Status.PASS
    assert "all 8 memory channels hold a DIMM (1 per channel); 307.2 GB/s" \
        in got["memory.channels"].summary
    assert got["memory.speed"].status is Status.PASS


def test_one_dimm_of_eight_channels_fails() -> None:
    name = "threadripper-pro-3995wx_m12swa-tf_1of8-channels.txt"
    filled = [d for d in _devices(name) if d["Size"] != "No Module Installed"]
    assert [d["Bank Locator"] for d in filled] == ["P0_Node0_Channel2_Dimm0"]
    channels = _judge(name)["memory.channels"]
    assert channels.status is Status.FAIL
    assert "1 of 8 memory channels hold a DIMM (channels 0, 1, 3, 4, 5, 6, 7 of socket 0 " \
        "empty)" in channels.summary


def test_a_two_socket_xeon_names_the_empty_channel_of_each_socket() -> None:
    name = "xeon-gold-6130-2s_ws-c621e-sage_8of12-channels.txt"
    empty = [(d["Bank Locator"], d["Locator"]) for d in _devices(name)
             if d["Size"] == "No Module Installed"]
    assert empty == [("NODE 1", "DIMM_C1"), ("NODE 1", "DIMM_F1"), ("NODE 2", "DIMM_J1"),
                     ("NODE 2", "DIMM_M1")]
    channels = _judge(name)["memory.channels"]
    assert channels.status is Status.WARN
    assert "(channels C, F of socket 1; channels J, M of socket 2 empty)" in channels.summary


def test_the_slots_of_an_empty_socket_are_not_empty_channels() -> None:
    """One Xeon Silver in a two-socket board: NODE 2's slots belong to no CPU."""
    name = "xeon-silver-4210r-1of2-sockets_ws-c621e-sage_2666-at-2400.txt"
    text = (DMI / name).read_text()
    assert text.count("Status: Populated, Enabled") == 1
    got = _judge(name)
    assert got["memory.channels"].status is Status.PASS
    assert "all 6 memory channels" in got["memory.channels"].summary
    # "Speed: 2666 MT/s", "Configured Memory Speed: 2400 MT/s": below every DIMM's rating
    speed = got["memory.speed"]
    assert speed.status is Status.WARN
    assert "6 of 6 DIMMs rated 2666 MT/s run at 2400 MT/s" in speed.summary
    assert "not the DIMMs' limit: the CPU's memory controller (Intel(R) Xeon(R) Silver 4210R" \
        in speed.summary


def test_mixed_ratings_run_at_the_slowest_and_name_it() -> None:
    name = "epyc-7402-2s_rome2d16-2t_mixed-2133-2400.txt"
    devices = _devices(name)
    slow = [d["Bank Locator"] for d in devices if d["Speed"] == "2133 MT/s"]
    fast = [d for d in devices if d["Speed"] == "2400 MT/s"]
    assert len(slow) == 6 and len(fast) == 10
    assert {d["Configured Memory Speed"] for d in devices} == {"2133 MT/s"}
    speed = _judge(name)["memory.speed"]
    assert speed.status is Status.WARN
    assert "10 of 16 DIMMs rated 2400 MT/s run at 2133 MT/s" in speed.summary
    assert f"the slowest DIMMs set it: 6 rated 2133 MT/s ({slow[0]} DIMM 0" in speed.summary
    assert _judge(name)["memory.channels"].status is Status.PASS  # 16 of 16


def test_slot_names_without_channels_decline_and_still_judge_the_speed() -> None:
    name = "xeon-gold-5120-2s_poweredge-c4140_slots-not-channels.txt"
    assert {d["Bank Locator"] for d in _devices(name)} == {"Not Specified"}
    got = _judge(name)
    assert got["memory.channels"].status is Status.SKIP
    assert "10 of 24 memory slots hold a DIMM; the slots' names do not say their channels" \
        in got["memory.channels"].summary
    assert got["memory.speed"].status is Status.WARN


def test_the_summary_carries_bandwidth_and_the_ccd_links_on_zen() -> None:
    from omni_host.probes.parsers.cpu import parse_cpuinfo
    cpuinfo = (Path(__file__).resolve().parent / "fixtures" / "public" / "cpu" /
               "proc-cpuinfo_ryzen9-9950x_zen5_processor0_lkml.txt").read_text()
    from omni_host.probes.catalog import PROBES_BY_ID
    absent = {pid: ProbeResult(pid, pid, Outcome.UNAVAILABLE, reason="not here")
              for pid in PROBES_BY_ID}
    facts = HostFacts("h", {**absent,
        "mem.dimms": ProbeResult("mem.dimms", "d", Outcome.OBSERVED, fact=parse_dmidecode_memory(
            (DMI / "epyc-9454p_genoad12m3_9of12-channels.txt").read_text())),
        "cpu.l3": ProbeResult("cpu.l3", "l3", Outcome.OBSERVED, fact=2),
        "cpu.cpuinfo": ProbeResult("cpu.cpuinfo", "c", Outcome.OBSERVED,
                                   fact=parse_cpuinfo(cpuinfo))})
    memory = fact_summary(facts).memory
    assert memory is not None
    assert (memory.channels, memory.channels_populated, memory.mts) == (12, 9, 4800)
    assert memory.ccd_links_gbs == 2 * 64.0  # a Zen 5 part with two CCDs


def test_no_root_and_garbage_are_clear() -> None:
    with pytest.raises(ParseError, match="no SMBIOS memory device"):
        parse_dmidecode_memory("# dmidecode 3.4\n")
    with pytest.raises(ParseError, match="not L3 shared_cpu_list"):
        parse_l3_domains("garbage\n")
    assert parse_l3_domains("0-7,64-71\n8-15,72-79\n0-7,64-71\n") == 2


def test_a_four_channel_threadripper_whose_board_lists_eight_passes() -> None:
    """Threadripper 7960X on a Gigabyte TRX50 AERO D: the BIOS lists P0 CHANNEL A-H, and B, D,
    F, H hold nothing on any such board (the CPU has four channels). It failed "4 of 8 memory
    channels hold a DIMM ... 50% of the bandwidth" (issue 47); the same CPU on ASUS's TRX50
    board, which lists A, C, E, G, passed. Both pass now, by the CPU's own channel count."""
    aero = "threadripper-7960x_trx50-aero-d_4of4-channels-8-slots-listed.txt"
    devices = _devices(aero)
    assert [d["Bank Locator"][-1] for d in devices if d["Size"] == "32 GB"] == list("ACEG")
    assert [d["Bank Locator"][-1] for d in devices if d["Size"] == "No Module Installed"] == \
        list("BDFH")
    assert "Version: AMD Ryzen Threadripper 7960X 24-Cores" in (DMI / aero).read_text()
    channels = _judge(aero)["memory.channels"]
    assert channels.status is Status.PASS, channels.summary
    # 4 channels x 8 bytes x 4800 MT/s ("Configured Memory Speed: 4800 MT/s")
    assert channels.summary.startswith("all 4 memory channels hold a DIMM (1 per channel); "
                                       "153.6 GB/s theoretical; the AMD Ryzen Threadripper "
                                       "7960X 24-Cores has 4 per socket, the board lists 8 "
                                       "channel slot(s)"), channels.summary
    sage = "threadripper-7960x_trx50-sage_4of4-channels.txt"
    assert [d["Bank Locator"][-1] for d in _devices(sage)] == list("ACEG")
    other = _judge(sage)["memory.channels"]
    assert other.status is Status.PASS and other.summary.startswith(
        "all 4 memory channels hold a DIMM (1 per channel); 192 GB/s"), other.summary


def test_a_xeon_w_with_two_of_eight_channels_fails() -> None:
    """Xeon w9-3495X (W-3400: eight channels) on an ASUS W790E-SAGE SE with DIMMs in B1 and
    D1 only: a quarter of the bandwidth, the empty channels named (board and CPU agree)."""
    name = "xeon-w9-3495x_w790e-sage-se_2of8-channels.txt"
    filled = [d["Locator"] for d in _devices(name) if d["Size"] == "64 GB"]
    assert filled == ["CPU0_DIMM_B1", "CPU0_DIMM_D1"]
    channels = _judge(name)["memory.channels"]
    assert channels.status is Status.FAIL
    assert "2 of 8 memory channels hold a DIMM (channels A, C, E, F, G, H of socket 0 empty): " \
        "the CPU reads memory at 25% of the bandwidth" in channels.summary, channels.summary


@pytest.mark.parametrize(("version", "channels"), [
    ("AMD Ryzen Threadripper 7960X 24-Cores", 4), ("AMD Ryzen Threadripper PRO 7985WX 64-Cores", 8),
    ("AMD Ryzen Threadripper PRO 9995WX 96-Cores", 8), ("AMD EPYC 9454P 48-Core Processor", 12),
    ("AMD EPYC 7402 24-Core Processor", 8), ("Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz", 6),
    ("Intel(R) Xeon(R) Silver 4210R CPU @ 2.40GHz", 6), ("Intel(R) Xeon(R) w9-3495X", 8),
    ("Intel(R) Xeon(R) Platinum 8480+", 8), ("Intel(R) Xeon(R) w5-2455X", 4),
    ("Intel(R) Core(TM) i9-14900K", None),
])
def test_the_channel_table_by_cpu(version: str, channels: int | None) -> None:
    from omni_host.probes.parsers.memory import cpu_channels

    assert cpu_channels(version) == channels
