"""The placement plan's arithmetic (issue 46), on real GGUF files written with the gguf package
and read by the host's own helper code (tests/test_ceiling.py writes them): the memory each
device needs under a placement (weights from the shapes, the KV cache from the attention's
rows at the served context, compute buffer and margin), a candidate that does not fit refused
with the arithmetic, the candidates a host gets and their order, the spellings of each
program, and the proof's rank correlation. The GPUs are stated, not found: this machine has
none (the lent H100's plans are in tests/fixtures/captures/plan-h100/)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import kept
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ceiling import ATTN, EMBD, EXPERT_FFN, EXPERTS, LAYERS, OUTPUT, ROUTER, ROW, USED, _read, _write

from omni_host.measure.candidates import candidates
from omni_host.measure.ceiling import CPU
from omni_host.measure.placement import (
    CTX_PAD,
    MARGIN,
    MIB,
    Assessed,
    Candidate,
    Gpu,
    Host,
    Workload,
    assess,
    candidate_of,
    engine_compute,
    engine_seen,
    from_args,
    without_placement,
)
from omni_host.measure.plan import spearman
from omni_host.probes.parsers.bench_run import TensorMap

KV_ROW = 2 * EMBD * 2  # one cell: k and v rows (EMBD each), F16
LAYER_MOE = ATTN + ROUTER + EXPERT_FFN
COMPUTE = 100 * MIB


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> TensorMap:
    return _read(_write(tmp_path_factory.mktemp("g") / "moe.gguf", EXPERTS))


TWO_GPU = Path(__file__).parent / "fixtures" / "captures" / "plan-2gpu"


def _host(*free: int, cpu_gbs: float | None = 50e9, cores: int | None = 8) -> Host:
    return Host(tuple(Gpu(f + (1 << 30), f, 1e12) for f in free), cpu_gbs, "stated", 0.8, cores,
                {f"GPU{i}": COMPUTE for i in range(len(free))})


def _assessed(found: Assessed | str) -> Assessed:
    assert isinstance(found, Assessed), found
    return found


def test_memory_per_device_is_the_shapes_arithmetic(moe: TensorMap) -> None:
    """-ngl 99 -ncmoe 2: every layer on the GPU, the first two layers' experts on the CPU; the
    KV cache of every layer on the GPU at the context padded to 256 cells."""
    work = Workload(ctx=1000)
    found = _assessed(assess(moe, Candidate("c", "", "plan", ncmoe=2), _host(1 << 34), work))
    cells = CTX_PAD * 4  # 1000 -> 1024
    assert found.need[CPU] == {"weights": VOCAB_BYTES + 2 * EXPERT_FFN, "kv": 0, "compute": 0,
                               "margin": 0}
    assert found.need["GPU0"] == {"weights": LAYERS * LAYER_MOE - 2 * EXPERT_FFN + OUTPUT,
                                  "kv": LAYERS * KV_ROW * cells, "compute": COMPUTE,
                                  "margin": MARGIN}
    assert found.fits


VOCAB_BYTES = 1000 * EMBD * 2  # token_embd: on the CPU always


def test_a_placement_that_does_not_fit_says_by_how_much_and_where(moe: TensorMap) -> None:
    work = Workload(ctx=4096)
    need = LAYERS * LAYER_MOE + OUTPUT + LAYERS * KV_ROW * 4096 + COMPUTE + MARGIN
    found = _assessed(assess(moe, Candidate("c", "", "plan"), _host(need - 12345), work))
    assert found.short == {"GPU0": 12345} and not found.fits
    exact = _assessed(assess(moe, Candidate("c", "", "plan"), _host(need), work))
    assert exact.fits


def test_prediction_is_the_bytes_a_token_reads_at_each_rate(moe: TensorMap) -> None:
    """Experts of every layer on the CPU: the CPU reads the used experts' share and the
    embedding row; the GPU the rest, at its bandwidth times the host's efficiency (0.8)."""
    work = Workload(ctx=256, depth=100)
    host = _host(1 << 34)
    found = _assessed(assess(moe, Candidate("c", "", "plan", ncmoe=LAYERS), host, work))
    cpu = ROW + LAYERS * EXPERT_FFN * USED / EXPERTS
    gpu = LAYERS * (ATTN + ROUTER) + OUTPUT + LAYERS * KV_ROW * 100
    assert found.read == pytest.approx({CPU: cpu, "GPU0": gpu})
    assert found.tg == pytest.approx(1 / (cpu / 50e9 + gpu / (1e12 * 0.8)))
    assert found.limit.startswith("CPU memory")


def test_without_the_cpus_rate_there_is_no_prediction(moe: TensorMap) -> None:
    """Unless what the CPU reads is negligible (under 1 MiB a token: here every expert on
    the CPU, 0.2 MiB): then the GPU's time alone is the prediction, as for the ceiling."""
    big = Workload(ctx=256, depth=200_000)  # the KV cache read at that depth: 100 MiB a token
    found = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0),
                             _host(1 << 34, cpu_gbs=None), big))
    assert found.tg is None and "no read rate known for CPU" in found.limit
    small = _assessed(assess(moe, Candidate("c", "", "plan", ncmoe=LAYERS),
                             _host(1 << 34, cpu_gbs=None), Workload(ctx=256)))
    assert small.tg is not None and CPU not in small.read


def test_a_cpu_rate_predicts_only_at_the_threads_it_was_measured_at(moe: TensorMap) -> None:
    """Issue 63: a stored -t 1 run's CPU rate predicted -t 2 args 3.5x off (88.56 predicted,
    25.65 measured). At the threads it was measured at it predicts; at others the plan says
    it has no rate for them and, where the memory channels were read, predicts at their
    ceiling, said as an upper bound."""
    work = Workload(ctx=256, depth=200_000)  # every layer on the CPU: 100 MiB of KV a token
    measured = replace(_host(1 << 34), cpu_threads=1)
    at_one = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0, threads=1),
                              measured, work))
    assert at_one.tg is not None and at_one.limit == "CPU memory (" + \
        at_one.limit.split("(", 1)[1]  # no caveat
    at_two = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0, threads=2),
                              measured, work))
    assert at_two.tg is None
    assert "no stored bench measured the CPU at -t 2 (the rate known is at -t 1)" in at_two.limit
    default = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0), measured, work))
    assert default.tg is None and "at -t 8" in default.limit  # llama.cpp's default: the cores
    ceiling = replace(measured, cpu_ceiling_gbs=200e9)
    bound = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0, threads=2),
                             ceiling, work))
    assert bound.tg is not None and bound.tg > at_one.tg  # 200 GB/s against 50 measured
    assert bound.limit.endswith("the CPU at its channels' ceiling: no stored bench measured the "
                                "CPU at -t 2 (the rate known is at -t 1): an upper bound")


def test_candidates_rank_the_fitting_fastest_first(moe: TensorMap) -> None:
    """A GPU that holds the dense part and two layers' experts: the plan offers whole layers,
    every expert on the CPU, and the fewest -ncmoe that fit with steps toward all; the current
    args (everything on the GPU) do not fit and come last with their shortfall."""
    work = Workload(ctx=256)
    dense_part = LAYERS * (ATTN + ROUTER) + OUTPUT + LAYERS * KV_ROW * 256 + COMPUTE + MARGIN
    host = _host(dense_part + 2 * EXPERT_FFN + 1000)
    current = Candidate("current", "the current args", "current")
    ranked = candidates(moe, host, work, current, None)
    keys = [(r.candidate.key if isinstance(r, Assessed) else r[0].key) for r in ranked]
    assert keys[0] == "ncmoe-2", keys  # the fewest expert layers on the CPU that fit
    assert "experts-cpu" in keys and "layers" in keys and keys[-1] == "current"
    fitting = [r for r in ranked if isinstance(r, Assessed) and r.fits]
    assert all(a.tg is not None and b.tg is not None and a.tg >= b.tg
               for a, b in zip(fitting, fitting[1:], strict=False))
    last = ranked[-1]
    assert isinstance(last, Assessed) and last.short["GPU0"] > 0
    # the physical cores; the thread lever's candidate (issue 66) the leader's placement at half
    half = [r for r in fitting if r.candidate.key == "threads-half"]
    assert [r.candidate.threads for r in half] == [4]
    assert half[0].candidate.bench_flags()[:-2] == fitting[0].candidate.bench_flags()[:-2]
    assert all(r.candidate.threads == 8 for r in fitting if r not in half)


def test_a_q8_cache_brings_the_expert_layers_its_room_frees_onto_the_gpu(moe: TensorMap) -> None:
    """Issue 66, a lever --fit leaves alone: at -c 2048 the f16 KV cache (1 KiB a cell here)
    leaves room for one layer's experts; at q8_0 (34 bytes a 32) it frees 0.94 MiB, two more
    layers' experts. Offered with its own -ctk/-ctv and the KV figures of its type, only with
    flash attention on and no cache type in the args."""
    work = Workload(ctx=2048, flash_attn=True)
    dense_part = LAYERS * (ATTN + ROUTER) + OUTPUT + LAYERS * KV_ROW * 2048 + COMPUTE + MARGIN
    host = _host(dense_part + EXPERT_FFN + 1000)
    ranked = candidates(moe, host, work, None, None)
    keys = {r.candidate.key: r for r in ranked if isinstance(r, Assessed)}
    assert "ncmoe-3" in keys and "ncmoe-2" not in keys, keys  # f16: one layer's experts on GPU
    q8 = keys["kv-q8-ncmoe-1"]
    assert q8.fits and q8.candidate.bench_flags()[-4:] == ("-ctk", "q8_0", "-ctv", "q8_0")
    assert q8.candidate.server_flags()[-4:] == ("--cache-type-k", "q8_0", "--cache-type-v",
                                                "q8_0")
    assert q8.need["GPU0"]["kv"] == round(LAYERS * 2 * EMBD * 34 / 32 * 2048)
    assert "f16 leaves 3 there" in q8.candidate.words
    assert q8.tg is not None and keys["ncmoe-3"].tg is not None and q8.tg > keys["ncmoe-3"].tg
    for other in (replace(work, flash_attn=False), replace(work, cache_given=True)):
        assert not any(candidate_of(r).cache for r in candidates(moe, host, other, None, None))
    # the workload as the args give it: either spelling, the last given, a list's first value
    from omni_host.evaluate.checks.placement import workload as workload_of
    from omni_host.measure.asked import PlanAsked
    from omni_host.plan.policy import BenchSpec

    def of(*args: str) -> Workload:
        return workload_of(BenchSpec("/b", "/m", args), PlanAsked(2048, 0))

    assert of("-p", "0", "-fa", "1") == work
    assert of("--flash-attn", "on", "-ctk", "q8_0,f16") == \
        Workload(2048, type_k="q8_0", cache_given=True, flash_attn=True)
    assert of("-ctv", "q4_0", "--cache-type-v", "q8_0", "-fa", "0") == \
        Workload(2048, type_v="q8_0", cache_given=True)


def test_two_gpus_get_the_expert_layers_split_by_free_memory_and_sm_none(moe: TensorMap) -> None:
    work = Workload(ctx=256)
    ranked = candidates(moe, _host(6 << 30, 2 << 30), work, None, None)
    keys = {r.candidate.key: r for r in ranked if isinstance(r, Assessed)}
    assert keys["sm-none"].candidate.bench_flags() == ("-ngl", "99", "-sm", "none", "-t", "8")
    top = next(r for r in ranked if isinstance(r, Assessed) and r.candidate.key == "ncmoe-0")
    assert top.candidate.split == (75, 25) and top.fits
    # a GPU too small for the compute buffer and the margin gets no layer: the split moves
    small = candidates(moe, _host(6 << 30, 1 << 30), work, None, None)
    moved = next(r for r in small if isinstance(r, Assessed) and r.candidate.key == "ncmoe-0")
    assert moved.fits and moved.candidate.split[0] > 75 and "GPU1" not in moved.need


def test_each_program_gets_its_own_spelling() -> None:
    cand = Candidate("x", "", "plan", ngl=20, ncmoe=3, split=(75, 25), threads=16,
                     overrides=((r"blk\.1\.ffn_up_exps", "CPU"), (r"blk\.2\.ffn_up_exps", "CPU")))
    assert cand.bench_flags() == ("-ngl", "20", "-ncmoe", "3", "-ts", "75/25", "-ot",
                                  r"blk\.1\.ffn_up_exps=CPU;blk\.2\.ffn_up_exps=CPU", "-t", "16")
    assert cand.server_flags() == ("--n-gpu-layers", "20", "--n-cpu-moe", "3", "--tensor-split",
                                   "75,25", "--override-tensor",
                                   r"blk\.1\.ffn_up_exps=CPU,blk\.2\.ffn_up_exps=CPU",
                                   "--threads", "16")
    # the report's lines paste into a shell as the same argv (an -ot pattern's ( | ) quoted)
    import shlex

    from omni_host.measure.plan import row

    fit = Candidate("fit", "", "fit", ngl=29, overrides=((r"blk\.1\.ffn_(up|down)_exps", "CPU"),))
    said = row((fit, "stated"))
    assert tuple(shlex.split(said.llama_server)) == fit.server_flags()
    assert tuple(shlex.split(said.llama_bench)) == fit.bench_flags()
    assert "'" in said.llama_bench and said.why_not == "stated"


def test_the_fit_answer_and_the_operators_args_are_read() -> None:
    """llama-fit-params prints llama-server's spelling (README of tools/fit-params); the
    operator's llama-bench args may hold lists (several tests): the first is read."""
    fit = from_args(("-c", "4096", "-ngl", "48", "-ot",
                     r"blk\.14\.ffn_(up|down|gate)_(ch|)exps=CPU,blk\.15\.ffn_(up|down|gate)_(ch|)exps=CPU"),
                    "fit", "", "fit", server=True)
    assert isinstance(fit, Candidate) and fit.ngl == 48
    assert fit.overrides == ((r"blk\.14\.ffn_(up|down|gate)_(ch|)exps", "CPU"),
                             (r"blk\.15\.ffn_(up|down|gate)_(ch|)exps", "CPU"))
    bench = from_args(("-p", "512", "-ngl", "10,20", "-ts", "75/25", "-t", "8"), "current", "",
                      "current", server=False)
    assert isinstance(bench, Candidate)
    assert (bench.ngl, bench.split, bench.threads) == (10, (75, 25), 8)
    assert without_placement(("-p", "512", "-ngl", "10", "-fa", "1", "-t", "8")) == \
        ("-p", "512", "-fa", "1")
    assert isinstance(from_args(("-ngl", "many"), "c", "current", "current", server=False), str)


def test_engine_compute_reads_llama_fit_params_rows() -> None:
    rows = (("CUDA0", 17904, 384, 898), ("CUDA1", 100, 10, 300), ("Host", 58259, 0, 12))
    assert engine_compute(rows) == {"GPU0": 898 * MIB, "GPU1": 300 * MIB}


def test_the_plan_fits_to_the_free_memory_llama_cpp_finds_not_nvmls() -> None:
    """Issue 66: NVML's free memory counts what a server's own CUDA context then takes (the
    H200 plan said 1.1 GiB would stay free, llama-server left 568 MiB). llama-fit-params
    --log-jsonl prints the memory breakdown its CUDA backend saw in a process of its own; the
    plan fits to the lower of the two. The rows' shape is llama.cpp's (common/fit.cpp of the
    0.3.36 sdist: kind, name, total, free, self, model, context, compute, unaccounted, MiB);
    the GPU figures here are made up: no lent GPU ran this build's breakdown yet (a CPU
    build's own is read in test_plan_over_ssh_against_the_engines_own_estimate)."""
    from omni_host.probes.parsers.bench_run import HELPER_DOC, _plan_facts, shape_error
    from omni_host.report.text import _free_words

    def row(name: str, free: int | str, total: int = 143771) -> dict[str, object]:
        return {"kind": "device", "name": name, "description": "NVIDIA H200", "total": total,
                "free": free, "self": 15900, "model": 12545, "context": 1792, "compute": 344,
                "unaccounted": 0}

    host_row = {"kind": "host", "name": "Host", "self": 10109, "model": 10109, "context": 0,
                "compute": 0}
    plan = {"cpus": 16, "physical_cores": 16, "meminfo_kib": {}, "fit_params": "/b/fit",
            "fit": {"code": 0, "stdout": "-c 8192 -ngl 99", "stderr_tail": [],
                    "breakdown": [row("CUDA0", 15800), row("CUDA1", 900, 800), host_row]}}
    facts = _plan_facts(plan)
    assert facts.engine_free == (("CUDA0", 15800, 143771),)  # free past total: not a figure
    assert facts.fit_args == ("-c", "8192", "-ngl", "99")
    nvml = (Gpu(143771 * MIB, 16382 * MIB, 4.8e12), Gpu(143771 * MIB, 9000 * MIB, 4.8e12))
    seen = engine_seen(nvml, facts.engine_free)
    assert [g.free // MIB for g in seen] == [15800, 9000]
    assert engine_seen(nvml, (("CUDA0", 20000, 143771),)) == nvml  # NVML the lower: kept
    words = _free_words({"gpus_free_mib": [15800, 9000], "gpus_free_nvml_mib": [16382, 9000],
                         "gpus_free_engine_mib": {"CUDA0": 15800}})
    assert words is not None and "GPU0 15,800 MiB as llama.cpp's CUDA backend found it (NVML " \
        "16,382: 582 MiB" in words and "GPU1 9,000 MiB (NVML: the build did not say" in words
    assert _free_words({"gpus_free_mib": [16382], "gpus_free_nvml_mib": [16382],
                        "gpus_free_engine_mib": {"CUDA0": 20000}}) == \
        "  GPU free: GPU0 16,382 MiB (NVML; llama.cpp's CUDA backend found no less)"
    hostile = {**plan, "fit": {**plan["fit"], "breakdown": [row("CUDA0", "lots")]}}
    assert shape_error(hostile, HELPER_DOC["plan"], "plan") == \
        "plan.fit.breakdown[0].free: str where the helper writes an integer"


def test_spearman_is_the_rank_correlation() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def test_a_drift_shared_by_every_arm_of_a_round_does_not_hide_a_difference() -> None:
    """The two-H200 proof's rounds (plan-12_4-0 in tests/fixtures/captures/plan-2gpu, its
    evidence lines): every arm ran slow in round 0 and the current args ran 34-57% below the
    leader in every round. Each arm's own spread over the rounds counts that drift and called
    the current args "within the noise" (the stored verdict); with the arms x rounds residual
    the drift is out, and the difference is measurable."""
    import json
    import re

    from omni_host.measure.knob import block_noise, effect

    host = json.loads((TWO_GPU / "plan-12_4-0-prove.json").read_text())["hosts"][0]
    proof = next(r for r in host["results"] if r["id"] == "perf.placement-proof")
    rounds: dict[str, dict[int, float]] = {}
    for line in proof["evidence"][0]["lines"]:
        found = re.fullmatch(r"(\S+) round (\d+): tg64 ([\d.]+) t/s", line)
        assert found, line
        rounds.setdefault(found[1], {})[int(found[2])] = float(found[3])
    assert len(rounds) == 4 and all(len(v) == 4 for v in rounds.values())
    assert not proof["details"]["proof"]["tg64"]["arms"]["current"]["against_leader"]["measurable"]
    pairs = [(rounds["ncmoe-14"][i], rounds["current"][i]) for i in range(4)]
    assert not effect(pairs)["measurable"]  # each arm's spread, the drift included
    noise = block_noise(rounds)
    assert noise is not None and noise < 0.1
    assert effect(pairs, noise)["measurable"] and effect(pairs, noise)["effect"] < -0.3


def test_the_line_against_the_leader_counts_the_comparisons() -> None:
    """Equal candidates (seeded: four rounds, 5% run noise, 10% drift a round): the leader is
    the luckiest of equals, and a line of 3 standard errors for each comparison with it
    called one of 12 equals measurably slower in 10% of proofs; raised for the comparisons
    made at once (knob.family_sigmas), about 3%, and no longer growing with the candidates."""
    import math
    import random

    from omni_host.measure.knob import SIGMAS, against, against_leader

    def false_calls(candidates: int) -> tuple[float, float]:
        rng, raised, one, proofs = random.Random(7), 0, 0, 2000
        for _ in range(proofs):
            drift = [rng.gauss(0, 0.1) for _ in range(4)]
            arms = {f"c{i}": {r: 100 * math.exp(drift[r] + rng.gauss(0, 0.05)) for r in range(4)}
                    for i in range(candidates)}
            leader, table, noise = against_leader(arms)
            raised += any(v["against_leader"].get("measurable") for v in table.values())
            one += any(v.get("measurable") for v in against(arms, leader, noise, SIGMAS).values())
        return raised / proofs, one / proofs

    raised, one = false_calls(12)
    assert one > 0.08 and raised < 0.04, (raised, one)
    assert false_calls(4)[0] < 0.04


def test_runs_that_scatter_on_their_own_keep_a_difference_within_the_noise() -> None:
    """Same-value arms whose runs scatter apart (no shared drift): the residual is that
    scatter, and no difference is called."""
    from omni_host.measure.knob import block_noise, effect

    rounds = {"a": {0: 50.0, 1: 41.0, 2: 52.0, 3: 44.0}, "b": {0: 44.0, 1: 49.0, 2: 43.0, 3: 52.0},
              "c": {0: 47.0, 1: 52.0, 2: 41.0, 3: 49.0}}
    noise = block_noise(rounds)
    assert noise is not None and noise > 0.05
    pairs = [(rounds["a"][i], rounds["b"][i]) for i in range(4)]
    assert not effect(pairs, noise)["measurable"]
    assert block_noise({"a": rounds["a"], "b": rounds["b"]}) is None  # two arms: no residual


def test_a_cpu_host_gets_every_layer_on_the_cpu(tmp_path: Path, moe: TensorMap) -> None:
    ranked = candidates(moe, _host(cores=2), Workload(ctx=512), None, None)
    assert len(ranked) == 1
    only = ranked[0]
    assert isinstance(only, Assessed) and only.candidate.bench_flags() == ("-ngl", "0", "-t", "2")
    assert only.need == {CPU: {"weights": LAYERS * LAYER_MOE + OUTPUT + VOCAB_BYTES,
                               "kv": LAYERS * KV_ROW * 512, "compute": 0, "margin": 0}}


# --- omni-host plan and plan --prove, for real: the CPU llama-bench and llama-fit-params of
# tests/llama_bench.sh over the loopback sshd, a random mixture of experts written here ---

def _physical_cores() -> int:
    """This machine's physical cores among the CPUs this process may use, from sysfs."""
    import os

    base = Path("/sys/devices/system/cpu")
    return len({((base / f"cpu{c}/topology/physical_package_id").read_text().strip(),
                 (base / f"cpu{c}/topology/core_id").read_text().strip())
                for c in os.sched_getaffinity(0)})


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import subprocess
    import sys

    from conftest import LLAMA_CACHE

    model = tmp_path_factory.mktemp("moe") / "moe.gguf"
    subprocess.run([sys.executable, str(Path(__file__).parent / "random_llama.py"),
                    str(LLAMA_CACHE / "vocab.gguf"), str(model), "--embd", "256", "--layers",
                    "4", "--ff", "512", "--heads", "4", "--experts", "8", "--experts-used", "2"],
                   check=True, capture_output=True)
    return model


def _plan(sshd, inv: Path, store: Path, *extra: str) -> tuple[dict, str]:
    import json

    from conftest import run_cli, until_unlocked

    # these tests' depth; the default, half the context, is
    # test_a_plan_never_predicts_with_the_rate_of_other_threads' last plan
    depth = () if "--depth" in extra else ("--depth", "0")
    done = until_unlocked(lambda: run_cli(
        "plan", "-i", str(inv), "loop", "--report-dir", str(store), "--format", "json",
        "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(store.parent / "none"),
        *depth, *extra, timeout=600))
    assert done.stdout.strip(), done.stderr
    return json.loads(done.stdout)["hosts"][0], done.stderr


def _proved(sshd, llama, model: Path, tmp_path: Path, args: list[str],
            *extra: str) -> tuple[dict, Path, Path]:
    """``plan --prove`` of ``model`` with the bench args ``args`` over the loopback sshd:
    (the host's entry, the inventory, the store)."""
    from test_bench import _inventory

    inv = _inventory(sshd, tmp_path / "inv", llama[0], model, args=args, repetitions=2)
    store = tmp_path / "store"
    host, _ = _plan(sshd, inv, store, "--prove", *extra)
    return host, inv, store


@pytest.mark.system
def test_plan_over_ssh_against_the_engines_own_estimate(sshd, llama, moe_model: Path,
                                                        tmp_path: Path) -> None:
    """The plan of a CPU host: every layer on the CPU at its physical cores, the current
    args beside it; our memory figures against llama-fit-params' for the same args (its
    Host row: model and context MiB), within 5%; its --fit answer read."""
    from conftest import LLAMA_CACHE
    from test_bench import _inventory

    binary, _ = llama
    assert (LLAMA_CACHE / "bin" / "llama-fit-params").exists(), \
        "no llama-fit-params: run bash tests/llama_bench.sh (tests/setup.sh does)"
    inv = _inventory(sshd, tmp_path / "inv", binary, moe_model, args=["-p", "16", "-n", "8",
                                                                       "-t", "1"])
    host, _ = _plan(sshd, inv, tmp_path / "store", "--ctx", "1024")
    result = next(r for r in host["results"] if r["id"] == "perf.placement")
    details = result["details"]
    rows = {r["key"]: r for r in details["plan"]}
    assert set(rows) >= {"current", "cpu"}, rows
    cores = _physical_cores()
    assert details["physical_cores"] == cores
    assert rows["cpu"]["llama_bench"] == f"-ngl 0 -t {cores}"
    assert rows["cpu"]["llama_server"] == f"--n-gpu-layers 0 --threads {cores}"
    assert rows["current"]["llama_bench"].endswith("-t 1")
    assert details["fit_params"].endswith("llama-fit-params") and details["fit_error"] is None
    # the current args: every tensor in host memory. The KV cache is the engine's own figure;
    # the weights are every tensor's bytes (the gguf package's reading of the file). The
    # engine's Host row leaves out the CPU's extra buffer types (AMX on this VM's Xeon took 26
    # of the 43 tensors: "cannot be used with preferred buffer type AMX" for the others), so
    # it is at most ours here; on the lent H100 both rows equal ours (tests/fixtures/captures/
    # plan-h100, test_the_h100_memory_figures_are_the_engines).
    import gguf

    engine = details["engine"]["CPU"]
    assert engine["plan_kv_mib"] == engine["engine_context_mib"] == 4  # 4 layers x 1024 x 2 x 256 x 2
    weights = sum(int(t.n_bytes) for t in gguf.GGUFReader(str(moe_model)).tensors)
    assert engine["plan_weights_mib"] == round(weights / 2**20)
    assert engine["engine_model_mib"] <= engine["plan_weights_mib"]
    assert details["workload"]["ctx"] == 1024
    assert result["status"] in ("pass", "warn")
    # llama-fit-params --log-jsonl: its memory breakdown kept beside the answer (a CPU build
    # has its Host row and, on a CPU with extra buffer types, theirs: no device row, no GPU
    # free memory for the plan to take), the answer the last line of what is left of stdout
    stored = next((tmp_path / "store").glob("*/bundles/*/probes/bench.llama.stdout"))
    fit = json.loads(stored.read_text())["plan"]["fit"]
    kinds = [r["kind"] for r in fit["breakdown"]]
    assert kinds[0] == "host" and set(kinds[1:]) <= {"buffer_type"}, fit
    for r in fit["breakdown"]:  # each figure cut to whole MiB (Host 107 of 39 + 4 + 63)
        assert 0 <= r["self"] - sum(r[k] for k in ("model", "context", "compute")) <= 2, r
    # this VM's build, on its AMX Xeon, printed an AMX row of 17 MiB beside the Host row's 39:
    # together every tensor (57 MiB by the gguf package); a build without the row, its Host
    # row alone (below, as the engine figure)
    held = sum(r["model"] for r in fit["breakdown"])
    assert held <= engine["plan_weights_mib"] + 1
    assert len(kinds) == 1 or abs(held - engine["plan_weights_mib"]) <= 1, (held, engine)
    assert not any(line.startswith("{") for line in fit["stdout"].splitlines())
    assert fit["stdout"].split()[:2] == ["-c", "1024"]
    assert details["gpus_free_engine_mib"] == {} and details["gpus_free_nvml_mib"] == []


@pytest.mark.system
def test_prove_runs_the_candidates_in_rounds_and_judges_them(sshd, llama, moe_model: Path,
                                                              tmp_path: Path) -> None:
    """--prove: each candidate once a round, the order reversed every other round; per test a
    leader and every other candidate against it with the noise rule; a candidate within the
    noise is never called slower; nothing becomes a baseline."""
    host, _, _ = _proved(sshd, llama, moe_model, tmp_path, ["-p", "16", "-n", "8", "-t", "1"],
                         "--rounds", "4", "--top", "2")
    proof = next(r for r in host["results"] if r["id"] == "perf.placement-proof")
    details = proof["details"]
    keys = [r["key"] for r in details["proved"]]
    assert keys[0] == "cpu" and "current" in keys, keys
    arms = [line.split(" round")[0] for line in proof["evidence"][0]["lines"]]
    n = len(keys)
    assert len(arms) == 4 * n
    assert arms[:n] == keys and arms[n:2 * n] == keys[::-1]  # the order reversed each round
    # Beside another bench (an operator's box may run one), a round whose other processes' CPU
    # use moved between its runs is left out, and the summary names it: the rest are judged.
    left_out = details.get("disturbed_rounds") or {}
    judged = kept(4, left_out)
    assert not left_out or f"{len(left_out)} round(s) left out" in proof["summary"]
    for test in ("pp16", "tg8"):
        entry = details["proof"][test]
        assert entry["leader"] in keys
        assert entry["run_noise"] is not None  # three arms or more: the rounds' drift taken out
        others = [v["against_leader"] for arm, v in entry["arms"].items() if arm != entry["leader"]]
        assert len(others) == n - 1 and all(v["rounds"] == judged for v in entry["arms"].values())
        # the median of the pairs' ratios may lean above the leader (its rounds' median is the
        # highest); never measurably
        assert all(a["pairs"] == judged and (a["effect"] <= 0 or not a["measurable"])
                   for a in others)
    assert proof["status"] in ("pass", "warn")
    assert ("beats the current args" in proof["summary"]) == (proof["status"] == "warn")
    assert not any(r["id"] == "perf.tokens-per-s" for r in host["results"])  # never a baseline
    # each candidate loaded once as a real llama-server at the served context (4096) before
    # the rounds, with the flags the plan prints for it; a CPU host has no GPU memory to read
    loads = details["loads"]
    assert sorted(loads) == sorted(keys)
    assert all(v["loaded"] and 0 < v["seconds"] < 60 and v["free_after_mib"] == {}
               for v in loads.values()), loads
    assert f"{n} placement(s) loaded as llama-server at -c 4096" in proof["summary"]
    assert proof["evidence"][1]["lines"] == [f"{k}: loaded as llama-server in "
                                             f"{loads[k]['seconds']} s" for k in keys]
    stdout = next(tmp_path.glob("store/*/bundles/*/probes/bench.proof.stdout")).read_text()
    sent = {k: v["argv"] for k, v in json.loads(stdout)["ab"]["loads"].items()}
    assert sent == {r["key"]: ["-c", "4096", *shlex.split(r["llama_server"])]
                    for r in details["proved"]}


@pytest.mark.system
def test_a_plan_never_predicts_with_the_rate_of_other_threads(sshd, llama, moe_model: Path,
                                                               tmp_path: Path) -> None:
    """Issue 63, as found: the stored bench ran -t 1, the policy's args say -t 2. The plan
    says which stored run its CPU rate came from and at which threads, and has no measured
    rate for -t 2 (at most the channels' ceiling, said as an upper bound); with -t 1 args it
    predicts from that run. The text echoes the context and depth it planned for."""
    from conftest import run_cli, until_unlocked
    from test_bench import _baseline, _inventory

    store = tmp_path / "store"
    args = ["-p", "16", "-n", "8", "-t"]
    one = _inventory(sshd, tmp_path / "one", llama[0], moe_model, args=[*args, "1"])
    first, perf = _baseline(sshd, one, store)
    assert first.code == 0, first.stderr
    two = _inventory(sshd, tmp_path / "two", llama[0], moe_model, args=[*args, "2"])
    for inv, threads in ((two, 2), (one, 1)):
        host, _ = _plan(sshd, inv, store, "--ctx", "512")
        details = next(r for r in host["results"] if r["id"] == "perf.placement")["details"]
        rates = details["rates"]
        assert rates["cpu_threads"] == 1, rates
        assert re.fullmatch(r"measured by tg8 of stored bench \S+ at -t 1", rates["cpu_from"])
        current = next(r for r in details["plan"] if r["key"] == "current")
        assert current["llama_bench"].endswith(f"-t {threads}")
        limit = current.get("limit") or ""
        if threads == 2:
            assert "no stored bench measured the CPU at -t 2 (the rate known is at -t 1)" in limit
            assert (current.get("predicted_tg") is None) != limit.endswith("an upper bound")
        else:
            assert current["predicted_tg"] is not None and "no stored bench" not in limit
    text = until_unlocked(lambda: run_cli(
        "plan", "-i", str(two), "loop", "--report-dir", str(store), "--ctx", "512",
        "--known-hosts", str(sshd.known_hosts), "--ssh-config", str(store.parent / "none"),
        timeout=600))
    # no --depth: half the context served (issue 66)
    assert "Placement plan for loop at -c 512, generation at depth 256, ranked" in text.stdout
    assert "CPU read rate: " in text.stdout and "at -t 1" in text.stdout, text.stdout


@pytest.mark.system
def test_the_proof_lands_within_the_plans_stated_error(sshd, llama, moe_model: Path,
                                                      tmp_path: Path) -> None:
    """Issue 63's done-when, on the CPU llama-bench: three stored -t 1 benches, then `plan
    --prove` of -t 1 args. The current args' prediction comes from the newest run's rate and
    states its range: the lent H100's ratio (not yet calibrated here) widened by how far the
    three runs wandered (tg8 runs minutes apart on this VM: 240-293 t/s); the proof's median
    lands within it and says so; a candidate at threads no bench measured has no range. The
    next plan states the error this proof measured, as this host's own where it proved
    three placements."""
    import json

    from conftest import run_cli, until_unlocked
    from test_bench import _baseline, _bench, _inventory

    store = tmp_path / "store"
    inv = _inventory(sshd, tmp_path / "one", llama[0], moe_model,
                     args=["-p", "16", "-n", "8", "-t", "1"])
    first, _ = _baseline(sshd, inv, store)
    assert first.code == 0, first.stderr
    for _ in range(2):
        assert _bench(sshd, inv, store)[1] is not None
    said = until_unlocked(lambda: run_cli(
        "plan", "-i", str(inv), "loop", "--report-dir", str(store), "--ctx", "512", "--prove",
        "--depth", "0", "--rounds", "4", "--top", "1", "--known-hosts", str(sshd.known_hosts),
        "--ssh-config", str(store.parent / "none"), timeout=600))
    assert "  Stated error: not yet calibrated on this host" in said.stdout, said.stdout
    assert "between runs its rates wander CPU ±" in said.stdout, said.stdout
    assert "(within its stated error)" in said.stdout, said.stdout
    shown = run_cli("report", "show", "latest", "--report-dir", str(store), "--format", "json")
    host = json.loads(shown.stdout)["hosts"][0]
    plan = next(r for r in host["results"] if r["id"] == "perf.placement")["details"]
    assert plan["rates"]["tg_ratio_from"].startswith("not yet calibrated on this host")
    assert 0 < plan["rates"]["wander"]["CPU"] < 0.5, plan["rates"]
    current = next(r for r in plan["plan"] if r["key"] == "current")
    assert "wander_unknown" not in current
    low, high = current["predicted_range"]
    assert low < current["predicted_tg"] < high
    proof = next(r for r in host["results"] if r["id"] == "perf.placement-proof")
    (tg,) = [e for t, e in proof["details"]["proof"].items() if t.startswith("tg")]
    measured = tg["arms"]["current"]["median_ts"]
    assert low <= measured <= high, (low, measured, high)
    assert tg["within_stated_error"]["current"] is True
    assert "measured within the plan's stated error" in proof["summary"]
    for r in plan["plan"]:  # no range without a measured rate at its threads
        assert (r.get("predicted_range") is None) == (r.get("predicted_tg") is None or
                                                      str(r.get("limit")).endswith("upper bound"))
    again, _ = _plan(sshd, inv, store, "--ctx", "512")
    rates = next(r for r in again["results"] if r["id"] == "perf.placement")["details"]["rates"]
    ratios = len(tg["within_stated_error"])
    assert rates["tg_ratio_from"].startswith(
        "calibrated on this host" if ratios >= 3 else "not yet calibrated"), (ratios, rates)


# --- the lent H100's plans and proofs (tests/fixtures/captures/plan-h100/README.md) ---

H100 = Path(__file__).parent / "fixtures" / "captures" / "plan-h100"
H100_CELLS = sorted(H100.glob("plan-*-prove.json"))
TWO_GPU_CELLS = sorted(TWO_GPU.glob("plan-*-prove.json"))


def _h100_model() -> TensorMap:
    """The tensor table of the H100's random mixture of experts, from the shapes
    benchmarks/gpu_lib.sh's random_moe writes (tests/random_llama.py: embd 2048, 28 layers,
    ff 2048, 16 heads, 32 experts with 4 used, the 32000-token vocabulary; F16, F32 norms)."""
    embd, ff, experts, vocab = 2048, 2048, 32, 32000
    rows: list[tuple[str, int, int]] = [("token_embd.weight", vocab * embd * 2, vocab),
                                        ("output_norm.weight", embd * 4, 1),
                                        ("output.weight", vocab * embd * 2, vocab)]
    for i in range(28):
        p = f"blk.{i}."
        rows += [(p + "attn_norm.weight", embd * 4, 1), (p + "ffn_norm.weight", embd * 4, 1)]
        rows += [(p + n + ".weight", embd * embd * 2, embd)
                 for n in ("attn_q", "attn_k", "attn_v", "attn_output")]
        rows += [(p + "ffn_gate_inp.weight", experts * embd * 2, experts)]
        rows += [(p + n + ".weight", experts * ff * embd * 2, ff if n != "ffn_down_exps" else embd)
                 for n in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")]
    return TensorMap("llama", 28, experts, 4, tuple(rows))


def _cell(path: Path) -> tuple[dict, dict, dict]:
    import json

    host = json.loads(path.read_text())["hosts"][0]
    plan = next(r for r in host["results"] if r["id"] == "perf.placement")["details"]
    proof = next(r for r in host["results"] if r["id"] == "perf.placement-proof")["details"]
    return host, plan, proof


def _replay(plan: dict) -> tuple[list, Host, Workload, Candidate]:
    """The plan again, with today's code, from the capture's host facts: each GPU's total and
    free memory and rate, the compute buffer its rows carry, the current args of its row."""
    rates = plan["rates"]
    fitting = next(r for r in plan["plan"] if r.get("fits"))
    gpus = tuple(Gpu(total * MIB, free * MIB, gbs * 1e9) for total, free, gbs in
                 zip(plan["gpus_total_mib"], plan["gpus_free_mib"], rates["gpu_gbs"], strict=True))
    compute = {f"GPU{i}": max(r["memory_mib"].get(f"GPU{i}", {}).get("compute", 0)
                              for r in plan["plan"]) * MIB for i in range(len(gpus))}
    assert fitting and all(compute.values())
    host = Host(gpus, rates["cpu_gbs"] * 1e9, "capture", rates["gpu_efficiency"],
                plan["physical_cores"], compute)
    work = Workload(plan["workload"]["ctx"], plan["workload"]["depth"])
    current_row = next(r for r in plan["plan"] if r["origin"] == "current")
    current = from_args(tuple(shlex.split(current_row["llama_bench"])), "current", "", "current",
                        server=False)
    fit_row = next(r for r in plan["plan"] if r["origin"] == "fit")
    fit = from_args(tuple(shlex.split(fit_row["llama_server"])), "fit", "", "fit", server=True)
    assert isinstance(current, Candidate) and isinstance(fit, Candidate)
    return candidates(_h100_model(), host, work, current, fit), host, work, current


def test_the_h100_captures_are_eight_cells() -> None:
    """Three VRAM budgets (16, 24 and 40 GiB free, a ballast holding the rest) at depths 0 and
    4096, and 16 and 24 at 2048 (a second lent H100: the device time ran out before 40)."""
    cells = {(p.name.split("-")[1], p.name.split("-")[2]) for p in H100_CELLS}
    assert cells == {(b, d) for b in ("16", "24", "40") for d in ("0", "4096")} | {
        ("16", "2048"), ("24", "2048")}


@pytest.mark.parametrize("path", H100_CELLS + TWO_GPU_CELLS, ids=lambda p: p.parent.name + p.stem)
def test_the_memory_figures_are_the_engines(path: Path) -> None:
    """Our weights and KV cache for the current args (-ngl 10 at -c 8192 on the H100; -ngl 10
    -ts 3/1 or -ngl 9 -ts 1/1 on the two H200s) against llama-fit-params' own estimate on that
    machine, each device: the engine's figures are the capture's."""
    from omni_host.measure.placement import memory_need, where

    _, plan, _ = _cell(path)
    ranked, host, work, current = _replay(plan)
    p = where(current, host)
    assert not isinstance(p, str)
    ours = memory_need(_h100_model(), p, host, work)
    for device, engine in plan["engine"].items():
        assert round(ours[device]["weights"] / MIB) == pytest.approx(engine["engine_model_mib"],
                                                                     abs=1)
        assert round(ours[device]["kv"] / MIB) == engine["engine_context_mib"]
    assert len(plan["engine"]) == 1 + len(host.gpus)


@pytest.mark.parametrize("path", H100_CELLS + TWO_GPU_CELLS, ids=lambda p: p.parent.name + p.stem)
def test_the_plans_leader_was_the_fastest_measured_or_within_its_noise(path: Path) -> None:
    """Replayed with today's code from the capture's host facts: the same ranking's leader,
    and on the GPUs that leader measured fastest or within the noise of the fastest, never
    measurably below --fit's answer; and within 3% of the fastest measured."""
    _, plan, proof = _cell(path)
    ranked, _, _, _ = _replay(plan)
    leader = ranked[0]
    assert isinstance(leader, Assessed) and leader.fits
    assert leader.candidate.key == plan["plan"][0]["key"]
    assert leader.tg == pytest.approx(plan["plan"][0]["predicted_tg"], rel=0.01)
    (entry,) = proof["proof"].values()
    by_flags = {r["llama_bench"]: r["key"] for r in proof["proved"]}
    arm = by_flags[" ".join(leader.candidate.bench_flags())]
    # fit's answer included: nothing measured beat the leader beyond the noise
    assert arm == entry["leader"] or not entry["arms"][arm]["against_leader"]["measurable"]


def test_the_plans_leader_was_within_3_percent_of_the_fastest_in_all_but_one_cell() -> None:
    """The issue's bar: the plan's leader within 3% of the best measured placement (or
    within the noise) in all cells but one. Over the eight H100 cells and the three of the two
    H200s: ten; the eleventh is the H100's 16 GiB at depth 2048, where --fit's answer (the same
    memory, the CPU's expert layers chosen from the other end) ran 10.5% faster, within the
    noise (one run scatters 6.4% there; at depths 0 and 4096 the plan's ran 5.8% and 4.7%
    faster than it)."""
    below = []
    for path in H100_CELLS + TWO_GPU_CELLS:
        _, plan, proof = _cell(path)
        (entry,) = proof["proof"].values()
        by_flags = {r["llama_bench"]: r["key"] for r in proof["proved"]}
        arm = by_flags[plan["plan"][0]["llama_bench"]]
        if entry["arms"][arm]["median_ts"] < 0.97 * entry["arms"][entry["leader"]]["median_ts"]:
            below.append(path.stem)
    assert below == ["plan-16-2048-prove"]


def test_predicted_and_measured_agree_in_rank_over_the_h100_cells() -> None:
    """Every placement measured in the eight cells (44: 11 and 10 in the two single-round
    sweeps): Spearman of predicted against measured generation at least 0.9."""
    predicted, measured = [], []
    for path in H100_CELLS:
        _, _, proof = _cell(path)
        by_key = {r["key"]: r for r in proof["proved"]}
        for entry in proof["proof"].values():
            for arm, v in entry["arms"].items():
                predicted.append(by_key[arm]["predicted_tg"])
                measured.append(v["median_ts"])
    assert len(predicted) >= 12
    rho = spearman(predicted, measured)
    assert rho is not None and rho >= 0.9, rho


def test_on_two_gpus_the_expert_layers_are_split_by_free_memory() -> None:
    """The two H200s at a 3:1 free ratio (12 and 4 GiB, 18 and 6): the leader puts every
    layer on the GPUs with the expert layers split near that ratio (not the 50/50 of their
    VRAM), fits both, beats the registry's rule and the VRAM-proportional rule where
    measured, and predicted and measured generation agree in rank over the 14 placements."""
    predicted, measured = [], []
    for path in TWO_GPU_CELLS:
        _, plan, proof = _cell(path)
        lead = plan["plan"][0]
        assert lead["origin"] == "plan" and lead["fits"] and "-ngl 99 -ncmoe" in lead["llama_bench"]
        split = [int(x) for x in lead["llama_bench"].split("-ts ")[1].split()[0].split("/")]
        free = plan["gpus_free_mib"]
        assert split[0] > 50 and abs(split[0] / sum(split) - free[0] / sum(free)) <= 0.1
        (entry,) = proof["proof"].values()
        assert entry["arms"]["current"]["median_ts"] < 0.7 * entry["arms"][entry["leader"]]["median_ts"]
        by_key = {r["key"]: r for r in proof["proved"]}
        for arm, v in entry["arms"].items():
            predicted.append(by_key[arm]["predicted_tg"])
            measured.append(v["median_ts"])
    assert len(predicted) == 14
    rho = spearman(predicted, measured)
    assert rho is not None and rho >= 0.9, rho


@pytest.mark.parametrize("path", H100_CELLS + TWO_GPU_CELLS, ids=lambda p: p.parent.name + p.stem)
def test_every_stored_row_reads_typed_and_is_kept_as_it_was(path: Path) -> None:
    """The stored plans of the lent GPUs (written before the rows were typed) read into
    PlanRow, every row, and are kept again as they were stored."""
    from omni_host.measure.plan import rows_of, stored_rows

    _, plan, proof = _cell(path)
    for stored in (plan["plan"], proof["proved"]):
        rows = rows_of(stored)
        assert len(rows) == len(stored) and stored_rows(rows) == stored
    assert rows_of([{"key": "x"}, "junk"]) == []  # a damaged row is left out, not a traceback


def test_a_running_server_is_set_beside_the_stored_plans_winner() -> None:
    """serve.tokens-per-s quotes the host's stored plan for a server of the same model: the
    proof's measured winner, and the gain predicted for the server's own placement (the H100's
    16 GiB cell: -ngl 10 predicted at 23.1 t/s, the winner at 42.5)."""
    from omni_host.measure.plan import served_against_plan

    _, plan, proof = _cell(H100 / "plan-16-0-prove.json")
    line, details = served_against_plan(("llama-server", "-m", "m.gguf", "--n-gpu-layers", "10"),
                                        "P1", plan, proof) or ("", {})
    assert line.startswith("the stored plan P1 measured every layer on the GPU(s), the experts "
                           "of 15 layer(s) too (the first 13 layers' experts on the CPU) fastest "
                           "(41.49 t/s); it is predicted 84% faster than this server's placement")
    assert details["predicted_gain"] == pytest.approx(42.5 / 23.1 - 1, abs=0.001)
    assert line.endswith("serve with --n-gpu-layers 99 --n-cpu-moe 13 --threads 16")
    same, _ = served_against_plan(("llama-server", "-ngl", "999", "-ncmoe", "13", "-t", "8"),
                                  "P1", plan, proof) or ("", {})
    assert same.endswith("; this server runs that placement")
    fit, fit_details = served_against_plan(("llama-server", "-m", "m.gguf", "-c", "8192"), "P1",
                                           plan, proof) or ("", {})
    assert "placed by llama.cpp's --fit at its start" in fit and fit_details["fit_at_start"]
    assert "what it holds on the GPUs was not read" in fit
    fit_row = next(r for r in plan["plan"] if r["origin"] == "fit")
    needed = sum(fit_row["memory_mib"]["GPU0"].values()) / 1024
    held, held_details = served_against_plan(("llama-server", "-c", "8192"), "P1", plan, proof,
                                             (("GPU-53e2aa", 15100),)) or ("", {})
    assert f"it holds 14.7 GiB on GPU-53e2aa; the plan's --fit answer needed GPU0 {needed:.1f} " \
        "GiB (its margin included)" in held
    assert held_details["held_mib"] == {"GPU-53e2aa": 15100}
    other, _ = served_against_plan(("llama-server", "-ngl", "5"), "P1", plan, proof) or ("", {})
    assert "is not among the plan's candidates" in other


def test_gpu_topology_quotes_the_proof_on_several_gpus_only() -> None:
    """On one GPU the proof says nothing to gpu.topology; on several (the capture's plan as
    if its host had two GPUs: none can exist here) its generation verdict is quoted."""
    from omni_host.measure.plan import measured_here

    _, plan, proof = _cell(H100 / "plan-16-0-prove.json")
    assert measured_here("P1", plan, proof) is None
    two = {**plan, "gpus_free_mib": [16382, 8000]}
    assert measured_here("P1", two, proof) == (
        "measured here (plan P1): every layer on the GPU(s), the experts of 15 layer(s) too "
        "(the first 13 layers' experts on the CPU) fastest at 41.49 t/s, within the noise: "
        "llama.cpp's --fit answer (llama-fit-params)")
    assert measured_here("P1", two, None) is None


@pytest.mark.system
def test_the_next_audit_sets_a_running_server_beside_the_stored_plan(
        sshd, llama, moe_model: Path, tmp_path: Path) -> None:
    """A plan proved over the loopback sshd, then a real llama-server of the same model: the
    host's next audit quotes the plan's measured winner beside the server (the same placement,
    or the winner's flags to serve with)."""
    from test_serve import _audit, _llama_server

    host, inv, store = _proved(sshd, llama, moe_model, tmp_path, ["-p", "0", "-n", "8", "-t", "1"],
                               "--rounds", "1", "--top", "1")
    proof = next(r for r in host["results"] if r["id"] == "perf.placement-proof")
    leader = proof["details"]["proof"]["tg8"]["leader"]
    with _llama_server(moe_model, "-ngl", "0", "-t", "1") as (pid, _port):
        served, _ = _audit(sshd, inv, store, pid)
    stored = sorted(p.name for p in store.iterdir() if p.is_dir())[0]
    assert f"pid {pid}: the stored plan {stored} measured " in served["summary"], served
    assert served["details"]["plan"][str(pid)]["plan"] == stored
    runs_it = served["summary"].endswith("; this server runs that placement")
    assert runs_it == (leader == "cpu"), (leader, served["summary"])  # the server: -ngl 0


def test_the_proof_leaves_out_a_round_other_load_disturbed_unevenly() -> None:
    """The proof's rounds are the A/B's pairs (the same runs, the same helper): a round whose
    runs another process's CPU use moved between is left out and said (the real same-value A/B
    of tests/fixtures/captures/knobs, the "now" arm's runs of rounds 0 and 1 under 1.2 CPUs of
    other load)."""
    import json

    from omni_host.evaluate.checks import catalog
    from omni_host.measure.plan import PlanRow, prove_result
    from omni_host.probes.parsers.bench_run import parse_bench_run

    doc = json.loads((Path(__file__).parent / "fixtures" / "captures" / "knobs" /
                      "ab-helper_vm-2cpu_threads-1-same-value.json").read_text())
    for run in doc["ab"]["runs"]:
        if run["arm"] == "now" and run["pair"] in (0, 1):
            run["during"]["other_cpu_load"] = 1.2
    ab = parse_bench_run(json.dumps(doc)).ab
    assert ab is not None
    proved = [PlanRow(k, k, "plan", "-t 1", "--threads 1", fits=True, predicted_tg=10.0)
              for k in ("now", "1")]
    result = prove_result(catalog()["perf.placement-proof"], proved, ab, {})
    assert set(result.details["disturbed_rounds"]) == {"0", "1"}
    assert "2 round(s) left out: other processes' CPU use moved between their runs" in \
        result.summary
    assert all(v["rounds"] == 2 for e in result.details["proof"].values()
               for v in e["arms"].values())


# --- a lent H100's plan --prove, kept in one bundle and judged once (issue 45) ---------------
KEYED = Path(__file__).parent / "fixtures" / "captures" / "keyed-h100"


def test_a_stored_plan_and_its_proof_judge_again_from_their_one_bundle(tmp_path: Path) -> None:
    """The lent H100's `plan --prove` (captures/keyed-h100): the proof's rounds were kept in the
    plan's bundle (bench.proof beside bench.llama). Judged again offline by the registered
    checks, with the host's past as it stood (the benches before it) and the keys the proof
    ran, the plan and the proof say what they said on the host."""
    import tarfile

    from omni_host.app.audit import judge_plan
    from omni_host.app.bench import judged
    from omni_host.app.past import past_of
    from omni_host.collect.bundle import read_bundles
    from omni_host.measure.asked import Asked, PlanAsked, ProofAsked
    from omni_host.report.history import History, load_history

    with tarfile.open(KEYED / "keyed-more.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    history = load_history(tmp_path / "store-keyed")
    stored = next(a for a in history.audits if a.host("gpu") is not None
                  and a.host("gpu").result("perf.placement-proof") is not None)
    (bundle,) = read_bundles(stored.path / "bundles" / "gpu")
    assert {"bench.llama", "bench.proof"} <= set(bundle.results)
    was = stored.host("gpu")
    proof = was.result("perf.placement-proof")
    keys = tuple(r["key"] for r in proof.details["proved"])
    before = History([a for a in history.audits if a.started_at < stored.started_at])
    plan = judge_plan(bundle, None, "keyed-h100")
    asked = Asked(plan=PlanAsked(was.result("perf.placement").details["workload"]["ctx"],
                                 was.result("perf.placement").details["workload"]["depth"]),
                  proof=ProofAsked(keys))
    again = judged(bundle, plan, past_of(before, "gpu"), asked)
    for check in ("perf.placement", "perf.placement-proof"):
        now, then = again.result(check), was.result(check)
        assert now is not None and then is not None
        assert (now.status, _before_the_stated_error(now.summary)) == \
            (then.status, then.summary), check
        added = {"cpu_available_mib", "swap_free_mib"}  # the host's memory, said since issue 61
        # NVML's free beside the engine's, said since issue 66 (this build printed no breakdown)
        assert now.details.get("gpus_free_engine_mib", {}) == {}
        assert now.details.get("gpus_free_nvml_mib", now.details.get("gpus_free_mib")) == \
            now.details.get("gpus_free_mib")
        added |= {"gpus_free_engine_mib", "gpus_free_nvml_mib"}
        # each GPU's NVML index in llama-bench's order, since issue 66 (its loads are read by it)
        assert now.details["gpus_nvml_index"] == [0]
        added.add("gpus_nvml_index")
        details = {k: v for k, v in now.details.items() if k not in added}
        # the threads a CPU rate was measured at and the stated error, said since issue 63
        assert details["rates"].pop("cpu_threads") is None
        assert details["rates"].pop("tg_ratio_from").startswith(("calibrated", "not yet"))
        assert len(details["rates"].pop("tg_ratio")) == 2
        assert isinstance(details["rates"].pop("wander"), dict)
        # the thread lever's candidate, offered since issue 66 (the H100's leader at 8 threads)
        if check == "perf.placement":
            half = [r for r in details["plan"] if r["key"] == "threads-half"]
            assert [r["llama_bench"].split()[-2:] for r in half] == [["-t", "8"]], half
            details["plan"] = [r for r in details["plan"] if r["key"] != "threads-half"]
        for key in ("plan", "proved"):
            for r in details.get(key, ()):
                r.pop("wander_unknown", None)
                assert r.pop("predicted_range", None) is None or r["predicted_tg"] is not None
        for entry in (details.get("proof") or {}).values():
            entry.pop("within_stated_error", None)
            # what the leader gains over the current args and --fit, said since issue 66
            gain = entry.pop("gain")
            assert set(gain) == {"over_current", "over_fit"}
            assert all(not g["measurable"] for g in gain.values()), gain
        assert details == then.details, check
    meminfo = bundle.results["mem.meminfo"].stdout
    available = next(int(line.split()[1]) for line in meminfo.splitlines()
                     if line.startswith("MemAvailable:"))
    assert again.result("perf.placement").details["cpu_available_mib"] == round(available / 1024)
    assert proof.status.value == "pass" and len(keys) >= 3


def _before_the_stated_error(summary: str) -> str:
    """A summary as the plan said it before it stated its error (issue 63) and the leader's
    gain over the current args and --fit with its figures (issue 66)."""
    summary = re.sub(r"at tg ([0-9.]+ t/s) \([0-9.]+-[0-9.]+[^)]*\)", r"at \1", summary)
    # fewer than 4 rounds said as too few, not as within the noise (issue 66)
    summary = summary.replace("(too few rounds beside it to tell: ",
                              "(no measurable difference from ")
    summary = re.sub(r"; it ran [+-]\d+% against the current args in \d round\(s\), too few to "
                     r"call", "; the current args are within the noise of it", summary)
    summary = re.sub(r"; it ran [+-]\d+% against --fit's answer in \d round\(s\), too few to "
                     r"call", "", summary)
    summary = re.sub(r"(the current args are within the noise of it) \([^()]*\)", r"\1",
                     summary)
    summary = re.sub(r"; --fit's answer is within the noise of it \([^()]*\)", "", summary)
    return re.sub(r"; \d+ of \d+ measured within the plan's stated error( \(outside it: "
                  r"(?:[^()]|\([^()]*\))*\))?", "", summary)


def test_the_cpus_share_must_fit_the_hosts_available_memory(moe: TensorMap) -> None:
    """`plan --ctx 100000000` on a 23 GiB host said "fits; CPU 763.0 GiB" (issue 61): the CPU's
    weights and KV cache are held to the memory the host has available now, swap not counted."""
    from omni_host.measure.plan import fit_words, row

    work = Workload(ctx=100_000_000)
    roomy = _assessed(assess(moe, Candidate("c", "c", "current", ngl=0), _host(cores=2), work))
    assert roomy.fits  # memory not read: GPUs alone are judged, as before
    small = replace(_host(cores=2), cpu_free=23 << 30)
    judged = _assessed(assess(moe, Candidate("c", "c", "current", ngl=0), small, work))
    need = sum(judged.need[CPU].values())
    assert not judged.fits and judged.short == {CPU: need - (23 << 30)}
    words = fit_words(row(judged))
    assert words.startswith("does NOT fit (CPU short by ") and "F-022" in words
    enough = replace(small, cpu_free=need)
    assert _assessed(assess(moe, Candidate("c", "c", "current", ngl=0), enough, work)).fits


def test_every_percentage_beside_two_rates_is_their_ratio(tmp_path: Path) -> None:
    """Issue 63: "fit measured 30.95 t/s ... -10.6% within the noise" beside a leader at 32.08
    t/s: the -10.6% was the paired per-round effect, the medians differ by 3.5%. The proof's
    lines give the ratio of the medians, and name the paired effect as such (the lent H100's
    stored proof)."""
    import re
    import tarfile

    from omni_host.report.history import load_history
    from omni_host.report.text import plan_lines

    with tarfile.open(KEYED / "keyed-more.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    stored = next(a for a in load_history(tmp_path / "store-keyed").audits
                  if a.host("gpu") is not None
                  and a.host("gpu").result("perf.placement-proof") is not None)
    lines = plan_lines(stored.report)
    proof = stored.host("gpu").result("perf.placement-proof").details["proof"]
    checked = 0
    for entry in proof.values():
        lead = entry["arms"][entry["leader"]]["median_ts"]
        for arm, v in entry["arms"].items():
            if arm == entry["leader"]:
                continue
            (line,) = [ln for ln in lines if ln.startswith(f"  {arm:<14} measured {v['median_ts']} ")]
            said = float(re.search(r": ([+-]\d+\.\d)% of the fastest's median", line).group(1))
            assert said == round((v["median_ts"] / lead - 1) * 100, 1), line
            assert "paired per round" in line
            checked += 1
    assert checked >= 3


# --- the stated error (issue 63: `--prove` lands within the stated error of the prediction) ---

def test_the_lent_ratio_is_the_h100_cells_own() -> None:
    """The error a plan states before its host has proofs of its own: the lowest and the
    highest measured / predicted generation over every placement the lent H100 proved (its
    8 cells, read from the captures' own figures)."""
    import json

    from omni_host.measure.placement import LENT_FROM, LENT_RATIO
    from omni_host.measure.plan import measured_over_predicted

    ratios = []
    for path in H100_CELLS:
        host = json.loads(path.read_text())["hosts"][0]
        proof = next(r for r in host["results"] if r["id"] == "perf.placement-proof")
        ratios += measured_over_predicted(proof["details"])
    assert len(ratios) == 44 and len(H100_CELLS) == 8
    assert (round(min(ratios), 3), round(max(ratios), 3)) == LENT_RATIO
    assert "44 placements" in LENT_FROM and "0.80-1.12x" in LENT_FROM


def test_a_prediction_states_the_range_its_measurement_is_expected_in(moe: TensorMap) -> None:
    """The range is the prediction times the host's ratio (the lent H100's until the host's
    own proofs calibrate it); an upper bound (the channels' ceiling) has none."""
    from omni_host.measure.placement import LENT_RATIO
    from omni_host.measure.plan import range_words, row

    work = Workload(ctx=256)
    host = replace(_host(1 << 34), cpu_threads=1)
    found = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0, threads=1), host, work))
    assert found.tg is not None
    assert found.tg_range == pytest.approx((found.tg * LENT_RATIO[0], found.tg * LENT_RATIO[1]))
    r = row(found)
    low, high = r.predicted_range or ()
    assert not found.wander_known and r.wander_unknown
    assert range_words(r) == f"{r.predicted_tg:g} t/s ({low:g}-{high:g}, the model's error " \
        "only: how far its rate wanders between runs is not known yet)"
    # in the table, whose head says how far the rates wander, the row says only whose error
    assert range_words(r, brief=True) == f"{r.predicted_tg:g} t/s ({low:g}-{high:g}, the " \
        "model's error only)"
    mine = replace(host, ratio=(0.9, 1.0), ratio_from="calibrated", wander={CPU: 0.05})
    calibrated = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0, threads=1), mine, work))
    # the CPU's rate wanders 5% between runs: twice that each way
    assert calibrated.tg_range == pytest.approx((calibrated.tg * 0.9 * 0.9,
                                                 calibrated.tg * 1.1))
    assert calibrated.wander_known and row(calibrated).wander_unknown is None
    assert range_words(row(calibrated)).endswith(")") and "model's" not in \
        range_words(row(calibrated))
    gpu_only = replace(mine, wander={"GPU": 0.01})  # the CPU's wander unknown, the GPU's known
    partly = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0, threads=1), gpu_only, work))
    assert not partly.wander_known
    bound = _assessed(assess(moe, Candidate("c", "", "plan", ngl=0, threads=2),
                             replace(host, cpu_ceiling_gbs=200e9), work))
    assert bound.limit.endswith("an upper bound") and bound.tg_range is None


def test_the_proof_says_which_measurements_fell_within_the_stated_error() -> None:
    """The same-value A/B of the VM (both arms measured alike): one arm predicted where it
    measured, the other predicted at twice its rate: the first is within, the second is
    named outside, with its figures."""
    import json

    from omni_host.evaluate.checks import catalog
    from omni_host.measure.plan import PlanRow, prove_result
    from omni_host.probes.parsers.bench_run import parse_bench_run

    doc = (Path(__file__).parent / "fixtures" / "captures" / "knobs" /
           "ab-helper_vm-2cpu_threads-1-same-value.json").read_text()
    ab = parse_bench_run(doc).ab
    assert ab is not None
    tg = {r.arm: t.estimate.center_ts for r in ab.runs if r.result
          for t in r.result.tests if t.name.startswith("tg")}
    rate = statistics_median(list(tg.values()))
    proved = [PlanRow("now", "now", "plan", "-t 1", "--threads 1", fits=True,
                      predicted_tg=rate, predicted_range=(rate * 0.8, rate * 1.2)),
              PlanRow("1", "one", "plan", "-t 1", "--threads 1", fits=True,
                      predicted_tg=2 * rate, predicted_range=(1.6 * rate, 2.4 * rate))]
    result = prove_result(catalog()["perf.placement-proof"], proved, ab, {})
    test = next(t for t in result.details["proof"] if t.startswith("tg"))
    assert result.details["proof"][test]["within_stated_error"] == {"now": True, "1": False}
    assert "1 of 2 measured within the plan's stated error (outside it: 1 " in result.summary
    assert json.dumps(result.details)  # stored as it is


def statistics_median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def test_a_hosts_own_proofs_calibrate_its_stated_error(tmp_path: Path) -> None:
    """The lent H100's store (captures/keyed-h100) holds a proved plan: the host's past
    learns its ratio from it, and the next plan states that error, named as this host's."""
    import tarfile

    from omni_host.app.past import past_of, proved_ratio
    from omni_host.measure.plan import measured_over_predicted
    from omni_host.report.history import load_history

    with tarfile.open(KEYED / "keyed-more.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    history = load_history(tmp_path / "store-keyed")
    past = past_of(history, "gpu")
    ratios = [x for a, e in past.entries
              if (p := e.result("perf.placement-proof")) is not None
              for x in measured_over_predicted(p.details)]
    assert len(ratios) >= 3
    learned = proved_ratio(past.entries)
    assert learned["tg_ratio"] == [round(min(ratios), 3), round(max(ratios), 3)]
    assert past.rates["tg_ratio"] == learned["tg_ratio"]
    assert learned["tg_ratio_from"].startswith(f"calibrated on this host: {len(ratios)} ")
    assert proved_ratio(()) == {}


def test_an_upper_bound_never_calibrates_the_stated_error() -> None:
    """A placement predicted at the channels' ceiling (no bench measured its threads) says
    nothing of the model's error: its ratio is left out."""
    from omni_host.measure.plan import measured_over_predicted

    proof = {"proof": {"tg8": {"leader": "a", "arms": {"a": {"median_ts": 9.0},
                                                      "b": {"median_ts": 3.0}}}},
             "proved": [{"key": "a", "placement": "a", "origin": "plan", "llama_bench": "",
                         "llama_server": "", "predicted_tg": 10.0, "limit": "CPU memory"},
                        {"key": "b", "placement": "b", "origin": "plan", "llama_bench": "",
                         "llama_server": "", "predicted_tg": 30.0,
                         "limit": "CPU memory; the CPU at its channels' ceiling: no stored "
                                  "bench measured the CPU at -t 2: an upper bound"}]}
    assert measured_over_predicted(proof) == [0.9]


def test_a_build_without_log_jsonl_is_asked_again_without_it(tmp_path: Path) -> None:
    """An older llama-fit-params refuses --log-jsonl: the helper asks it again without the
    flag, the answer read as before and no breakdown claimed (a stand-in: this machine's
    build has the flag; tests/test_plan.py's ssh test runs it)."""
    from omni_host.remote.bench import _fit_params

    old = tmp_path / "llama-fit-params"
    old.write_text('#!/bin/sh\nfor a; do [ "$a" = --log-jsonl ] && { echo "error: invalid '
                   'argument: $a" >&2; exit 1; }; done\necho "-c 4096 -ngl 12"\n')
    old.chmod(0o755)
    answer = _fit_params(str(old), "/m.gguf", ["-c", "4096"], {}, breakdown=True)
    assert answer == {"code": 0, "stdout": "-c 4096 -ngl 12\n", "stderr_tail": []}
    # any other failure is the answer, asked once (not twice the time of a model that fails)
    failing = tmp_path / "failing"
    failing.write_text(f'#!/bin/sh\necho run >> {tmp_path}/runs\necho "error loading model" >&2\n'
                       'exit 1\n')
    failing.chmod(0o755)
    answer = _fit_params(str(failing), "/m.gguf", [], {}, breakdown=True)
    assert answer["code"] == 1 and answer["stderr_tail"] == ["error loading model"]
    assert (tmp_path / "runs").read_text() == "run\n"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 1 << 20), min_size=1, max_size=4),
       st.lists(st.tuples(st.sampled_from(["CUDA0", "CUDA1", "CUDA7", "Vulkan0", "CUDAx"]),
                          st.integers(0, 1 << 20)), max_size=4))
def test_the_free_memory_fitted_to_is_never_more_than_either_figure(
        nvml_mib: list[int], engine: list[tuple[str, int]]) -> None:
    """Generated NVML figures and engine rows: every GPU is fitted to at most NVML's free
    memory and at most the engine's for its own CUDA<n>; a row naming no GPU of this host
    changes nothing."""
    gpus = tuple(Gpu(1 << 41, free * MIB, None) for free in nvml_mib)
    rows = tuple((name, free, 1 << 21) for name, free in engine)
    seen = engine_seen(gpus, rows)
    assert len(seen) == len(gpus)
    for i, (was, now) in enumerate(zip(gpus, seen, strict=True)):
        own = [free * MIB for name, free, _ in rows if name == f"CUDA{i}"]
        assert now.free <= was.free and all(now.free <= f for f in own[-1:])
        assert now.free == min([was.free, *own[-1:]])
        assert (now.total, now.gbs) == (was.total, was.gbs)
