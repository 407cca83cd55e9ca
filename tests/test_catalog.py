"""The wider check catalog on real captures: build facts from an H100 (CUDA libraries built
with and without VMM for sm_90 and sm_120), real GGUF files, real containers and networks, this
machine's disks and packages."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, public_capture, run_cli
from helpers import (
    active_swap_mib,
    collected_under,
    gpu_bundle,
    model_helper,
    swap_verdict,
    with_probe,
    write_gguf,
)

from omni_host.collect.bundle import Bundle
from omni_host.evaluate.audit import evaluate_bundle
from omni_host.evaluate.checks.docker import missing_tool
from omni_host.model import CommandResult, Status
from omni_host.plan.policy import policy_from_vars
from omni_host.probes.catalog import DYNAMIC
from omni_host.probes.parsers import build, host

DYNAMIC_IDS = frozenset(p.id for p in DYNAMIC)

BUILD = FIXTURES / "captures" / "build-h100"


def capture(name: str) -> str:
    return (BUILD / name).read_text()


def verdict(bundle: Bundle, check_id: str, **policy_vars) -> object:
    policy = policy_from_vars(policy_vars, "test policy")
    bundle = collected_under(bundle, policy)
    return next(r for r in evaluate_bundle(bundle, policy).results if r.id == check_id)


def looped(files: dict[str, str]) -> str:
    """The probe's per-file loop framing ("== <path>") around each real capture."""
    return "".join(f"== {path}\n{text}" for path, text in files.items())


# --- parsers on the captures ------------------------------------------------------------------

def test_gpu_query_capture() -> None:
    (gpu,) = build.parse_gpu_query(capture("nvidia-smi-query-health.csv"))
    assert (gpu.name, gpu.compute_cap, gpu.pcie_width_current, gpu.ecc_uncorrected) == \
        ("NVIDIA H100 80GB HBM3", (9, 0), 16, 0)
    assert gpu.persistence_mode is True


@pytest.mark.parametrize(("text", "version"), [
    (lambda: capture("nvcc-version.txt"), (13, 0)),
    (lambda: public_capture("cuda/nvcc-version_13.2_wsl2-rtx5090.txt"), (13, 2)),
    (lambda: (FIXTURES / "captures" / "nvcc-version_13.0_h200.txt").read_text(), (13, 0)),
])
def test_nvcc_captures(text, version) -> None:
    assert build.parse_nvcc_version(text()).version == version


@pytest.mark.parametrize(("lib", "archs", "vmm"), [
    ("libvmm_sm90", ("sm_90",), True), ("libnovmm_sm90", ("sm_90",), False),
    ("libvmm_sm120", ("sm_120",), True), ("libnovmm_sm120", ("sm_120",), False),
])
def test_cuobjdump_and_readelf_captures(lib: str, archs: tuple, vmm: bool) -> None:
    path = f"/opt/llama.cpp/build/bin/{lib}.so"
    elf = build.parse_cuobjdump(looped({path: capture(f"cuobjdump-list-elf_{lib}.txt")}))[path]
    dyn = build.parse_readelf(looped({path: capture(f"readelf-d_{lib}.txt") +
                                      capture(f"readelf-dyn-syms_{lib}.txt")}))[path]
    assert elf.archs == archs and elf.error is None
    assert dyn.vmm is vmm


def test_cuobjdump_missing_file_capture() -> None:
    facts = build.parse_cuobjdump(looped({"/nope": capture("cuobjdump-missing-file.txt")}))
    assert "Could not open input file" in (facts["/nope"].error or "")


# --- cuda.toolkit and llamacpp.build on the H100 bundle -------------------------------------

H100_QUERY = capture("nvidia-smi-query-health.csv")
# A Blackwell stand-in: the real H100 line with compute capability 12.0 (no sm_120 GPU is lent).
CC12_QUERY = H100_QUERY.replace("NVIDIA H100 80GB HBM3, 9.0", "NVIDIA RTX PRO 6000 Blackwell, 12.0")


def test_cuda_toolkit_on_hopper_passes() -> None:
    bundle = with_probe(gpu_bundle("h100-x1"), "gpu.query", H100_QUERY)
    bundle = with_probe(bundle, "cuda.nvcc", capture("nvcc-version.txt"))
    result = verdict(bundle, "cuda.toolkit")
    assert result.status is Status.PASS and "no GPU of compute capability 12.x" in result.summary


@pytest.mark.parametrize(("nvcc", "status"), [
    (lambda: public_capture("cuda/nvcc-version_13.2_wsl2-rtx5090.txt"), Status.PASS),
    (lambda: capture("nvcc-version.txt").replace("release 13.0, V13.0.88", "release 12.1, V12.1.105"),
     Status.FAIL),
])
def test_cuda_toolkit_for_compute_capability_12(nvcc, status) -> None:
    bundle = with_probe(gpu_bundle("h100-x1"), "gpu.query", CC12_QUERY)
    bundle = with_probe(bundle, "cuda.nvcc", nvcc())
    result = verdict(bundle, "cuda.toolkit")
    assert result.status is status, result.summary
    if status is Status.FAIL:
        assert "need CUDA >= 12.8 but the toolkit is CUDA 12.1.105" in result.summary


@pytest.mark.parametrize(("lib", "status", "words"), [
    ("libvmm_sm90", Status.PASS, "carry sm_90 and CUDA VMM"),
    ("libnovmm_sm90", Status.FAIL, "built with CUDA VMM off"),
    ("libvmm_sm120", Status.FAIL, "lacks sm_90 code"),
])
def test_llamacpp_build_on_the_h100(lib: str, status: Status, words: str) -> None:
    path = f"/opt/llama.cpp/build/bin/{lib}.so"
    bundle = with_probe(gpu_bundle("h100-x1"), "gpu.query", H100_QUERY)
    bundle = with_probe(bundle, "llamacpp.cuobjdump",
                        looped({path: capture(f"cuobjdump-list-elf_{lib}.txt")}))
    bundle = with_probe(bundle, "llamacpp.readelf", looped(
        {path: capture(f"readelf-d_{lib}.txt") + capture(f"readelf-dyn-syms_{lib}.txt")}))
    result = verdict(bundle, "llamacpp.build", omni_llamacpp_binaries=[path])
    assert result.status is status, result.summary
    assert words in result.summary


def test_llamacpp_build_without_cuobjdump_is_skipped() -> None:
    bundle = gpu_bundle("h100-x1")
    results = dict(bundle.results)
    results["llamacpp.cuobjdump"] = CommandResult("llamacpp.cuobjdump", ("sh",), "ran", 127, "",
                                                  "", 0.0)
    result = verdict(dataclasses.replace(bundle, results=results), "llamacpp.build",
                     omni_llamacpp_binaries=["/opt/x.so"])
    assert result.status is Status.SKIP and "not installed" in result.summary


# --- gpu.health and cpu.avx512 ------------------------------------------------------------------

@pytest.mark.parametrize(("query", "status", "words"), [
    (H100_QUERY, Status.PASS, "persistence on, full PCIe width"),
    (H100_QUERY.replace("16, 16, Enabled, 0", "8, 16, Enabled, 0"), Status.WARN, "PCIe x8 of x16"),
    (H100_QUERY.replace("Enabled, 0", "Enabled, 3"), Status.FAIL, "3 uncorrectable ECC"),
])
def test_gpu_health(query: str, status: Status, words: str) -> None:
    bundle = with_probe(gpu_bundle("h100-x1"), "gpu.query", query)
    bundle = with_probe(bundle, "gpu.xid", "")
    result = verdict(bundle, "gpu.health")
    assert result.status is status and words in result.summary


def test_xid_lines_of_a_real_kernel_log_without_xid() -> None:
    assert host.parse_xid(capture("dmesg-nvrm.txt")).events == ()


def test_cpu_avx512_on_zen5_capture() -> None:
    bundle = with_probe(gpu_bundle("h100-x1"), "cpu.cpuinfo",
                        public_capture("cpu/lscpu_ryzen9-9950x_zen5-fam26_pytorch-collect-env.txt"))
    result = verdict(bundle, "cpu.avx512")
    assert result.status is Status.PASS and "GLIBC_TUNABLES" in result.summary


# --- models: real GGUF files written with the gguf library ----------------------------------

@pytest.fixture(scope="module")
def llama_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compiled library carrying architecture names as C strings, as libllama.so does."""
    work = tmp_path_factory.mktemp("llama")
    src = work / "archs.c"
    src.write_text('const char *LLM_ARCH_NAMES[] = {"llama", "qwen2", "deepseek2", 0};\n'
                   "int n_archs(void) { return 3; }\n")
    lib = work / "libllama.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], check=True)
    return lib


def run_helper(*args: str) -> host.ModelFacts:
    return host.parse_models(model_helper(*args))


def model_bundle(tmp_path: Path, *args: str) -> Bundle:
    return with_probe(gpu_bundle("h100-x1"), "model.files", model_helper(*args))


def test_gguf_header_and_split_sizes(tmp_path: Path, llama_binary: Path) -> None:
    parts = [write_gguf(tmp_path / f"DeepSeek-Q4-0000{i}-of-00002.gguf", "deepseek2") for i in (1, 2)]
    facts = run_helper("--models", str(parts[0]), "--llama", str(llama_binary))
    (model,) = facts.models
    assert model.architecture == "deepseek2" and model.files == 2
    assert model.size_bytes == sum(p.stat().st_size for p in parts)
    assert facts.binaries[str(llama_binary)] == {"deepseek2": True}


@pytest.mark.parametrize(("arch", "status"), [("deepseek2", Status.PASS), ("deepseek3_2", Status.FAIL)])
def test_model_architecture(tmp_path: Path, llama_binary: Path, arch: str, status: Status) -> None:
    model = write_gguf(tmp_path / "model.gguf", arch)
    bundle = model_bundle(tmp_path, "--models", str(model), "--llama", str(llama_binary))
    result = verdict(bundle, "model.architecture", omni_models=[{"path": str(model)}],
                     omni_llamacpp_binaries=[str(llama_binary)])
    assert result.status is status, result.summary
    if status is Status.FAIL:
        assert "architecture deepseek3_2 is not supported by the installed llama.cpp" in result.summary


@pytest.mark.parametrize(("damage", "words"), [
    (lambda p: p.write_bytes(p.read_bytes()[:30]), "truncated GGUF header"),
    (lambda p: p.write_bytes(b"GGML" + p.read_bytes()[4:]), "not a GGUF file (bad magic)"),
    (lambda p: p.unlink(), "No such file or directory"),
])
def test_bad_model_files_are_named(tmp_path: Path, llama_binary: Path, damage, words: str) -> None:
    model = write_gguf(tmp_path / "model.gguf", "deepseek2")
    damage(model)
    bundle = model_bundle(tmp_path, "--models", str(model), "--llama", str(llama_binary))
    for check_id in ("model.architecture", "model.fit"):
        result = verdict(bundle, check_id, omni_models=[{"path": str(model)}],
                         omni_llamacpp_binaries=[str(llama_binary)])
        assert result.status is Status.FAIL and words in result.summary, (check_id, result.summary)


@pytest.mark.parametrize(("loader", "status"), [("full", Status.FAIL), ("gguf", Status.WARN)])
def test_model_bigger_than_ram_and_swap(tmp_path: Path, loader: str, status: Status) -> None:
    model = write_gguf(tmp_path / "huge.gguf", "deepseek2")
    with open(model, "r+b") as fh:  # sparse: 642 GB on paper, nothing on disk
        fh.truncate(642 * 10**9)
    bundle = model_bundle(tmp_path, "--models", str(model))
    result = verdict(bundle, "model.fit", omni_models=[{"path": str(model), "loader": loader}])
    assert result.status is status, result.summary
    assert "598 GiB, more than RAM+swap" in result.summary  # 642 GB = 598 GiB
    if loader == "full":
        assert "(F-022)" in result.summary


def test_model_that_fits(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "small.gguf", "llama")
    bundle = model_bundle(tmp_path, "--models", str(model))
    result = verdict(bundle, "model.fit", omni_models=[{"path": str(model), "loader": "full"}])
    assert result.status is Status.PASS


# --- disks and packages on this machine, through the real CLI ---------------------------------

def local_audit(tmp_path: Path, **group_vars) -> dict:
    import yaml

    inv = tmp_path / "inv"
    inv.mkdir(exist_ok=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"box": {
        "ansible_connection": "local"}}, "vars": group_vars}}))
    result = run_cli("audit", "-i", str(inv), "--format", "json", "--no-store")
    return {r["id"]: r for r in json.loads(result.stdout)["hosts"][0]["results"]}


def test_disk_free_on_this_machine(tmp_path: Path) -> None:
    results = local_audit(tmp_path, omni_disk_free=[
        {"path": "/", "min_free_gib": 1}, {"path": "/var", "min_free_gib": 10**6},
        {"path": "/no/such/dir", "min_free_gib": 1}])
    r = results["disk.free"]
    assert r["status"] == "fail"
    assert "/var: " in r["summary"] and "policy wants 1,000,000 GiB" in r["summary"]
    assert "/no/such/dir: No such file or directory" in r["summary"]
    assert local_audit(tmp_path, omni_disk_free=[{"path": "/", "min_free_gib": 1}])[
        "disk.free"]["status"] == "pass"


def test_build_packages_on_this_machine(tmp_path: Path) -> None:
    results = local_audit(tmp_path, omni_build_packages=["numactl", "omni-host-no-such-package"])
    assert results["packages.build-deps"]["status"] == "fail"
    assert results["packages.build-deps"]["summary"] == "missing: omni-host-no-such-package"
    assert results["packages.build-deps"]["remediation"]["playbook"] == "packages.yml"


# --- docker: real containers and networks -----------------------------------------------------

@pytest.fixture
def stack(docker_image: str):
    names = {"net": "omni-test-brain", "gpu": "omni-test-llm", "ok": "omni-test-llm-ok",
             "hc": "omni-test-hc"}

    def docker(*args: str) -> None:
        subprocess.run(["docker", *args], check=True, capture_output=True)

    for c in ("gpu", "ok", "hc"):
        subprocess.run(["docker", "rm", "-f", names[c]], capture_output=True, check=False)
    subprocess.run(["docker", "network", "rm", names["net"]], capture_output=True, check=False)
    docker("network", "create", "--internal", names["net"])
    sleep = ["sh", "-c", "sleep 300"]
    docker("run", "-d", "--name", names["gpu"], "-e", "NVIDIA_VISIBLE_DEVICES=all", docker_image,
           *sleep)
    docker("run", "-d", "--name", names["ok"], "-e", "NVIDIA_VISIBLE_DEVICES=all", "--network",
           names["net"], "--restart", "unless-stopped", docker_image, *sleep)
    docker("run", "-d", "--name", names["hc"], "--health-cmd", "curl -f http://localhost:8080/",
           "--health-interval", "1s", "--health-retries", "1", docker_image, *sleep)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", names["hc"]],
                               capture_output=True, text=True, check=False).stdout.strip()
        if state == "unhealthy":
            break
        time.sleep(0.5)
    yield names
    for c in ("gpu", "ok", "hc"):
        subprocess.run(["docker", "rm", "-f", names[c]], capture_output=True, check=False)
    subprocess.run(["docker", "network", "rm", names["net"]], capture_output=True, check=False)


def test_docker_checks_on_real_containers(tmp_path: Path, stack: dict) -> None:
    # one omni_* value: a host with none is not judged on the role's defaults (issue 62), and
    # these checks are judged on them (omni_internal_network, omni_restart_policy)
    results = local_audit(tmp_path, omni_build_packages=[])
    iso, restart = results["docker.isolation"], results["docker.restart-policy"]
    assert iso["status"] == "fail" and f"{stack['gpu']} on non-internal network(s) bridge" in \
        iso["summary"]
    assert stack["ok"] not in iso["summary"]
    assert restart["status"] == "fail" and stack["gpu"] in restart["summary"]
    assert stack["ok"] not in restart["summary"]
    hc = results["docker.healthchecks"]
    assert hc["status"] == "fail"
    assert f"{stack['hc']}: healthcheck (CMD-SHELL) calls curl, which the image lacks" in hc["summary"]
    assert results["docker.gpu-runtime"]["status"] == "pass"
    only_ok = local_audit(tmp_path, omni_inference_containers=[stack["ok"]])
    assert only_ok["docker.isolation"]["status"] == "pass"
    assert only_ok["docker.restart-policy"]["status"] == "pass"


def test_gpu_container_under_gvisor_fails() -> None:
    # runsc (gVisor) cannot be installed here: the real inspect capture with its runtime swapped.
    docs = json.loads((FIXTURES / "captures" / "docker-inspect_vm-busybox-3containers_redacted.json")
                      .read_text())
    docs[0]["HostConfig"]["Runtime"] = "runsc"
    docs[0]["Config"]["Env"].append("NVIDIA_VISIBLE_DEVICES=all")
    bundle = with_probe(gpu_bundle("h100-x1"), "docker.containers", json.dumps(docs))
    result = verdict(bundle, "docker.gpu-runtime")
    assert result.status is Status.FAIL and "under gVisor (runsc)" in result.summary


def test_inspect_lacking_fields_does_not_crash() -> None:
    bundle = with_probe(gpu_bundle("h100-x1"), "docker.containers", json.dumps([{"Id": "abc"}]))
    policy = policy_from_vars({}, "t")
    statuses = {r.id: r.status for r in evaluate_bundle(bundle, policy).results
                if r.id.startswith("docker.")}
    assert Status.ERROR not in statuses.values()


@pytest.mark.parametrize(("output", "tool"), [
    ("/bin/sh: 1: curl: not found\n", "curl"),
    ('OCI runtime exec failed: exec failed: unable to start container process: exec: "curl": '
     'executable file not found in $PATH: unknown', "curl"),
    ('exec: "/bin/sh": stat /bin/sh: no such file or directory', "/bin/sh"),
    ("HTTP/1.1 200 OK", None),
])
def test_missing_tool_in_healthcheck_output(output: str, tool: str | None) -> None:
    assert missing_tool(output) == tool


# --- checks list / explain / doc, and init ------------------------------------------------------

def test_checks_explain_by_lesson_and_id() -> None:
    by_lesson = run_cli("checks", "explain", "F-010")
    assert by_lesson.code == 0
    assert by_lesson.stdout.startswith("containers.glibc-tunables: Zen 5 containers mask all five")
    for part in ("Why (the lesson):", "How it is decided:", "Fix: playbook glibc-tunables.yml"):
        assert part in by_lesson.stdout
    fit = run_cli("checks", "explain", "model.fit")
    assert "F-020, F-022" in fit.stdout and "RAM+swap" in fit.stdout
    unknown = run_cli("checks", "explain", "swap.cap")
    assert unknown.code == 2 and "did you mean swap.capacity?" in unknown.stderr


def test_checks_list_shows_every_catalog_entry_implemented() -> None:
    import yaml

    listed = run_cli("checks", "list").stdout.splitlines()
    catalog = yaml.safe_load((FIXTURES.parent.parent / "checks" / "catalog.yaml").read_text())
    assert [line.split()[0] for line in listed] == list(catalog)
    assert not any("not implemented" in line for line in listed)


def test_docs_checks_md_matches_the_catalog() -> None:
    doc = (FIXTURES.parent.parent / "docs" / "checks.md").read_text()
    assert doc == run_cli("checks", "doc").stdout, "run: omni-host checks doc > docs/checks.md"


def test_init_round_trip(sshd, tmp_path: Path) -> None:
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}})
    common = ["--known-hosts", str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none")]
    first = run_cli("init", "-i", str(inv), "loop", *common)
    assert first.code == 0, first.stderr
    recorded = (inv / "host_vars" / "loop.yml").read_text()
    # what this machine has now (none here, some on a user's machine), as init reads it
    assert "omni_numa_nps: 1" in recorded
    assert f"omni_swap_size_mib: {active_swap_mib()}" in recorded
    assert "+omni_numa_nps: 1" in first.stdout  # the diff was shown
    audit = run_cli("audit", "-i", str(inv), "loop", "--format", "json", "--no-store", *common)
    results = {r["id"]: r["status"] for r in json.loads(audit.stdout)["hosts"][0]["results"]}
    assert results["numa.nps1"] == "pass" and results["swap.capacity"] == swap_verdict()
    (inv / "host_vars" / "loop.yml").write_text(recorded.replace("omni_numa_nps: 1",
                                                                 "omni_numa_nps: 4"))
    refused = run_cli("init", "-i", str(inv), "loop", *common)
    assert refused.code == 1 and "not overwritten" in refused.stderr
    assert "-omni_numa_nps: 4" in refused.stdout and "+omni_numa_nps: 1" in refused.stdout
    forced = run_cli("init", "-i", str(inv), "loop", "--force", *common)
    assert forced.code == 0 and "omni_numa_nps: 1" in (inv / "host_vars" / "loop.yml").read_text()


def test_init_unreachable_host(sshd, tmp_path: Path) -> None:
    from conftest import free_port

    inv = sshd.inventory(tmp_path / "inv", {"gone": {"ansible_port": free_port()}})
    result = run_cli("init", "-i", str(inv), "gone", "--known-hosts", str(sshd.known_hosts))
    assert result.code == 3 and "gone: unreachable:" in result.stderr
    assert not (inv / "host_vars").exists()


@pytest.mark.parametrize("machine", ["h100-x1", "h200-x2"])
def test_init_of_the_gpu_machines_then_audit_passes_what_it_recorded(machine: str) -> None:
    from omni_host.evaluate.facts import facts_from_bundle
    from omni_host.evaluate.observed import observed_vars

    bundle = gpu_bundle(machine)
    recorded = observed_vars(facts_from_bundle(bundle))
    assert recorded["omni_gpu_driver_min"] == "580.159.04" and recorded["omni_numa_nps"] == 1
    results = {r.id: r.status for r in
               evaluate_bundle(bundle, policy_from_vars(recorded, machine)).results}
    for check_id in ("numa.nps1", "gpu.driver-version", "gpu.topology", "swap.capacity"):
        assert results[check_id] is Status.PASS, check_id


FULL = FIXTURES / "bundles-full"


@pytest.mark.parametrize(("machine", "gpus"), [("h100-x1-full", 1), ("h200-x2-full", 2)])
def test_catalog_verdicts_collected_on_the_gpu_machines(machine: str, gpus: int) -> None:
    """Bundles collected by the real collector on the lent machines, with a policy pointing at
    a CUDA library (VMM on) built there for the machine's own architecture."""
    from omni_host.collect.bundle import read_bundles

    (bundle,) = read_bundles(FULL / f"{machine}.tar.gz")
    variables = json.loads((FULL / f"{machine}.policy.json").read_text())
    results = {r.id: r for r in evaluate_bundle(bundle, policy_from_vars(variables, machine)).results}
    expected = {"cuda.toolkit": Status.PASS, "llamacpp.build": Status.PASS,
                "gpu.health": Status.PASS, "disk.free": Status.PASS,
                "packages.build-deps": Status.PASS, "cpu.avx512": Status.PASS,
                "docker.gpu-runtime": Status.SKIP}  # no docker on those machines
    for check_id, status in expected.items():
        assert results[check_id].status is status, (check_id, results[check_id].summary)
    assert "carry sm_90 and CUDA VMM" in results["llamacpp.build"].summary
    assert f"{gpus} GPU(s): persistence on" in results["gpu.health"].summary
    assert "not installed" in results["docker.gpu-runtime"].summary


def test_policy_probes_over_ssh_and_from_the_bundle(sshd, tmp_path: Path, llama_binary: Path) -> None:
    """Paths and packages from the inventory reach the host as argv over SSH (a path with a
    space and a quote included), and the bundle re-audits to the same verdicts."""
    odd = tmp_path / "models dir 'q'"
    odd.mkdir()
    model = write_gguf(odd / "m.gguf", "deepseek2")
    inv = sshd.inventory(tmp_path / "inv", {"loop": {}}, group_vars={
        "omni_models": [{"path": str(model), "loader": "full"}],
        "omni_llamacpp_binaries": [str(llama_binary)],
        "omni_disk_free": [{"path": str(odd), "min_free_gib": 1}],
        "omni_build_packages": ["numactl"]})
    common = ["--known-hosts", str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none")]
    live = run_cli("audit", "-i", str(inv), "--format", "json", "--no-store", *common)
    results = {r["id"]: r for r in json.loads(live.stdout)["hosts"][0]["results"]}
    for check_id in ("model.fit", "model.architecture", "disk.free", "packages.build-deps"):
        assert results[check_id]["status"] == "pass", (check_id, results[check_id]["summary"])
    # this machine kind ships nvcc without cuobjdump: llamacpp.build is skipped with that reason
    assert results["llamacpp.build"]["status"] == "skip"
    out = tmp_path / "b.tar.gz"
    assert run_cli("collect", "-i", str(inv), "--out", str(out), *common).code == 0
    offline = run_cli("audit", "--bundle", str(out), "-i", str(inv), "--format", "json")
    again = {r["id"]: r["status"] for r in json.loads(offline.stdout)["hosts"][0]["results"]}
    assert again == {k: v["status"] for k, v in results.items()}


def test_gpu_health_falls_back_to_nvidia_smi_xml() -> None:
    # The first H200 bundle predates the --query-gpu probe: health comes from -q -x.
    result = verdict(gpu_bundle("h200-x2"), "gpu.health")
    assert result.status is Status.PASS, result.summary
    assert result.evidence[0].probe == "gpu.nvidia-smi"
    # the H200s' XML reports <dram_uncorrectable>0</dram_uncorrectable> (and SRAM 0) per GPU
    assert "2 GPU(s): persistence on, full PCIe width, no uncorrectable ECC error" in result.summary
    # this bundle has no dmesg probe: gpu.xid says so, never "no Xid"
    xid = verdict(gpu_bundle("h200-x2"), "gpu.xid")
    assert xid.status is Status.SKIP
    assert xid.summary == "not evaluated: dmesg | grep 'NVRM: Xid': not collected in this bundle"


@pytest.mark.parametrize(("capture", "ecc"), [
    ("nvidia-smi/telegraf_rtx-pro-6000-maxq-blackwell_590.44.01_q-x.xml", [None]),  # all N/A
    ("nvidia-smi/telegraf_dual-rtx-a5000_590.44.01_q-x.xml", [None, None]),
])
def test_ecc_from_xml_is_unknown_where_the_driver_says_na(capture, ecc) -> None:
    from omni_host.probes.parsers import nvidia

    inv = nvidia.parse_nvidia_smi_xml(public_capture(capture))
    assert [g.ecc_uncorrected for g in inv.gpus] == ecc


def test_docs_inventory_md_table_is_generated_from_the_spec() -> None:
    doc = (FIXTURES.parent.parent / "docs" / "inventory.md").read_text()
    start = doc.index("<!-- generated by omni-host checks vars: do not edit by hand -->\n")
    end = doc.index("<!-- end of generated table -->")
    table = doc[start:end].split("\n", 1)[1]
    assert table == run_cli("checks", "vars").stdout, "paste: omni-host checks vars"


def test_init_records_what_it_saw_so_the_next_audit_passes(tmp_path: Path) -> None:
    """This machine, with no omni_* variable at all (the role's default build packages
    apply): init records the ones installed, and the next audit passes the checks it
    recorded, whatever this machine has installed."""
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    box:\n      ansible_connection: local\n")
    assert run_cli("init", "-i", str(inv), "box").code == 0
    import yaml

    recorded = yaml.safe_load((inv / "host_vars" / "box.yml").read_text())
    assert set(recorded["omni_build_packages"]) <= {"numactl", "pkg-config", "libhwloc-dev"}
    assert "numactl" in recorded["omni_build_packages"]  # tests/setup.sh installs it
    audit = run_cli("audit", "-i", str(inv), "box", "--format", "json", "--no-store")
    results = {r["id"]: r["status"] for r in json.loads(audit.stdout)["hosts"][0]["results"]}
    assert results["packages.build-deps"] == "pass"
    assert results["swap.capacity"] == swap_verdict() and results["numa.nps1"] == "pass"


def test_init_records_a_swap_file_at_its_size_in_mib() -> None:
    """/proc/swaps shows a 64 MiB file as 65532 KiB (the header page is not counted)."""
    from omni_host.evaluate.facts import facts_from_bundle
    from omni_host.evaluate.observed import observed_vars

    swaps = ("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
             "/swapfile                               file\t\t65532\t\t0\t\t-2\n")
    bundle = with_probe(gpu_bundle("h100-x1"), "mem.swaps", swaps)
    assert observed_vars(facts_from_bundle(bundle))["omni_swap_size_mib"] == 64


def test_every_catalog_entry_has_one_registered_check(monkeypatch) -> None:
    """Issue 45: every catalog id has a registered function, those of a run's measurement (a
    bench, an A/B, a sweep, a watch, a plan and its proof) included, each said with its
    command; an id without one is an error when the registry loads, never a silent skip."""
    from omni_host.evaluate import checks
    from omni_host.evaluate.meta import ASKED_BY, catalog

    fns = checks.registry()
    assert set(fns) == set(catalog())
    assert set(ASKED_BY) == {"perf.tokens-per-s", "perf.knob", "perf.split-sweep",
                             "serve.stability", "perf.placement", "perf.placement-proof",
                             "perf.why"}
    fake = {**catalog(), "x.unjudged": catalog()["numa.nps1"]}
    monkeypatch.setattr(checks, "catalog", lambda: fake)
    with pytest.raises(RuntimeError, match="names x.unjudged but no check is registered"):
        checks.registry()
