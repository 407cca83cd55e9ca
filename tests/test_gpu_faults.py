"""GPU faults from ``nvidia-smi -q -x``: real captures (the lent H100 idle and under a matmul
load, two NVLinked H200s, telegraf's public test data from driver 515 to 595), and, for faults
no public capture shows, the H100's real capture with only that value changed (each variant is
one exact replacement of the capture's own text, asserted to occur once). Expected verdicts are
read from the capture's text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import public_capture
from helpers import gpu_bundle, with_probe

from omni_host.evaluate.audit import evaluate_bundle
from omni_host.model import Status
from omni_host.plan.policy import policy_from_vars
from omni_host.probes.parsers.nvidia import parse_nvidia_smi_xml

FAULTS = Path(__file__).parent / "fixtures" / "captures" / "gpu-faults"
IDLE = (FAULTS / "nvidia-smi-q-x_h100_580.159.04_idle.xml").read_text()
LOAD = (FAULTS / "nvidia-smi-q-x_h100_580.159.04_matmul-load.xml").read_text()
H200X2 = (FAULTS / "nvidia-smi-q-x_2x-h200_580.159.04_idle.xml").read_text()


def variant(text: str, old: str, new: str) -> str:
    """The real capture with one value changed (``old`` occurs exactly once)."""
    assert text.count(old) == 1, old
    return text.replace(old, new)


def second_gpu(text: str, old: str, new: str) -> str:
    """``variant`` applied to the second <gpu> element alone."""
    at = text.index("<gpu id=", text.index("<gpu id=") + 1)
    return text[:at] + variant(text[at:], old, new)


def judged(xml: str, check_id: str):
    bundle = with_probe(gpu_bundle("h100-x1"), "gpu.nvidia-smi", xml)
    policy = policy_from_vars({}, "t")
    return next(r for r in evaluate_bundle(bundle, policy).results if r.id == check_id)


REMAP = "<remapped_row_pending>No</remapped_row_pending>"
FAILURE = "<remapped_row_failure>No</remapped_row_failure>"
HW_SLOW = "<clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>"
THERMAL = ("<clocks_event_reason_hw_thermal_slowdown>Not Active"
           "</clocks_event_reason_hw_thermal_slowdown>")
LIMIT = "<current_power_limit>700.00 W</current_power_limit>"
GEN = "<max_link_gen>5</max_link_gen>"


@pytest.mark.parametrize("xml, check_id, status, words", [
    # the real captures as they are
    (IDLE, "gpu.memory-errors", Status.PASS, "row remapping healthy (0 uncorrectable row(s)"),
    (IDLE, "gpu.clock-events", Status.PASS, "no slowdown active (reasons now: none)"),
    (IDLE, "gpu.power-limit", Status.PASS, "power limit 700 W (default 700 W)"),
    (IDLE, "gpu.pcie-link", Status.PASS, "gen5 x16"),
    (IDLE, "gpu.vbios", Status.PASS, "NVIDIA H100 80GB HBM3: 96.00.DA.00.0C on GPU0"),
    # a busy GPU that the cap holds at its rated default limit: its design, nothing to set
    (LOAD, "gpu.clock-events", Status.PASS,
     "the power cap holds the clocks under load: SM 1260 of 1980 MHz at 100% busy, limit 700 W, "
     "its rated default: the card's design"),
    (variant(LOAD, LIMIT, LIMIT.replace("700.00", "450.00")), "gpu.clock-events", Status.WARN,
     "limit 450 W, below its default 700 W (see gpu.power-limit)"),
    # the width the link runs at is printed, with its maximum where it runs narrower
    (variant(IDLE, "<current_link_width>16x", "<current_link_width>8x"), "gpu.pcie-link",
     Status.PASS, "gen5 x8 (of x16)"),
    (LOAD, "gpu.power-limit", Status.PASS, "power limit 700 W (default 700 W)"),
    (H200X2, "gpu.vbios", Status.PASS, "NVIDIA H200: 96.00.A5.00.1A on GPU0,1"),
    # one value changed each
    (variant(IDLE, REMAP, REMAP.replace("No", "Yes")), "gpu.memory-errors", Status.WARN,
     "GPU0: a row remap is pending: reset the GPU (nvidia-smi -r -i 0)"),
    (variant(IDLE, FAILURE, FAILURE.replace("No", "Yes")), "gpu.memory-errors", Status.FAIL,
     "row remapping failed"),
    (variant(IDLE, HW_SLOW, HW_SLOW.replace("Not Active", "Active")), "gpu.clock-events",
     Status.WARN, "active now: HW slowdown"),
    (variant(IDLE, THERMAL, THERMAL.replace("Not Active", "Active")), "gpu.clock-events",
     Status.WARN, "HW thermal slowdown (the GPU is too hot)"),
    (variant(IDLE, LIMIT, LIMIT.replace("700.00", "450.00")), "gpu.power-limit", Status.WARN,
     "GPU0: power limit 450 W, below its default 700 W"),
    (variant(IDLE, GEN, GEN.replace("5", "4")), "gpu.pcie-link", Status.WARN,
     "link trained at gen4 max, though the GPU (gen5) support gen5"),
    (second_gpu(H200X2, "<vbios_version>96.00.A5.00.1A</vbios_version>",
                "<vbios_version>96.00.A5.00.10</vbios_version>"), "gpu.vbios", Status.WARN,
     "identical GPUs run different VBIOS: NVIDIA H200: 96.00.A5.00.1A on GPU0, "
     "96.00.A5.00.10 on GPU1"),
])
def test_gpu_fault_checks(xml: str, check_id: str, status: Status, words: str) -> None:
    result = judged(xml, check_id)
    assert result.status is status, result.summary
    assert words in result.summary


@pytest.mark.parametrize("name, check_id, status, words", [
    # the slot tops at gen4 while the Blackwell card supports gen5: the slot limits it
    ("telegraf_rtx-pro-6000-maxq-blackwell_590.44.01_q-x.xml", "gpu.pcie-link", Status.PASS,
     "gen4 x16; the slot limits it (the GPU supports gen5)"),
    # idle at gen1 (power saving): the maximum trained generation is judged, not the current
    # its current_link_width is 8x: the width the link runs at, not its maximum
    ("telegraf_dual-rtx-2080_590.44.01_q-x.xml", "gpu.pcie-link", Status.PASS, "gen3 x8 (of x16)"),
    ("telegraf_dual-rtx-2080_590.44.01_q-x.xml", "gpu.vbios", Status.PASS,
     "NVIDIA GeForce RTX 2080: 90.04.0B.00.8F on GPU0,1"),
    ("telegraf_tesla-t4_515.105.01_q-x.xml", "gpu.memory-errors", Status.PASS,
     "0 page(s) retired for double-bit, 0 for single-bit errors, none pending"),
    ("telegraf_rtx-3060_570.124.04_q-x.xml", "gpu.memory-errors", Status.SKIP,
     "row remapping and page retirement N/A"),
    ("telegraf_rtx-3080_595.58.03_q-x.xml", "gpu.clock-events", Status.PASS,
     "no slowdown active (reasons now: none)"),  # 65% busy, nothing active
    ("telegraf_rtx-3060_570.124.04_q-x.xml", "gpu.clock-events", Status.PASS,
     "reasons now: gpu_idle"),
    ("telegraf_tesla-t4_515.105.01_q-x.xml", "gpu.power-limit", Status.PASS,
     "power limit 70 W (default 70 W)"),  # power_readings/power_limit of driver 515
    ("telegraf_tesla-t4_515.105.01_q-x.xml", "gpu.pcie-link", Status.SKIP,
     "PCIe link generations not reported"),  # no max_device_link_gen before DTD v12
])
def test_gpu_fault_checks_on_public_captures(name: str, check_id: str, status: Status,
                                              words: str) -> None:
    result = judged(public_capture(f"nvidia-smi/{name}"), check_id)
    assert result.status is status, result.summary
    assert words in result.summary


def test_fault_fields_of_the_h100_under_load() -> None:
    (gpu,) = parse_nvidia_smi_xml(LOAD).gpus
    assert gpu.faults.events == ("sw_power_cap",)
    assert (gpu.faults.utilization_pct, gpu.faults.sm_clock_mhz, gpu.faults.sm_clock_max_mhz) \
        == (100, 1260, 1980)
    assert gpu.faults.power_limit_w == gpu.faults.power_default_w == 700.0


def test_power_limit_finding_gives_the_command_that_restores_it() -> None:
    result = judged(variant(IDLE, LIMIT, LIMIT.replace("700.00", "450.00")), "gpu.power-limit")
    assert result.remediation.steps[0].startswith("nvidia-smi -i 0 -pl 700")


@pytest.mark.parametrize("check_id", ["gpu.memory-errors", "gpu.clock-events", "gpu.power-limit",
                                      "gpu.pcie-link", "gpu.vbios"])
def test_without_the_xml_the_fault_checks_are_not_evaluated(check_id: str) -> None:
    bundle = gpu_bundle("h100-x1")
    results = {k: v for k, v in bundle.results.items() if k != "gpu.nvidia-smi"}
    bundle = dataclasses.replace(bundle, results=results)
    result = next(r for r in evaluate_bundle(bundle, policy_from_vars({}, "t")).results
                  if r.id == check_id)
    assert result.status is Status.SKIP
    assert result.summary.startswith("not evaluated: nvidia-smi -q -x: not collected")


# -- not collected is not observed --------------------------------------------------------------
EXPECTS_H100 = {"omni_gpus": [{"model": "H100", "vram_gib": 80}], "omni_gpu_driver_min": "580.0",
                "omni_swap_size_mib": 1024}


def _without(bundle, *probe_ids: str):
    return dataclasses.replace(bundle, results={k: v for k, v in bundle.results.items()
                                                if k not in probe_ids})


@pytest.mark.parametrize("name", ["h100-x1", "h200-x2"])
def test_evidence_taken_away_never_makes_a_verdict(name: str) -> None:
    """Each probe of the lent machines' bundles removed in turn: a check whose verdict moves
    moves to skip or error, never to another pass, warn or fail."""
    from omni_host.probes.catalog import PROBES

    policy = policy_from_vars(EXPECTS_H100, "t")
    bundle = gpu_bundle(name)
    full = {r.id: r.status for r in evaluate_bundle(bundle, policy).results}
    moved = []
    for probe in PROBES:
        for r in evaluate_bundle(_without(bundle, probe.id), policy).results:
            if r.status is not full[r.id] and r.status not in (Status.SKIP, Status.ERROR):
                moved.append(f"without {probe.id}: {r.id} {full[r.id].value} -> {r.status.value}")
    assert moved == []


def test_a_bundle_with_the_topology_alone_judges_no_gpu_check() -> None:
    """nvidia-smi topo -m is there, -q -x, pynvml and --query-gpu are not (an older collector,
    another engine): the GPU checks are not evaluated, never "no NVIDIA driver answers"."""
    bundle = _without(gpu_bundle("h100-x1"), "gpu.nvidia-smi", "gpu.pynvml", "gpu.query")
    results = {r.id: r for r in evaluate_bundle(bundle, policy_from_vars(EXPECTS_H100, "t")).results}
    for check_id in ("gpu.driver-version", "gpu.topology", "gpu.health", "gpu.memory-errors"):
        assert results[check_id].status is Status.SKIP, (check_id, results[check_id].summary)
        assert "not collected in this bundle" in results[check_id].summary
        assert "no NVIDIA driver answers" not in results[check_id].summary


def test_a_partial_xml_errors_on_its_own_name() -> None:
    """The public A100 capture lists 1 of its 4 attached GPUs: every GPU check errors on
    nvidia-smi -q -x, none blames a query that was never collected."""
    bundle = with_probe(_without(gpu_bundle("h100-x1"), "gpu.pynvml", "gpu.query"),
                        "gpu.nvidia-smi",
                        public_capture("nvidia-smi/telegraf_4x-a100-sxm4-80gb_535.54.03_q-x.xml"))
    results = {r.id: r for r in evaluate_bundle(bundle, policy_from_vars(EXPECTS_H100, "t")).results}
    for check_id in ("gpu.driver-version", "gpu.topology", "gpu.health", "gpu.vbios"):
        assert results[check_id].status is Status.ERROR
        assert results[check_id].summary.startswith("nvidia-smi -q -x: unparseable output "
                                                     "(nvidia-smi reports attached_gpus 4 but "
                                                     "lists 1 <gpu> element(s)")


# -- lighter on the host: no GPU topology on a one-GPU host --------------------------------------
@pytest.mark.parametrize("entries, skipped", [(0, True), (1, True), (2, False), (None, False)])
def test_topology_probes_need_two_gpus(tmp_path: Path, entries: int | None, skipped: bool) -> None:
    from omni_host.probes.catalog import PROBES_BY_ID
    from omni_host.remote.collector import _absent_requirement

    gpus = tmp_path / "gpus"
    if entries is not None:  # None: no /proc/driver/nvidia/gpus to count: the probe runs
        gpus.mkdir()
        for i in range(entries):
            (gpus / f"0000:0{i}:00.0").mkdir()
    entry = PROBES_BY_ID["gpu.topo"].plan_entry()
    entry["requires"]["path"] = str(gpus)
    reason = _absent_requirement(entry)
    assert (reason is not None) is skipped
    if skipped:
        assert reason == f"fewer than two GPUs: no GPU topology to read ({entries} in {gpus})"


def test_the_lighter_collector_gives_the_h100_the_same_verdicts() -> None:
    """The lent H100's raw collector output with the old plan (topo -m and -p2p on its one
    GPU) and the new (both skipped): every verdict and summary the same."""
    from omni_host.collect.bundle import bundle_from_output

    folder = Path(__file__).parent / "fixtures" / "captures" / "collector-h100"
    policy = policy_from_vars({"omni_gpus": [{"model": "H100", "vram_gib": 80}],
                               "omni_swap_size_mib": 0, "omni_build_packages": []}, "t")
    judged = []
    for name in ("collector-before_topo-on-one-gpu.out", "collector-after_topo-skipped.out"):
        bundle = bundle_from_output("h100", "local", stdout=(folder / name).read_text(),
                                    stderr="", exit_code=0, duration_s=0.1, started=0.0,
                                    python="python3")
        judged.append({r.id: (r.status, r.summary)
                       for r in evaluate_bundle(bundle, policy).results})
        topo = bundle.results["gpu.topo"]
    assert judged[0] == judged[1]
    assert judged[1]["gpu.topology"][0] is Status.PASS
    assert (topo.status, topo.reason) == ("skipped", "fewer than two GPUs: no GPU topology to "
                                                     "read (1 in /proc/driver/nvidia/gpus)")


# -- Xid events by class and time ------------------------------------------------------------
def xid_verdict(log: str, **policy):
    bundle = with_probe(gpu_bundle("h100-x1"), "gpu.xid", log)
    return next(r for r in evaluate_bundle(bundle, policy_from_vars(policy, "t")).results
                if r.id == "gpu.xid")


BUMBLEBEE = public_capture("dmesg/dmesg_bumblebee677_xid-32-31.txt")  # stamped 24128.83 s


@pytest.mark.parametrize("log, status, words", [
    # the probe's uptime line put 71 s after the real lines' stamps: recent application Xids
    ("uptime 24200.00\n" + BUMBLEBEE, Status.WARN,
     "Xid 32 (Invalid or corrupted push buffer stream) on PCI:0000:01:00, 2x, last 0.0 h ago: "
     "check the application"),
    # the same lines two days into the uptime: since this boot, no action needed now
    ("uptime 196928.83\n" + BUMBLEBEE, Status.PASS,
     "no Xid that needs action in the last 24 h; Xid 32"),
    # dmesg -T and the journal carry no stamp of seconds since boot: counted as recent
    ("uptime 100.00\n" + public_capture("dmesg/dmesg-ctime_gpud46_xid-13-109.txt"), Status.WARN,
     "Xid 13 (Graphics engine exception) on PCI:0000:cb:00, 3x, last time unknown"),
    ("uptime 100.00\n" + public_capture("dmesg/xid-63-row-remapper_ml-engineering.txt"),
     Status.FAIL, "Xid 63 (ECC page retirement or row remapping event) on PCI:0000:10:1c, 1x, "
                  "last time unknown: drain the GPU and reset it"),
    ("uptime 100.00\n" + public_capture("dmesg/xid-79_nvsentinel155.txt"), Status.FAIL,
     "Xid 79 (GPU has fallen off the bus) on PCI:0000:44:00, 1x, last time unknown: reboot the "
     "node, then check the GPU's power and seating"),
    # 45 is a consequence of the NVLink Xids 149 and 145, which are not in the table
    ("uptime 100.00\n" + public_capture("dmesg/kernel_ogkm1150_xid-45-after-149.txt"),
     Status.PASS, "no Xid that needs action in the last 24 h; Xid 45"),
    ("uptime 2940.29\n", Status.PASS, "no Xid event in the kernel log since boot (up 0.8 h)"),
])
def test_xids_by_class_and_time(log: str, status: Status, words: str) -> None:
    result = xid_verdict(log)
    assert result.status is status, result.summary
    assert words in result.summary


def test_an_old_xid_that_needs_a_reset_still_warns() -> None:
    line = public_capture("dmesg/xid-63-row-remapper_ml-engineering.txt")
    result = xid_verdict(f"uptime 200000.00\n[  500.000000] {line}", omni_xid_window_h=24)
    assert result.status is Status.WARN
    assert result.summary.endswith("55.4 h ago: drain the GPU and reset it (nvidia-smi -r -i N) "
                                   "or reboot (if it was not done since)")


def test_the_xid_window_is_the_policys() -> None:
    log = "uptime 24200.00\n" + BUMBLEBEE
    assert xid_verdict(log, omni_xid_window_h=0.01).status is Status.PASS  # 71 s > 36 s


def test_xid_lines_parse_with_their_stamps_and_the_uptime() -> None:
    from omni_host.probes.parsers.host import parse_xid

    log = parse_xid("uptime 24200.00\n" + BUMBLEBEE)
    assert log.uptime_s == 24200.0
    assert [(e.code, e.at_s) for e in log.events] == [(32, 24128.828315), (32, 24128.828608),
                                                      (31, 24128.834365)]
    assert log.events[2].detail == "Ch 00000003, engmask 00000101, intr 10000000"
    assert parse_xid(BUMBLEBEE).uptime_s is None  # a collector before the uptime line


A5000 = public_capture("nvidia-smi/telegraf_dual-rtx-a5000_590.44.01_q-x.xml")
RTX2080 = public_capture("nvidia-smi/telegraf_dual-rtx-2080_590.44.01_q-x.xml")
MAXQ = public_capture("nvidia-smi/telegraf_rtx-pro-6000-maxq-blackwell_590.44.01_q-x.xml")
T4 = public_capture("nvidia-smi/telegraf_tesla-t4_515.105.01_q-x.xml")
APP = ("<graphics_clock>1980 MHz</graphics_clock>\n\t\t\t<mem_clock>2619 MHz</mem_clock>\n"
       "\t\t</applications_clocks>")
APP_HELD = ("<clocks_event_reason_applications_clocks_setting>Not Active"
            "</clocks_event_reason_applications_clocks_setting>")


@pytest.mark.parametrize("xml, check_id, status, words", [
    # BAR1 as each capture states it against the card's memory
    (IDLE, "gpu.resizable-bar", Status.PASS, "BAR1 131072 MiB of a 81559 MiB card: Resizable BAR on"),
    (MAXQ, "gpu.resizable-bar", Status.PASS, "BAR1 131072 MiB of a 97887 MiB card"),
    (A5000, "gpu.resizable-bar", Status.WARN, "BAR1 256 MiB of a 24564 MiB card: Resizable BAR "
                                              "is off (BIOS: Above 4G Decoding"),
    (RTX2080, "gpu.resizable-bar", Status.PASS, "BAR1 256 MiB of a 8192 MiB card: fixed by this "
                                                "board (Turing)"),
    (T4, "gpu.resizable-bar", Status.PASS, "fixed by this board (Turing)"),
    # clocks: the capture's own, the edition from the product name
    (IDLE, "gpu.clocks", Status.PASS, "no clock lock; memory clock max 2619 MHz, power limit 700 W"),
    (MAXQ, "gpu.clocks", Status.PASS, "no clock lock; edition Max-Q Workstation Edition, memory "
                                      "clock max 14001 MHz, power limit 300 W"),
    (T4, "gpu.clocks", Status.PASS, "no clock lock"),
    # the H100's capture with its applications clocks set low, or a clock setting holding it
    (variant(IDLE, APP, APP.replace("2619 MHz", "1593 MHz")), "gpu.clocks", Status.WARN,
     "applications clocks set to 1980/1593 MHz (graphics/memory), below the default 1980/2619"),
    (variant(IDLE, APP_HELD, APP_HELD.replace("Not Active", "Active")), "gpu.clocks",
     Status.WARN, "the clocks are held by a clock setting now"),
])
def test_bar1_clock_locks_and_editions(xml: str, check_id: str, status: Status, words: str) -> None:
    result = judged(xml, check_id)
    assert result.status is status, result.summary
    assert words in result.summary, result.summary
    if status is Status.WARN and check_id == "gpu.clocks":
        assert result.remediation is not None and "nvidia-smi -i 0 -rac" in result.remediation.steps[0]


def _pcie_with_last_bench(tmp_path: Path, edit=None):  # noqa: ANN001
    """gpu.pcie-link of the H100's idle capture (max_link_gen 5), judged with a host past
    whose newest bench is the lent H200's real one (its link sampled under load, gen5 x16);
    ``edit`` changes that stored bench's details first."""
    import json

    from test_bench import _judged

    from omni_host.app.past import past_of
    from omni_host.report.history import load_history

    store = tmp_path / "store"
    _judged("base", store, where=Path(__file__).parent / "fixtures" / "captures" /
            "bench-h200-nvml")
    (stored,) = store.glob("*/report.json")
    doc = json.loads(stored.read_text())
    perf = next(r for r in doc["hosts"][0]["results"] if r["id"] == "perf.tokens-per-s")
    assert perf["details"]["links"] == [{"index": "0", "typical": "gen5 x16",
                                         "lowest": "gen5 x16", "samples": 6, "changes": 0}]
    if edit is not None:
        edit(perf["details"])
        stored.write_text(json.dumps(doc))
    past = past_of(load_history(store), doc["hosts"][0]["host"])
    bundle = with_probe(gpu_bundle("h100-x1"), "gpu.nvidia-smi", IDLE)
    report = evaluate_bundle(bundle, policy_from_vars({}, "t"), prior=past.prior())
    return next(r for r in report.results if r.id == "gpu.pcie-link"), past.last_bench


def test_the_pcie_link_under_load_is_read_from_the_hosts_newest_bench(tmp_path: Path) -> None:
    result, bench = _pcie_with_last_bench(tmp_path)
    assert result.status is Status.PASS
    assert result.summary == (f"1 GPU(s): gen5 x16; under load (bench {bench.audit}): GPU0 PCIe link "
                              "during the run: gen5 x16 (6 samples)"), result.summary


def test_a_link_that_ran_below_its_trained_generation_under_load_warns(tmp_path: Path) -> None:
    """The public report's card left at Gen2 (the stored median edited: no lent machine's
    link trains down)."""
    def gen2(details: dict) -> None:
        details["links"][0].update(typical="gen2 x16", lowest="gen2 x16")

    result, _ = _pcie_with_last_bench(tmp_path, gen2)
    assert result.status is Status.WARN
    assert "GPU0 ran below the gen5 it trained to while llama-bench ran" in result.summary


@pytest.mark.parametrize("edit", [
    lambda d: d.pop("links"),                            # stored before links were sampled
    lambda d: d.update(links=[{"index": 0, "typical": 5}]),  # hand-edited: not a link
    lambda d: d.update(links="gen5"),
])
def test_a_bench_without_readable_links_adds_nothing(tmp_path: Path, edit) -> None:  # noqa: ANN001
    result, bench = _pcie_with_last_bench(tmp_path, edit)
    assert bench is not None and bench.links == ()
    assert result.status is Status.PASS and result.summary == "1 GPU(s): gen5 x16"
