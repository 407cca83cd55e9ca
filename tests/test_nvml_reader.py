"""The collector reads the GPUs through one NVML session (remote/nvml.py) in nvidia-smi's own
forms (issue 44: four nvidia-smi runs cost a two-GPU host 0.39 CPU-s an audit). Held to
nvidia-smi's outputs captured on the same lent machine (two H200s on NVSwitch) a moment apart:
the same facts, the same verdicts; where the reader cannot answer, nvidia-smi runs instead."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from omni_host.collect.bundle import bundle_from_output
from omni_host.collect.run import deadline_s
from omni_host.evaluate.audit import evaluate_bundle
from omni_host.evaluate.facts import facts_from_bundle
from omni_host.model import CommandResult, Outcome, Status
from omni_host.plan.policy import policy_from_vars
from omni_host.probes.catalog import PROBES, PROBES_BY_ID
from omni_host.probes.parsers.build import parse_gpu_query
from omni_host.probes.parsers.nvidia import parse_nvidia_smi_xml, parse_nvml, parse_topo_matrix
from omni_host.remote import collector

HERE = Path(__file__).parent / "fixtures" / "captures" / "nvml-h200x2"
VOLATILE = ("utilization_pct", "sm_clock_mhz")  # sampled a moment apart: may differ


def text(name: str) -> str:
    return (HERE / name).read_text()


def test_the_readers_forms_parse_to_nvidia_smis_facts() -> None:
    doc = parse_nvml(text("nvml.json"))
    ours, theirs = parse_nvidia_smi_xml(doc["q"]), parse_nvidia_smi_xml(text("nvidia-smi-q-x.xml"))
    assert (ours.driver_version, ours.cuda_version) == ("580.159.04", "13.0")
    assert (theirs.driver_version, theirs.cuda_version) == ("580.159.04", "13.0")
    assert [g.name for g in ours.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    for mine, smi in zip(ours.gpus, theirs.gpus, strict=True):
        assert mine.faults is not None and smi.faults is not None
        faults = {k: v for k, v in dataclasses.asdict(mine.faults).items() if k not in VOLATILE}
        assert faults == {k: v for k, v in dataclasses.asdict(smi.faults).items()
                          if k not in VOLATILE}
        assert dataclasses.replace(mine, faults=None) == dataclasses.replace(smi, faults=None)
        # the fields that move no verdict by chance are all there, not N/A on both sides
        assert (mine.memory_total_mib, mine.pcie_gen_max, mine.faults.bar1_total_mib,
                mine.faults.power_limit_w, mine.faults.app_clocks_mhz) == \
            (143771, 5, 262144, 700.0, (1980, 3201))
    assert parse_gpu_query(doc["query"]) == parse_gpu_query(text("query-gpu.csv"))
    for section, capture in (("topo", "topo-m.txt"), ("p2p", "topo-p2p-r.txt")):
        mine_m, smi_m = parse_topo_matrix(doc[section] or ""), parse_topo_matrix(text(capture))
        assert mine_m.links() == smi_m.links()
        assert mine_m.cpu_affinity == smi_m.cpu_affinity
    assert parse_topo_matrix(doc["topo"] or "").links() == [("GPU0", "GPU1", "NV18")]


def judged(name: str) -> tuple[dict[str, tuple[Status, str]], dict]:
    bundle = bundle_from_output("h200x2", "local", stdout=text(name), stderr="", exit_code=0,
                                duration_s=0.1, started=0.0, python="python3")
    policy = policy_from_vars({"omni_gpus": [{"model": "H200", "vram_gib": 141}] * 2,
                               "omni_swap_size_mib": 0, "omni_build_packages": []}, "t")
    report = evaluate_bundle(bundle, policy)
    return {r.id: (r.status, r.summary) for r in report.results}, bundle.results


def test_the_collector_through_nvml_gives_the_same_verdicts() -> None:
    """The same host's collector output with nvidia-smi (the tree before) and through NVML:
    every check's status and summary alike."""
    before, smi_results = judged("collector-nvidia-smi.out")
    after, nvml_results = judged("collector-nvml.out")
    assert before == after
    assert after["gpu.topology"][0] is Status.PASS and "2 GPU(s) as planned" in after["gpu.topology"][1]
    assert smi_results["gpu.nvidia-smi"].status == "ran" and "gpu.nvml" not in smi_results
    assert nvml_results["gpu.nvml"].status == "ran"
    for probe_id in ("gpu.nvidia-smi", "gpu.query", "gpu.topo", "gpu.p2p"):
        assert (nvml_results[probe_id].status, nvml_results[probe_id].reason) == \
            ("skipped", "not needed: gpu.nvml succeeded")


def nvml_bundle(stdout: str, exit_code: int = 0):
    """The NVML H200 bundle with the reader's output replaced."""
    bundle = bundle_from_output("h200x2", "local", stdout=text("collector-nvml.out"), stderr="",
                                exit_code=0, duration_s=0.1, started=0.0, python="python3")
    reader = bundle.results["gpu.nvml"]
    results = {**bundle.results, "gpu.nvml": dataclasses.replace(reader, stdout=stdout,
                                                                 exit_code=exit_code)}
    return dataclasses.replace(bundle, results=results)


def test_the_evidence_says_the_fields_came_through_nvml() -> None:
    facts = facts_from_bundle(nvml_bundle(text("nvml.json")))
    smi = facts.get("gpu.nvidia-smi")
    assert smi.ok and smi.command == "nvidia-smi -q -x (its fields, read through NVML)"
    assert facts.gpus() is smi


def test_one_gpu_has_no_topology_to_read() -> None:
    doc = json.loads(text("nvml.json"))
    facts = facts_from_bundle(nvml_bundle(json.dumps({**doc, "topo": None, "p2p": None})))
    topo = facts.get("gpu.topo")
    assert (topo.outcome, topo.reason) == (Outcome.UNAVAILABLE, "fewer than two GPUs: no GPU "
                                                                "topology to read (NVML)")
    assert facts.get("gpu.nvidia-smi").ok


@pytest.mark.parametrize("garbage", ["NVML: segfault\x00", json.dumps({"q": 3})])
def test_a_reader_that_answers_garbage_leaves_the_gpus_unparseable_not_absent(garbage: str) -> None:
    facts = facts_from_bundle(nvml_bundle(garbage))
    assert facts.get("gpu.nvml").outcome is Outcome.UNPARSEABLE
    for probe_id in ("gpu.nvidia-smi", "gpu.query", "gpu.topo", "gpu.p2p"):
        got = facts.get(probe_id)
        assert got.outcome is Outcome.UNPARSEABLE, probe_id
        assert got.reason.startswith("the NVML reader's output: NVML reader output")
    policy = policy_from_vars({"omni_gpus": [{"model": "H200", "vram_gib": 141}] * 2}, "t")
    summaries = {r.id: (r.status, r.summary) for r in evaluate_bundle(
        nvml_bundle(garbage), policy).results}
    assert summaries["gpu.topology"][0] is Status.ERROR, summaries["gpu.topology"]
    assert "read through NVML): unparseable output" in summaries["gpu.topology"][1]


def test_a_bundle_from_before_the_reader_is_judged_from_nvidia_smi() -> None:
    bundle = bundle_from_output("h200x2", "local", stdout=text("collector-nvidia-smi.out"),
                                stderr="", exit_code=0, duration_s=0.1, started=0.0)
    facts = facts_from_bundle(bundle)
    assert facts.get("gpu.nvml").reason == "not collected in this bundle"
    assert facts.gpus().command == "nvidia-smi -q -x"


def test_without_nvml_the_reader_exits_4_and_the_collector_runs_nvidia_smi(tmp_path: Path) -> None:
    """This machine has no NVIDIA library: the reader says so (exit 4) and every nvidia-smi
    run it stands in for runs (here: a stand-in printing the H200's own output), side by
    side. The pynvml fallback behind nvidia-smi stays skipped: nvidia-smi answered."""
    reader = PROBES_BY_ID["gpu.nvml"]
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\nsleep 0.5\ncat {HERE / 'nvidia-smi-q-x.xml'}\n")
    fake.chmod(0o755)
    plan = [dict(reader.plan_entry(), requires=None,
                 argv=[sys.executable, *reader.argv[1:]])]
    plan += [{"id": i, "argv": [str(fake)], "timeout_s": 10, "fallback_for": "gpu.nvml"}
             for i in ("gpu.nvidia-smi", "gpu.query", "gpu.topo", "gpu.p2p")]
    plan += [{"id": "gpu.pynvml", "argv": ["false"], "timeout_s": 10,
              "fallback_for": "gpu.nvidia-smi"}]
    records = {r["id"]: r for r in collector.collect(plan)}
    assert (records["gpu.nvml"]["exit_code"], records["gpu.nvml"]["stderr"].split(":")[0]) == \
        (4, "NVML")
    durations = []
    for probe_id in ("gpu.nvidia-smi", "gpu.query", "gpu.topo", "gpu.p2p"):
        assert records[probe_id]["status"] == "ran" and records[probe_id]["exit_code"] == 0
        durations.append(records[probe_id]["duration_s"])
    assert records["gpu.pynvml"]["reason"] == "not needed: gpu.nvidia-smi succeeded"
    assert sum(durations) > 1.9  # four half-second runs...
    assert all(d < 1.5 for d in durations)  # ...side by side, not one after another
    judged_smi = facts_from_bundle(dataclasses.replace(
        nvml_bundle(""), results={i: CommandResult(i, tuple(r["argv"]), r["status"],
                                                   r["exit_code"], r["stdout"], r["stderr"],
                                                   r["duration_s"], r["reason"])
                                  for i, r in records.items()})).gpus()
    assert judged_smi.ok and judged_smi.command == "nvidia-smi -q -x"


def test_a_reader_that_succeeds_skips_its_fallbacks_and_theirs() -> None:
    """The chain nvml -> nvidia-smi -> pynvml: every link recorded once, none run."""
    plan = [{"id": "a", "argv": ["true"], "timeout_s": 5},
            {"id": "b", "argv": ["false"], "timeout_s": 5, "fallback_for": "a"},
            {"id": "c", "argv": ["false"], "timeout_s": 5, "fallback_for": "b"}]
    records = collector.collect(plan)
    assert [(r["id"], r["status"], r["reason"]) for r in records] == [
        ("a", "ran", ""), ("b", "skipped", "not needed: a succeeded"),
        ("c", "skipped", "not needed: a succeeded")]


def test_the_hosts_deadline_covers_the_longest_chain_of_fallbacks() -> None:
    """nvml (30 s) -> nvidia-smi (30 s) -> pynvml (30 s) may each run to its limit: the host's
    deadline is never shorter than that chain, and the fallbacks of one probe run side by side
    (their times are not added)."""
    assert deadline_s(PROBES) >= 90 + 15
    assert deadline_s(PROBES, probe_timeout_s=2) == 3 * 2 + 15


def test_the_audits_of_two_h100s_by_each_tree_agree() -> None:
    """`omni-host audit` of a lent two-H100 machine by the tree before (nvidia-smi) and this
    one (NVML), a moment apart: every check's status and summary the same."""
    folder = HERE.parent / "nvml-h100x2"
    hosts = [json.loads((folder / f"audit-{tree}.json").read_text())["hosts"][0]
             for tree in ("old", "new")]
    old, new = ({r["id"]: (r["status"], r["summary"]) for r in h["results"]} for h in hosts)
    assert len(old) == 36 and old == new
    assert "gpu.nvml" not in hosts[0]["probes"]
    assert hosts[1]["probes"]["gpu.nvml"]["outcome"] == "observed"
    assert hosts[1]["probes"]["gpu.topo"]["outcome"] == "observed"


# A stand-in for the driver's NVML library (the one thing that cannot exist on this machine):
# two GPUs counted, the second lost (NVML_ERROR_GPU_IS_LOST, as after an Xid 79).
LOST_GPU_NVML = """
typedef void *nvmlDevice_t;
static int first;
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 2; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *handle) {
    if (i == 0) { *handle = &first; return 0; }
    return 15;
}
"""


def test_a_gpu_fallen_off_the_bus_sends_the_audit_to_nvidia_smi(tmp_path: Path) -> None:
    """NVML counts two GPUs and gives a handle for one: the reader does not report a one-GPU
    host (nvidia-smi names the lost GPU in its own words); it exits 5, naming the GPU, and
    its fallbacks run."""
    import shutil
    import subprocess

    gcc = shutil.which("gcc")
    assert gcc, "this test builds a stand-in NVML library: apt-get install gcc"
    source = tmp_path / "nvml.c"
    source.write_text(LOST_GPU_NVML)
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(tmp_path / "libnvidia-ml.so.1"),
                    str(source)], check=True)
    reader = PROBES_BY_ID["gpu.nvml"]
    done = subprocess.run([sys.executable, *reader.argv[1:]], capture_output=True, text=True,
                          env={"LD_LIBRARY_PATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          timeout=30)
    assert (done.returncode, done.stdout) == (5, "")
    assert done.stderr == ("NVML: GPU 1 gave no handle (NVML error 15): nvidia-smi reads the "
                           "GPUs instead\n")


# A stand-in NVML answering what the lent H100's nvidia-smi printed for its first GPU (the
# values are read off the capture's own row in the test), one compute process on it.
H100_NVML = """
#include <string.h>
typedef void *nvmlDevice_t;
typedef struct { char legacy[16]; unsigned domain, bus, device, id, subsystem; char busId[32]; }
    pci_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } mem2_t;
typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } proc_t;
static int gpu;
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *h) { *h = &gpu; return 0; }
int nvmlDeviceGetName(nvmlDevice_t h, char *b, unsigned n) { strcpy(b, "%(name)s"); return 0; }
int nvmlDeviceGetUUID(nvmlDevice_t h, char *b, unsigned n) { strcpy(b, "%(uuid)s"); return 0; }
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, pci_t *p) { strcpy(p->busId, "%(bus)s"); return 0; }
int nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t h, unsigned *v) { *v = %(gen)s; return 0; }
int nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t h, unsigned *v) { *v = %(genmax)s; return 0; }
int nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t h, unsigned *v) { *v = %(gpumax)s; return 0; }
int nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t h, unsigned *v) { *v = %(width)s; return 0; }
int nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t h, unsigned *v) { *v = %(widthmax)s; return 0; }
int nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned *v) { *v = %(limit)s; return 0; }
int nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t h, unsigned *v) { *v = %(default)s; return 0; }
int nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned *v) { *v = %(draw)s; return 0; }
int nvmlDeviceGetMaxClockInfo(nvmlDevice_t h, int t, unsigned *v) {
    *v = t == 1 ? %(maxsm)s : %(maxmem)s; return 0; }
int nvmlDeviceGetClockInfo(nvmlDevice_t h, int t, unsigned *v) { *v = t == 1 ? %(sm)s : %(mem)s; return 0; }
int nvmlDeviceGetTemperature(nvmlDevice_t h, int s, unsigned *v) { *v = %(temp)s; return 0; }
int nvmlDeviceGetUtilizationRates(nvmlDevice_t h, unsigned *u) { u[0] = %(util)s; u[1] = 0; return 0; }
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, mem2_t *m) {
    if (m->version != (sizeof(mem2_t) | (2 << 24))) return 2;
    m->total = 85899345920ULL; m->reserved = 567ULL << 20; m->used = %(used)sULL << 20;
    m->free = m->total - m->reserved - m->used; return 0; }
int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *v) { *v = %(mask)s; return 0; }
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *n, proc_t *p) {
    *n = 1; p[0].pid = %(pid)s; p[0].used = %(pidmib)sULL << 20; return 0; }
int nvmlSystemGetProcessName(unsigned pid, char *b, unsigned n) { strcpy(b, "%(pname)s"); return 0; }
"""


def test_the_bench_gate_reads_through_nvml_what_nvidia_smi_printed(tmp_path: Path) -> None:
    """The bench helper's gate reads the GPUs and their compute processes through its NVML
    session, not two nvidia-smi processes (issue 44: each initialises NVML again beside the
    audit's reader). Fed the values the lent H100's nvidia-smi printed, it writes the very row
    and process line nvidia-smi wrote: the same header names, units and hex mask, so a
    baseline read with nvidia-smi compares alike."""
    import shutil
    import subprocess

    gcc = shutil.which("gcc")
    assert gcc, "this test builds a stand-in NVML library: apt-get install gcc"
    captures = HERE.parent
    row = json.loads((captures / "sweep" / "h100x2" / "ab-helper_sweep-1.json").read_text())[
        "context"]["gpus"]["rows"][0]
    apps_csv = (captures / "bench-h100" / "nvidia-smi-query-compute-apps_busy.csv").read_text()
    pid, pname, pmib = (c.strip() for c in apps_csv.splitlines()[1].split(","))

    def first(field: str, scale: float = 1) -> int:
        return round(float(row[field].split()[0]) * scale)

    source = tmp_path / "nvml.c"
    source.write_text(H100_NVML % {
        "name": row["name"], "uuid": row["uuid"], "bus": row["pci.bus_id"],
        "gen": first("pcie.link.gen.current"), "genmax": first("pcie.link.gen.max"),
        "gpumax": first("pcie.link.gen.gpumax"), "width": first("pcie.link.width.current"),
        "widthmax": first("pcie.link.width.max"), "limit": first("power.limit [W]", 1000),
        "default": first("power.default_limit [W]", 1000), "draw": first("power.draw [W]", 1000),
        "maxsm": first("clocks.max.sm [MHz]"), "maxmem": first("clocks.max.memory [MHz]"),
        "sm": first("clocks.current.sm [MHz]"), "mem": first("clocks.current.memory [MHz]"),
        "temp": first("temperature.gpu"), "util": first("utilization.gpu [%]"),
        "used": first("memory.used [MiB]"), "mask": int(row["clocks_event_reasons.active"], 16),
        "pid": pid, "pidmib": pmib.split()[0], "pname": pname})
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(tmp_path / "libnvidia-ml.so.1"),
                    str(source)], check=True)
    code = ("import json\nfrom omni_host.remote import bench as helper\n"
            "session = helper.open_nvml()\n"
            "print(json.dumps([helper.gate_reads(session), session.sample()]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, check=True, env={**os.environ, "LD_LIBRARY_PATH": str(
                              tmp_path), "PATH": "/usr/bin:/bin"})  # no nvidia-smi to fall to
    from omni_host.remote.bench import _csv_rows

    gate, sample = json.loads(done.stdout)
    assert gate == {"gpu": {"rows": [row]}, "apps": _csv_rows(apps_csv)}
    # the run's sampler reads the same session: SAMPLE_FIELDS as nvidia-smi prints them
    # without units (--format=csv,noheader,nounits), the mask and the process as the gate's
    bare = [row[f].split()[0] for f in ("index", "clocks.current.sm [MHz]",
                                        "clocks.current.memory [MHz]", "power.draw [W]",
                                        "temperature.gpu", "utilization.gpu [%]",
                                        "pcie.link.gen.current", "pcie.link.width.current")]
    assert sample == [[bare], [row["clocks_event_reasons.active"]], {pid: pname}]


def test_on_a_lent_h200_the_gate_reads_the_same_both_ways() -> None:
    """The helper's gate on a lent H200, through its NVML session and through nvidia-smi a
    moment apart (gate-h200/README.md): the same rows, field by field, and the same bench
    context from them, so a baseline read with nvidia-smi is judged alike."""
    from omni_host.measure.during import _gpu_context
    from omni_host.probes.parsers.bench_run import BenchRun

    forms = json.loads((HERE.parent / "gate-h200" / "gate-forms.json").read_text())
    smi = forms["smi"]
    assert smi["gpu"]["rows"][0]["name"] == "NVIDIA H200" and smi["apps"] == []
    assert forms["nvml_before"] == smi == forms["nvml_after"]
    typed = (HERE.parent / "gate-h200" / "nvidia-smi-query-gpu.csv").read_text().splitlines()
    header, values = typed[0].split(", "), typed[1].split(", ")
    row = smi["gpu"]["rows"][0]
    assert all(row[field] == value for field, value in zip(header, values, strict=True))

    def context(gate: dict) -> dict:
        run = BenchRun(None, {"gpus": gate["gpu"]}, {"compute_apps": gate["apps"]})
        return _gpu_context(run)

    assert context(forms["nvml_before"]) == context(smi)
    assert context(smi)["gpu.0.power_limit_w"] == 700.0
