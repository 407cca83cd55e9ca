"""The served Sentinel (serve.tokens-per-s): the running llama-server's own rate against the
host's bench of the same model, with every difference in how it runs named.

Parsers and the verdict on real captures of llama-server (tests/fixtures/captures/serve, see
PROVENANCE.md); the serve helper's reads against real hostile endpoints on the loopback; then
real llama-servers, built from the same sources as the bench's llama-bench, audited over the
loopback sshd against a real bench baseline, with the differences induced one at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import LLAMA_CACHE, SERVER_IMAGE, Sshd, free_port, run_cli
from test_bench import CpuQuota, _baseline

from omni_host.errors import ParseError
from omni_host.evaluate.checks import catalog
from omni_host.measure.serve import differences, judge_served, served_rate
from omni_host.model import Baseline, InferenceServer, ServedCounters, ServedProbe, Status
from omni_host.probes.parsers.bench import parse_llama_bench_json
from omni_host.probes.parsers.serve import counters, parse_servers, redacted
from omni_host.remote import serve as helper

CAPTURES = Path(__file__).parent / "fixtures" / "captures"
SERVE = CAPTURES / "serve"
META = catalog()["serve.tokens-per-s"]


def _sample(text: str, name: str) -> float:
    """A sample's value as the capture's own text writes it."""
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


@pytest.mark.parametrize("capture", ["vm-2cpu_after-3-requests", "vm-2cpu_after-3-concurrent",
                                     "h100_matching-8x128", "h100_ngl7-8x128"])
def test_counters_are_read_from_real_metrics(capture: str) -> None:
    text = (SERVE / f"llama-server-metrics_{capture}.txt").read_text()
    got = counters(text)
    assert got.predicted_tokens == _sample(text, "llamacpp:tokens_predicted_total")
    assert got.predicted_seconds == _sample(text, "llamacpp:tokens_predicted_seconds_total")
    assert got.prompt_tokens == _sample(text, "llamacpp:prompt_tokens_total")
    assert got.requests_processing == 0
    assert got.busy_slots_per_decode == _sample(text, "llamacpp:n_busy_slots_per_decode")


@pytest.mark.parametrize("text, why", [
    ("", "no llama.cpp counters"),
    ("<html>It works!</html>", "no llama.cpp counters"),
    ("vllm:generation_tokens_total 5\n", "no llama.cpp counters"),
    ("llamacpp:tokens_predicted_total -5\n", "negative"),
])
def test_metrics_that_are_not_llama_servers_are_an_error(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        counters(text)


def test_nan_and_labelled_samples_are_passed_over() -> None:
    text = ("llamacpp:tokens_predicted_total NaN\nllamacpp:tokens_predicted_total{a=\"b\"} 9\n"
            "llamacpp:tokens_predicted_seconds_total 2\n")
    got = counters(text)
    assert got.predicted_tokens is None and got.predicted_seconds == 2


def test_the_helper_document_of_a_real_server() -> None:
    text = (SERVE / "serve-helper_vm-2cpu_one-server-probed.json").read_text()
    doc = json.loads(text)
    (server,) = parse_servers(text)
    raw = doc["servers"][0]
    assert server.pid == raw["pid"] and server.argv == tuple(raw["argv"])
    assert server.sha256 == raw["sha256"] == doc["bench_server"]["sha256"]  # the same build
    assert server.bench_server_path == doc["bench_server"]["path"]
    assert server.cpus_allowed == raw["cpus_allowed"] and server.quota_cpus is None
    assert server.model_fingerprint == raw["model"]["fingerprint"]
    assert server.counters.predicted_tokens == _sample(raw["metrics"],
                                                       "llamacpp:tokens_predicted_total")
    props = json.loads(raw["props"])
    assert server.n_ctx == props["default_generation_settings"]["n_ctx"]
    assert server.slots == props["total_slots"] and server.build == props["build_info"]
    timings = raw["probe"]["timings"]
    assert server.probe.predicted_n == timings["predicted_n"]
    assert server.probe.predicted_per_second == timings["predicted_per_second"]


@pytest.mark.parametrize("text", ["", "[]", '{"helper": 2, "servers": []}', "not json",
                                  '{"helper": 1}'])
def test_garbage_instead_of_the_helper_document_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_servers(text)


def test_one_hostile_server_costs_only_its_own_counters() -> None:
    good = json.loads((SERVE / "serve-helper_vm-2cpu_one-server-probed.json").read_text())
    bad = dict(good["servers"][0], pid=7, metrics="llamacpp:tokens_predicted_total -1\n",
               props="[1, 2", probe={"timings": {"predicted_n": "x"}}, argv="no list",
               env={"LLAMA_API_KEY": "sk-secret", "OMP_NUM_THREADS": "4"})
    servers = parse_servers(json.dumps({"helper": 1, "servers": [bad, good["servers"][0]]}))
    assert servers[1].counters is not None  # the other server stands
    hostile = servers[0]
    assert hostile.counters is None and "negative" in hostile.metrics_error
    assert hostile.props_error.startswith("/props is not JSON")
    assert hostile.probe is None and "no generation rate" in hostile.probe_note
    assert hostile.argv == () and hostile.env == {"OMP_NUM_THREADS": "4"}


def test_secrets_in_a_servers_argv_never_leave_the_host_nor_reach_a_report() -> None:
    argv = ["llama-server", "--api-key", "sk-one", "--api-key=sk-two", "--api-key-file",
            "/etc/keys", "-t", "4", "--hf-token", "hf_x"]
    from omni_host.remote.procfacts import NOT_KEPT as not_kept
    want = ("llama-server", "--api-key", not_kept, "--api-key=" + not_kept, "--api-key-file",
            "/etc/keys", "-t", "4", "--hf-token", not_kept)
    assert tuple(helper.redacted_argv(argv)) == want  # on the host
    assert redacted(argv) == want  # and again on the controller


def _vm_baseline(**context) -> tuple[Baseline, str]:
    """A baseline made of the VM's real llama-bench capture (-p 64 -n 32 -t 2 -r 3)."""
    bench = parse_llama_bench_json(
        (CAPTURES / "llama-bench" / "llama-bench-json_vm-epyc-2cpu_tiny-f16_r3.json").read_text())
    tg = next(t for t in bench.tests if t.kind == "tg")
    ctx = {"model_fingerprint": "fp", "cpus_allowed": 2, "cpu_quota": "none", **context}
    return (Baseline("20261124T000000000Z-abcdef", 0.0, {t.name: list(t.samples_ts)
                                                        for t in bench.tests}, ctx, {},
                     {t.name: t.key for t in bench.tests}), tg.name)


def _server(**changes) -> InferenceServer:
    base = InferenceServer("llama-server", 42, ("llama-server", "-m", "/m.gguf", "-t", "2"),
                           exe="/opt/llama-server", sha256="a" * 64, env={}, cpus_allowed=2,
                           cpus_allowed_list="0-1", started_at=1000.0, address="127.0.0.1:8080",
                           model_path="/m.gguf", model_fingerprint="fp",
                           counters=ServedCounters(predicted_tokens=200, predicted_seconds=4.0),
                           bench_server_path="/opt/llama-server", bench_server_sha256="a" * 64)
    return dataclasses.replace(base, **changes)


def test_a_server_like_its_bench_passes_and_differences_are_named() -> None:
    baseline, tg = _vm_baseline()
    bench_ts = sorted(baseline.tests[tg])[1]  # the median of the repetitions after the first
    fast = _server(counters=ServedCounters(predicted_tokens=bench_ts * 4, predicted_seconds=4.0))
    result = judge_served(META, (fast,), baseline)
    assert result.status is Status.PASS and result.details["servers"][0]["differences"] == []
    assert result.details["servers"][0]["fraction"] == pytest.approx(1.0, abs=0.35)
    slow = _server(argv=("llama-server", "-t", "1"), cpus_allowed=1, cpus_allowed_list="0",
                   quota_cpus=0.5, quota_cgroup="/box", sha256="b" * 64,
                   env={"GLIBC_TUNABLES": "glibc.cpu.x86_avx512f=0"},
                   counters=ServedCounters(predicted_tokens=bench_ts * 0.3 * 4,
                                           predicted_seconds=4.0, busy_slots_per_decode=2.5))
    result = judge_served(META, (slow,), baseline)
    assert result.status is Status.FAIL
    diffs = result.details["servers"][0]["differences"]
    assert [d.split(":")[0] for d in diffs] == [
        "threads", "concurrent requests", "CPUs allowed", "CPU quota (cgroup)", "binary",
        "environment GLIBC_TUNABLES"]
    assert diffs[0] == "threads: the bench ran 2, the server runs 1"
    assert all(d in result.summary for d in diffs)


def test_the_registered_check_judges_the_served_rate_once_against_the_past() -> None:
    """serve.tokens-per-s as every audit runs it (the registry, the host's Prior): against the
    baseline and the previous audit where the store has them, the same verdict ``judge_served``
    gives with them; without a store (NO_PRIOR) no baseline to compare with. No use case
    judges it a second time (app.audit.finish returns the hosts' results as they came)."""
    from omni_host.evaluate.checks import registry
    from omni_host.evaluate.facts import HostFacts
    from omni_host.evaluate.prior import NO_PRIOR, Prior
    from omni_host.model import Outcome, ProbeResult, Servers
    from omni_host.plan.policy import Policy

    baseline, tg = _vm_baseline()
    slow = _server(argv=("llama-server", "-t", "1"), counters=ServedCounters(
        predicted_tokens=sorted(baseline.tests[tg])[1] * 0.3 * 4, predicted_seconds=4.0))
    facts = HostFacts("h", {"serve.servers": ProbeResult(
        "serve.servers", "serve", Outcome.OBSERVED, fact=Servers((slow,)))})
    earlier = dataclasses.replace(slow, counters=ServedCounters(predicted_tokens=10,
                                                                predicted_seconds=1.0))
    prior = Prior(baseline=baseline, previous_audit="20261126T000000000Z-aaaaaa",
                  previous_servers={42: earlier})
    check = registry()["serve.tokens-per-s"]
    judged = check(facts, Policy(), META, prior)
    want = judge_served(META, (slow,), baseline, previous={42: earlier},
                        previous_audit="20261126T000000000Z-aaaaaa")
    assert judged == want and judged.status is Status.FAIL
    assert "threads: the bench ran 2, the server runs 1" in judged.summary
    alone = check(facts, Policy(), META, NO_PRIOR)
    assert alone == judge_served(META, (slow,), None) and alone.status is not Status.FAIL


def test_finish_keeps_the_results_as_the_checks_judged_them(tmp_path: Path) -> None:
    """Waivers, the Cold Case and the last bench are the report's layers; no verdict is
    judged again or patched after the checks (a store with the host's bench in it)."""
    import time as _time

    from omni_host.app.audit import Hosts, finish, keep
    from omni_host.model import FactSummary, Source
    from omni_host.report.history import load_history
    from omni_host.reports import HostReport

    baseline, tg = _vm_baseline()
    slow = _server(counters=ServedCounters(predicted_tokens=sorted(baseline.tests[tg])[1],
                                           predicted_seconds=4.0))
    # the previous audit saw the same server (pid 42): a use case that judged again with the
    # store would judge the window since it, and its verdict would differ from the check's
    first = HostReport("h", "local", "local", True, None, 0.1,
                       (judge_served(META, (slow,), None),), facts=FactSummary(servers=(slow,)))
    keep(finish(Hosts([first], Source.LIVE, _time.time()), inventory=None, waivers=(),
                history=None), tmp_path)
    again = dataclasses.replace(first, results=(judge_served(META, (slow,), baseline),))
    run = finish(Hosts([again], Source.LIVE, _time.time()), inventory=None, waivers=(),
                 history=load_history(tmp_path))
    (host,) = run.report.hosts
    assert host.results == again.results and host.cold_case is not None


@pytest.mark.parametrize("server, bench, same", [
    ("on", "1", True), ("off", "0", True), ("true", "1", True), ("auto", "1", False),
    ("75,25", "0.75/0.25", True), ("3,1", "0.75/0.25", True), ("1,1", "0.75/0.25", False),
    ("4", "4", True), ("4.0", "4", True), ("q8_0", "f16", False), ("Layer", "layer", True),
])
def test_a_value_spelled_otherwise_is_the_same_value(server: str, bench: str, same: bool) -> None:
    from omni_host.measure.serve import _same_value

    assert _same_value(server, bench) is same


def test_where_the_toolkit_lives_is_not_a_difference_but_what_changes_speed_is() -> None:
    """On the lent H100 a matching server differed from its bench only in CUDA_HOME,
    CUDA_VERSION and LD_LIBRARY_PATH (recorded with the bench, not compared)."""
    baseline, tg = _vm_baseline(**{"env.CUDA_HOME": "/usr/local/cuda", "env.CUDA_VERSION": "13.0.2",
                                   "env.LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
                                   "env.CUDA_VISIBLE_DEVICES": "0"})
    assert differences(_server(env={"CUDA_VISIBLE_DEVICES": "0"}), baseline, tg) == []
    assert differences(_server(env={"CUDA_VISIBLE_DEVICES": "0,1", "OMP_NUM_THREADS": "4"}),
                       baseline, tg) == [
        "environment CUDA_VISIBLE_DEVICES: the bench had '0', the server has '0,1'",
        "environment OMP_NUM_THREADS: the bench had unset, the server has '4'"]


def test_another_model_is_said_never_judged() -> None:
    baseline, _ = _vm_baseline()
    result = judge_served(META, (_server(model_fingerprint="other"),), baseline)
    assert result.status is Status.SKIP and "not comparable with the bench" in result.summary


def test_the_window_is_since_the_previous_audit_of_the_same_process() -> None:
    then = _server(counters=ServedCounters(predicted_tokens=1000, predicted_seconds=10))
    now = _server(counters=ServedCounters(predicted_tokens=1100, predicted_seconds=12))
    rate = served_rate(now, then, "A1")
    assert (rate.tokens, rate.seconds, rate.window) == (100, 2, "since the audit of A1")
    restarted = _server(started_at=2000.0, counters=now.counters)
    assert served_rate(restarted, then, "A1").window == "since it started"
    idle = _server(counters=ServedCounters(predicted_tokens=1010, predicted_seconds=10.1))
    assert served_rate(idle, then, "A1").window == "since it started"  # 10 new tokens: too few
    probed = _server(counters=idle.counters, probe=ServedProbe(24, 200.0))
    assert served_rate(probed, then, "A1").window == "one probe of 24 tokens"  # today's rate
    unused = _server(counters=ServedCounters(predicted_tokens=5, predicted_seconds=0.1))
    assert served_rate(unused, None, None) is None
    assert judge_served(META, (unused,), None).summary.endswith(
        "5 tokens served so far: too few to judge (send it requests, or audit with a probe)")


def test_the_concurrent_capture_names_shared_decodes() -> None:
    text = (SERVE / "llama-server-metrics_vm-2cpu_after-3-concurrent.txt").read_text()
    baseline, tg = _vm_baseline()
    diffs = differences(_server(counters=counters(text)), baseline, tg)
    shared = _sample(text, "llamacpp:n_busy_slots_per_decode")
    assert diffs == [f"concurrent requests: the bench decoded 1 sequence, the server "
                     f"{shared:.2f} requests at once on average (each one's tokens/s is its "
                     f"share of the decode)"]


# --- the helper's reads against hostile endpoints (real sockets on the loopback) ---------

@contextlib.contextmanager
def _endpoint(behaviour) -> Iterator[tuple[str, int]]:
    """A TCP server on the loopback that answers every connection with ``behaviour``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=behaviour, args=(conn, stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()
    finally:
        stop.set()
        thread.join()
        listener.close()


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(10)
    conn.close()


def _trickle(conn: socket.socket, stop: threading.Event) -> None:
    conn.recv(4096)
    with contextlib.suppress(OSError):
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n")
        while not stop.wait(0.2):
            conn.sendall(b"l")
    conn.close()


def _huge(conn: socket.socket, stop: threading.Event) -> None:
    conn.recv(4096)
    with contextlib.suppress(OSError):
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * (3 << 20))
    conn.close()


def _garbage(conn: socket.socket, stop: threading.Event) -> None:
    conn.recv(4096)
    conn.sendall(b"\x16\x03\x01 not http at all")
    conn.close()


@pytest.mark.parametrize("behaviour, message", [
    (_silent, "no whole answer within 0.5s"), (_trickle, "no whole answer within 0.5s"),
    (_huge, "answer over 1024 KiB"), (_garbage, "not an HTTP answer"),
])
def test_a_hostile_endpoint_is_one_line_in_bounded_time(behaviour, message: str) -> None:
    with _endpoint(behaviour) as address:
        start = time.monotonic()
        with pytest.raises((OSError, ValueError), match=re.escape(message)):
            helper.fetch(address, "GET", "/metrics", read_s=0.5)
        assert time.monotonic() - start < 2.0
        server: dict = {}
        helper._ask(server, address, probe=True)  # the audit's read: an error line, no raise
        assert server["metrics_error"].startswith(f"/metrics {address[0]}:{address[1]}: ")
        assert "metrics" not in server


# --- real llama-servers over the loopback sshd ---------------------------------------------

# One thread, bench and server alike: two threads on this 2-vCPU VM spin-wait for each other
# beside a busy loop (ordinary-machine): a two-thread server ran at 2.0 t/s there while its
# bench had measured ten times that, and the check rightly failed it.
BENCH_ARGS = ["-p", "16", "-n", "32", "-t", "1"]
# The tests' 127 MiB model generates a token in about 4 ms, where llama-server's own per-token
# work (sampling, the HTTP answer) is a large share: a server like its bench measured 0.64 of
# llama-bench's tg32 here. The tests judge at 0.25 (a real model's token takes 10-100 ms,
# where the default 0.5 holds: docs/serve.md).
MIN_FRACTION = 0.25


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return answer.read().decode()


def _complete(port: int, tokens: int = 32, key: str | None = None) -> None:
    body = json.dumps({"prompt": "Tell me a story", "n_predict": tokens, "ignore_eos": True,
                       "cache_prompt": False}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body,
                                     {"Content-Type": "application/json",
                                      **({"Authorization": f"Bearer {key}"} if key else {})})
    with urllib.request.urlopen(request, timeout=120) as answer:
        assert json.loads(answer.read())["timings"]["predicted_n"] == tokens


@contextlib.contextmanager
def _llama_server(model: Path, *args: str, binary: Path | None = None,
                  prefix: tuple[str, ...] = (), metrics: bool = True,
                  requests: int = 2, key: str | None = None) -> Iterator[tuple[int, int]]:
    """A real llama-server on the loopback, ``requests`` completions of 32 tokens served;
    yields (pid, port)."""
    port = int(args[args.index("--port") + 1]) if "--port" in args else free_port()
    argv = [*prefix, str(binary or LLAMA_CACHE / "bin" / "llama-server"), "-m", str(model),
            "--port", str(port), "-c", "256", *(("--metrics",) if metrics else ()), *args]
    # the environment a service manager gives it: none of this test run's variables
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root"}
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"llama-server exited {proc.returncode}: {argv}"
            try:
                if json.loads(_get(port, "/health")).get("status") == "ok":
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "llama-server did not come up in 120 s"
            time.sleep(0.2)
        for _ in range(requests):
            _complete(port, key=key)
        yield proc.pid, port
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def benched(sshd: Sshd, llama, tmp_path_factory: pytest.TempPathFactory):
    """The host's bench baseline of the tests' model, recorded by `omni-host bench` over the
    loopback sshd; returns (inventory, store, model)."""
    binary, model = llama
    assert (binary.parent / "llama-server").exists(), \
        f"no llama-server beside {binary}: run bash tests/llama_bench.sh (tests/setup.sh does)"
    root = tmp_path_factory.mktemp("served")
    # Two threads on this 2-vCPU VM spin-wait for each other: beside other work (a busy loop,
    # another test run) their repetitions spread past ±100% (measured). These tests are about
    # what a served rate is held to and what is named, not about a baseline's fitness
    # (tests/test_bench_trust.py): any run is let be the baseline.
    spec = {"llama_bench": str(binary), "model": str(model), "args": BENCH_ARGS,
            "repetitions": 3, "tolerance_pct": 30, "max_other_cpus": 4, "max_spread_pct": 10000}
    inv = sshd.inventory(root / "inv", {"loop": {"omni_bench": spec,
                                                 "omni_serve": {"min_fraction": MIN_FRACTION}}})
    store = root / "store"
    _baseline(sshd, inv, store)
    return inv, store, model


def _audit(sshd: Sshd, inv: Path, store: Path, pid: int, *extra: str) -> tuple[dict, dict]:
    """One audit over the loopback sshd; (the serve.tokens-per-s result, this server's part)."""
    result = run_cli("audit", "-i", str(inv), "loop", "--report-dir", str(store), "--format",
                     "json", "--known-hosts", str(sshd.known_hosts), "--ssh-config",
                     str(store.parent / "no-ssh-config"), *extra, timeout=120)
    assert result.stdout.strip(), result.stderr
    doc = json.loads(result.stdout)
    served = next(r for r in doc["hosts"][0]["results"] if r["id"] == "serve.tokens-per-s")
    mine = [s for s in served["details"]["servers"] if s["pid"] == pid]
    assert len(mine) == 1, served
    return served, mine[0]


@pytest.mark.system
def test_a_server_run_as_its_bench_passes_on_its_own_counters(sshd: Sshd, benched) -> None:
    inv, store, model = benched
    with _llama_server(model, "-t", "1") as (pid, port):
        _, first = _audit(sshd, inv, store, pid)
        text = _get(port, "/metrics")  # nothing served since the audit read it
        tokens = _sample(text, "llamacpp:tokens_predicted_total")
        seconds = _sample(text, "llamacpp:tokens_predicted_seconds_total")
        assert first["status"] == "pass", first
        assert first["served_ts"] == pytest.approx(tokens / seconds, rel=1e-3)
        assert (first["window"], first["tokens"]) == ("since it started", tokens)
        assert first["differences"] == [] and first["fraction"] >= MIN_FRACTION
        _complete(port)
        _, second = _audit(sshd, inv, store, pid)
        assert second["window"].startswith("since the audit of ") and second["tokens"] == 32
    _served_in_the_reports(store, first, second)


def _served_in_the_reports(store: Path, first: dict, second: dict) -> None:
    """The host view says the served rate in one line, Prometheus has it as gauges, and
    `report diff` shows it moving between the two audits."""
    from prometheus_client.parser import text_string_to_metric_families

    ids = [line.split()[0] for line in
           run_cli("report", "list", "--report-dir", str(store)).stdout.splitlines()
           if line.strip() and line.split()[0][:8].isdigit()]
    shown = run_cli("report", "show", ids[0], "--report-dir", str(store), "--format", "table")
    # the Served line holds this server's verdict (an operator's own server may come first)
    text = " ".join(shown.stdout.split())
    assert "Served: " in text and second["line"] in text[text.index("Served: "):]
    prom = run_cli("report", "show", ids[0], "--report-dir", str(store), "--format",
                   "prometheus").stdout
    gauges = {(s.name, s.labels.get("server")): s.value
              for f in text_string_to_metric_families(prom) for s in f.samples}
    assert gauges[("omni_host_served_tokens_per_second", second["server"])] == second["served_ts"]
    assert gauges[("omni_host_served_fraction_of_bench", second["server"])] == second["fraction"]
    page = run_cli("report", "show", ids[0], "--report-dir", str(store), "--format", "html").stdout
    # the served rate drawn beside the bench's generation test, both audits' points (issue 47)
    plot = next(p for p in re.findall(r'<figure class="plot">(.*?)</figure>', page, re.S)
                if 'aria-label="tg32: ' in p)
    served = re.findall(rf"<title>served by {re.escape(second['server'])} [^<]*: ([0-9.,]+) t/s",
                        plot)
    assert [float(v.replace(",", "")) for v in served][-2:] == pytest.approx(
        [first["served_ts"], second["served_ts"]], rel=0.01), plot
    diff = run_cli("report", "diff", ids[1], ids[0], "--report-dir", str(store)).stdout
    line = (f"tokens/s: served by {second['server']}: {first['served_ts']:.1f} -> "
            f"{second['served_ts']:.1f}")
    moved = abs(second["served_ts"] / first["served_ts"] - 1) >= 0.30  # the tests' tolerance_pct
    assert (line in diff) is moved, diff  # within the bench's tolerance: no change


@pytest.mark.system
@pytest.mark.parametrize("case", ["more threads", "affinity", "quota", "another binary"])
def test_each_induced_difference_is_named(sshd: Sshd, benched, tmp_path: Path,
                                          case: str) -> None:
    inv, store, model = benched
    args, prefix, binary = ["-t", "1"], (), None
    if case == "more threads":
        args = ["-t", "2"]
    elif case == "affinity":
        prefix = ("taskset", "-c", "0")
    elif case == "another binary":  # a rebuilt server: other bytes than the benched build's
        binary = tmp_path / "other" / "llama-server"
        binary.parent.mkdir()
        shutil.copy(LLAMA_CACHE / "bin" / "llama-server", binary)
        with binary.open("ab") as fh:
            fh.write(b"\0rebuilt")
    with _llama_server(model, *args, binary=binary, prefix=prefix) as (pid, _):
        quota = CpuQuota(pid, 0.5) if case == "quota" else None
        try:
            served, mine = _audit(sshd, inv, store, pid)
        finally:
            if quota is not None:
                quota.remove()
    want = {
        "more threads": "threads: the bench ran 1, the server runs 2",
        "affinity": "CPUs allowed: the bench had 2, the server has 1 (0)",
        "quota": f"CPU quota (cgroup): the bench had none, the server has 0.5 CPUs "
                 f"(/{quota.path.name})" if quota else "",
        "another binary": f"binary: the server runs {binary} (sha256 ",
    }[case]
    assert len(mine["differences"]) == 1 and mine["differences"][0].startswith(want), mine
    assert want in served["summary"]  # named in the finding, whatever the verdict


@pytest.mark.system
def test_a_server_without_metrics_is_not_evaluated_and_a_quiet_one_is_probed(
        sshd: Sshd, benched, tmp_path: Path) -> None:
    inv, store, model = benched
    with _llama_server(model, "-t", "1", metrics=False, requests=0) as (pid, _):
        _, mine = _audit(sshd, inv, store, pid)
    assert mine["status"] == "skip" and "(start it with --metrics)" in mine["line"]
    with _llama_server(model, "-t", "1", requests=0) as (pid, port):
        _, idle = _audit(sshd, inv, store, pid)
        assert idle["status"] == "skip" and "0 tokens served so far: too few" in idle["line"]
        _, probed = _audit(sshd, inv, store, pid, "-e", json.dumps(
            {"omni_serve": {"min_fraction": MIN_FRACTION, "probe": True}}))
        assert probed["window"] == "one probe of 24 tokens" and probed["status"] == "pass"
        assert _sample(_get(port, "/metrics"), "llamacpp:tokens_predicted_total") == 24


def _server_image() -> str:
    """An image of the tests' llama-server and the libraries it links (ldd), made with
    `docker import`: there is no registry to pull from. Labelled with the binary's sha256 and
    made again when the cached build changed (an image of an older build would run another
    binary than the one benched)."""
    import hashlib
    import tarfile
    import tempfile

    binary = LLAMA_CACHE / "bin" / "llama-server"
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    label = subprocess.run(["docker", "image", "inspect", "--format",
                            '{{index .Config.Labels "omni.binary"}}', SERVER_IMAGE],
                           capture_output=True, text=True, check=False)
    if label.returncode == 0 and label.stdout.strip() == digest:
        return SERVER_IMAGE
    libs = re.findall(r"(/\S+) \(0x", subprocess.run(["ldd", str(binary)], capture_output=True,
                                                     text=True, check=True).stdout)
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        with tarfile.open(rootfs, "w") as tar:
            tar.add(binary, arcname="usr/local/bin/llama-server")
            for lib in libs:
                tar.add(os.path.realpath(lib), arcname=lib.lstrip("/"))
        subprocess.run(["docker", "import", "--change",
                        'ENTRYPOINT ["/usr/local/bin/llama-server"]', "--change",
                        f"LABEL omni.binary={digest}", str(rootfs), SERVER_IMAGE],
                       check=True, capture_output=True)
    return SERVER_IMAGE


def container_server(model: Path, name: str, docker: tuple[str, ...] = (),
                     server: tuple[str, ...] = ()) -> tuple[int, int]:
    """The tests' llama-server in a container named ``name`` (``docker``: options of docker
    run; ``server``: more of llama-server's), the model's directory mounted read-only, its
    port published on the loopback, up and healthy: (its pid, the published port). The caller
    removes the container."""
    port = free_port()
    subprocess.run(["docker", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8080",
                    *docker, "-v", f"{model.parent}:/models:ro", _server_image(), "-m",
                    f"/models/{model.name}", "--host", "0.0.0.0", "--port", "8080", "-t", "1",
                    "-c", "256", *server], check=True, capture_output=True)
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(_get(port, "/health")).get("status") == "ok":
                break
        assert time.monotonic() < deadline, subprocess.run(
            ["docker", "logs", name], capture_output=True, text=True).stderr[-2000:]
        time.sleep(0.3)
    pid = int(subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", name],
                             capture_output=True, text=True, check=True).stdout)
    return pid, port


@pytest.mark.system
def test_a_server_in_a_container_is_read_through_its_published_port(
        sshd: Sshd, benched, docker_image: str) -> None:
    """As the lessons' box runs it: llama-server in a container on Docker's bridge, the model
    mounted read-only, its port published; read through that port, its model seen through
    the container's mounts (the same file as the bench's), its container named."""
    inv, store, model = benched
    name = f"omni-test-served-{os.getpid()}"
    try:
        pid, port = container_server(model, name, server=("--metrics",))
        _complete(port)
        _complete(port)
        container = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", name],
                                   capture_output=True, text=True, check=True).stdout.strip()
        served, mine = _audit(sshd, inv, store, pid)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    assert mine["server"] == f"llama-server 127.0.0.1:{port} in container {container[:12]}"
    assert mine["model"] == f"/models/{model.name}" and "served_ts" in mine
    assert "not comparable" not in mine["line"]  # the bench's model, seen through the mount
    # One thread, as its bench: beside a busy loop (ordinary-machine) this container's two
    # threads served 1.9 t/s, spin-waiting for each other. Nothing differs from the bench
    assert mine["differences"] == [], mine
    assert mine["status"] == "pass", mine


# --- the stability watch ---------------------------------------------------------------------

@contextlib.contextmanager
def _traffic(port: int) -> Iterator[None]:
    """Requests of 64 tokens, one after another, for as long as the block runs."""
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError, ValueError, AssertionError):
                _complete(port, 64)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=120)


def _watch(sshd: Sshd, inv: Path, store: Path, *args: str) -> subprocess.Popen:
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "omni_host", "serve", "watch", "-i", str(inv), "loop",
         "--report-dir", str(store), "--format", "json", "--known-hosts", str(sshd.known_hosts),
         "--ssh-config", str(store.parent / "no-ssh-config"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stability(stdout: str) -> dict:
    doc = json.loads(stdout)
    assert doc["source"] == "serve-watch"
    (result,) = doc["hosts"][0]["results"]
    assert result["id"] == "serve.stability"
    return result


@pytest.mark.system
def test_serve_watch_catches_a_drop(sshd: Sshd, benched) -> None:
    """A steady server, then a CPU quota on it for the last third of the window. One thread:
    two spin-wait for each other beside a busy loop (2.9 t/s measured there, too few tokens
    for any interval's rate)."""
    inv, store, model = benched
    with _llama_server(model, "-t", "1", requests=0) as (pid, port), _traffic(port):
        # 3 s apart: a quota'd interval still holds the 32 tokens a rate needs
        watch = _watch(sshd, inv, store, "--for", "24s", "--every", "3s")
        time.sleep(16)
        quota = CpuQuota(pid, 0.2)
        try:
            out, err = watch.communicate(timeout=120)
        finally:
            quota.remove()
    result = _stability(out)
    assert result["status"] == "warn", result["summary"]
    assert "t/s fell to" in result["summary"] and "restarted" not in result["summary"]
    mine = next(s for s in result["details"]["servers"] if s["server"] == f"127.0.0.1:{port}")
    rates = [r for _, r, _ in mine["rates"]]
    assert min(rates) < 0.5 * mine["median_ts"] <= max(rates)
    assert err.count("[") >= 9 and "watch stored in" in err  # a line per sample, then where


@pytest.mark.system
def test_serve_watch_catches_a_restart(sshd: Sshd, benched) -> None:
    inv, store, model = benched
    port = free_port()
    watch = _watch(sshd, inv, store, "--for", "10s", "--every", "1s")
    with _llama_server(model, "-t", "1", "--port", str(port), requests=1) as (first, _):
        time.sleep(4)
    with _llama_server(model, "-t", "1", "--port", str(port), requests=1) as (second, _):
        out, _ = watch.communicate(timeout=120)
    assert watch.returncode == 1
    result = _stability(out)
    assert result["status"] == "fail"
    assert f"127.0.0.1:{port} restarted between " in result["summary"]
    assert f"(pid {first} -> {second}, " in result["summary"]  # both pids, the time between
    assert f"pid {first} not seen answering again" not in result["summary"]


@pytest.mark.system
def test_ctrl_c_gives_the_partial_verdict(sshd: Sshd, benched) -> None:
    import signal

    inv, store, model = benched
    with _llama_server(model, "-t", "1", requests=1):
        watch = _watch(sshd, inv, store, "--for", "10m", "--every", "1s")
        time.sleep(4)
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=60)
    assert watch.returncode == 130
    result = _stability(out)
    assert "(interrupted: a partial window of the 600 s asked)" in result["summary"]
    assert result["status"] != "pass"  # a gate cut short passes nothing (issue 47)
    assert result["details"]["interrupted"] is True
    assert "partial (interrupted) watch stored in" in err and "Traceback" not in err


def _samples(*rounds: tuple[int, float, float, int]) -> list:
    """Samples of one server on :8080: (pid, tokens, seconds, rss MiB) each round, 5 s apart."""
    from omni_host.measure.watch import Sample

    return [Sample(1000.0 + 5 * i, (_server(pid=pid, started_at=float(pid), rss_kib=rss * 1024,
                                            counters=ServedCounters(predicted_tokens=tokens,
                                                                    predicted_seconds=seconds)),))
            for i, (pid, tokens, seconds, rss) in enumerate(rounds)]


def test_the_watch_judges_restarts_drops_and_memory_after_warm_up() -> None:
    from omni_host.measure.watch import judge_watch

    meta = catalog()["serve.stability"]
    steady = [(1, 100 * i, 1.0 * i, 600) for i in range(9)]
    assert judge_watch(meta, _samples(*steady)).status is Status.PASS
    # the lent H100's first 25 s: 635 -> 1,004 MiB under its first requests, then flat
    warm = [(1, 100 * i, 1.0 * i, rss) for i, rss in enumerate(
        [635, 900, 1004, 1004, 1004, 1004, 1004, 1004, 1004])]
    assert judge_watch(meta, _samples(*warm)).status is Status.PASS
    leak = [(1, 100 * i, 1.0 * i, 600 + 200 * i) for i in range(9)]
    result = judge_watch(meta, _samples(*leak))
    assert result.status is Status.WARN and "memory grew: resident 1200 -> 2200 MiB" in \
        result.summary
    drop = [(1, 100 * i, 1.0 * i if i < 7 else 6 + 4.0 * (i - 6), 600) for i in range(9)]
    result = judge_watch(meta, _samples(*drop))
    assert result.status is Status.WARN and "t/s fell to 25.0" in result.summary
    restart = steady[:4] + [(2, 100 * i, 1.0 * i, 600) for i in range(1, 6)]
    result = judge_watch(meta, _samples(*restart))
    assert result.status is Status.FAIL and "(pid 1 -> 2, 5 s)" in result.summary
    idle = [(1, 0, 0.0, 600)] * 4
    assert judge_watch(meta, _samples(*idle)).status is Status.SKIP
    # interrupted: what it saw stands, but a window cut short passes no gate (issue 47)
    cut = judge_watch(meta, _samples(*steady), interrupted=True, asked_s=3600)
    assert cut.status is Status.SKIP and cut.summary.startswith(
        "9 samples over 40 s (interrupted: a partial window of the 3600 s asked): partial: no "
        "stability verdict"), cut.summary
    assert judge_watch(meta, _samples(*restart), interrupted=True).status is Status.FAIL


def test_a_restart_names_both_pids_and_the_gap_once() -> None:
    """A restart under a watch read `did not answer at ... (Connection refused)` for each
    sample of the gap; now it is one restart naming both pids, the seconds between and the
    samples without an answer; a server down when the window ends says its pid never came
    back (issue 47)."""
    from omni_host.measure.watch import Sample, judge_watch

    meta = catalog()["serve.stability"]
    samples = _samples(*[(1, 100 * i, 1.0 * i, 600) for i in range(4)])
    down = _server(pid=1, started_at=1.0, counters=None,
                   metrics_error="/metrics 127.0.0.1:8080: Connection refused")
    samples += [Sample(1020.0, (down,)), Sample(1025.0, ())]
    samples += [Sample(1030.0 + 5 * i, (_server(pid=2, started_at=2.0, rss_kib=600 * 1024,
                                                counters=ServedCounters(predicted_tokens=100 * i,
                                                                    predicted_seconds=1.0 * i)),))
                for i in range(1, 4)]
    result = judge_watch(meta, samples)
    assert result.status is Status.FAIL
    assert "restarted between 00:16:55 and 00:17:15 (pid 1 -> 2, 20 s, 2 sample(s) without an " \
        "answer)" in result.summary, result.summary
    assert "did not answer" not in result.summary
    ended = judge_watch(meta, samples[:6])
    assert "did not answer at 00:17:00 to 00:17:05 (2 sample(s): gone); pid 1 not seen " \
        "answering again" in ended.summary, ended.summary


def test_each_sample_line_gives_the_intervals_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """The lines gave cumulative tokens; now the rate of the interval since the previous
    sample of the same process, and a dead process beside a live one on its port is left out."""
    from omni_host.cli.serve import _Progress
    from omni_host.measure.watch import Sample

    progress = _Progress()
    for i, (tokens, seconds) in enumerate([(100, 1.0), (164, 3.0), (170, 3.5)]):
        live = _server(pid=7, started_at=7.0, rss_kib=512 * 1024,
                       counters=ServedCounters(predicted_tokens=tokens,
                                                 predicted_seconds=seconds))
        dead = _server(pid=6, started_at=6.0, counters=None, metrics_error="gone")
        progress(i + 1, 3, Sample(1000.0 + i, (dead, live) if i else (live,)))
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["[1/3] 127.0.0.1:8080 pid 7: first sample, 512 MiB resident",
                     "[2/3] 127.0.0.1:8080 pid 7: 32.0 t/s (64 tokens), 512 MiB resident",
                     "[3/3] 127.0.0.1:8080 pid 7: 6 tokens (too few for a rate), 512 MiB "
                     "resident"], lines


def test_a_restarted_server_that_fit_placed_elsewhere_is_named() -> None:
    """A server under llama.cpp's --fit (no -ngl) restarted with the same args and model while
    another process held GPU memory: fit put less on the GPU. The helper keeps what the process
    holds on each GPU (nvidia-smi's compute processes, by GPU UUID); the next audit names the
    move, the old and new pid and why, and warns. The same share again, or a server whose args
    changed, says nothing of it."""
    first = {"pid": 41}
    helper._on_gpus(first, [{"pid": 41, "name": "llama-server", "mib": 17400, "gpu": "GPU-53e2"},
                            {"pid": 41, "name": "llama-server", "mib": 5300, "gpu": "GPU-9a10"}])
    assert first["gpu_memory_by_gpu"] == {"GPU-53e2": 17400, "GPU-9a10": 5300}
    argv = ("llama-server", "-m", "/m.gguf", "-c", "8192")
    baseline, tg = _vm_baseline()
    bench_ts = sorted(baseline.tests[tg])[1]
    fast = ServedCounters(predicted_tokens=bench_ts * 4, predicted_seconds=4.0)
    before = _server(pid=41, argv=argv, gpu_memory_by_gpu=(("GPU-53e2", 17400), ("GPU-9a10", 5300)))
    after = _server(pid=42, argv=argv, gpu_memory_by_gpu=(("GPU-53e2", 9100), ("GPU-9a10", 5200)),
                    counters=fast)
    result = judge_served(META, (after,), baseline, previous={41: before},
                          previous_audit="20261127T0650Z-aaaa")
    assert result.status is Status.WARN and result.summary.count("moved") == 1
    moved = result.details["servers"][0]["placement_moved"]
    assert "since the audit of 20261127T0650Z-aaaa (pid 41" in moved and "pid 42" in moved
    assert "GPU-53e2 17.0 -> 8.9 GiB" in moved and "GPU-9a10" not in moved  # 100 MiB: not moved
    assert "--fit" in moved
    slow = dataclasses.replace(after, counters=ServedCounters(predicted_tokens=bench_ts * 0.3 * 4,
                                                              predicted_seconds=4.0))
    failed = judge_served(META, (slow,), baseline, previous={41: before})
    assert failed.status is Status.FAIL  # below its bench: the move is the first difference
    assert failed.summary.split("below 50%: ", 1)[1].startswith("its GPU memory moved")
    same = dataclasses.replace(after, gpu_memory_by_gpu=before.gpu_memory_by_gpu)
    assert "placement_moved" not in judge_served(META, (same,), baseline, previous={41: before}
                                                 ).details["servers"][0]
    other = dataclasses.replace(after, argv=(*argv, "-ngl", "20"))
    assert "placement_moved" not in judge_served(META, (other,), baseline, previous={41: before}
                                                 ).details["servers"][0]


def test_a_busy_server_is_never_sent_the_probe() -> None:
    """The probe goes to an idle server only: its own metrics say no request is processing."""
    busy = {"metrics": "llamacpp:requests_processing 2\n"}
    assert helper._probe(busy, ("127.0.0.1", 9)) == {"skipped": "busy: 2 request(s) processing"}
    unknown = {"metrics": "# no such line\n"}
    assert helper._probe(unknown, ("127.0.0.1", 9))["skipped"].startswith("busy: ?")
    assert "start it with --metrics" in helper._probe({}, ("127.0.0.1", 9))["skipped"]


def test_a_gpu_co_tenant_is_named_first_by_the_served_rate_and_the_watch() -> None:
    """A server at 8% of its bench beside a competing GPU process said "no difference in how
    it runs was found" and the watch saw the fall but named nothing (issue 44). The helper now
    reads the compute processes once (the process and memory of the H100 capture under a load,
    nvidia-smi-query-compute-apps_busy.csv), and both
    name the process first."""
    from omni_host.measure.watch import Sample, judge_watch

    apps = [{"pid": 42, "name": "llama-server", "mib": 2100, "gpu": "GPU-53e2"},
            {"pid": 5632, "name": "python3", "mib": 874, "gpu": "GPU-53e2"},
            {"pid": 77, "name": "other", "mib": 500, "gpu": "GPU-ffff"}]
    doc = {"pid": 42}
    helper._on_gpus(doc, apps)
    assert doc == {"pid": 42, "gpu_memory_mib": 2100, "gpu_memory_by_gpu": {"GPU-53e2": 2100},
                   "gpu_cotenants": ["5632 python3 (874 MiB)"]}  # not the other GPU's
    baseline, _ = _vm_baseline()
    slow = _server(gpu_cotenants=tuple(doc["gpu_cotenants"]),
                   counters=ServedCounters(predicted_tokens=200, predicted_seconds=200.0))
    result = judge_served(META, (slow,), baseline, min_fraction=0.5)
    assert result.status is Status.FAIL
    why = result.summary.split("below 50%: ", 1)[1]
    assert why.startswith("other processes on its GPUs: 5632 python3 (874 MiB)")
    rounds = [(100 * i, 1.0 * i if i < 7 else 6 + 4.0 * (i - 6)) for i in range(9)]
    samples = [Sample(1000.0 + 5 * i, (_server(started_at=1.0, counters=ServedCounters(
        predicted_tokens=t, predicted_seconds=s), gpu_cotenants=tuple(doc["gpu_cotenants"])
        if i >= 7 else ()),)) for i, (t, s) in enumerate(rounds)]
    watched = judge_watch(catalog()["serve.stability"], samples)
    assert watched.status is Status.WARN
    assert "other processes on its GPUs while it fell: 5632 python3 (874 MiB)" in \
        watched.summary.split(";")[0]


def test_a_server_whose_metrics_never_answer_is_not_watched_and_says_why() -> None:
    """An operator's server that asks for an API key answers /metrics with 401 every time:
    the watch failed every sample of it as "did not answer" (the gate failed on any such
    host); it is not watched, said, and the other server is judged as before. One that
    answered and then stopped still fails."""
    from omni_host.measure.watch import Sample, judge_watch

    meta = catalog()["serve.stability"]
    locked = _server(pid=7, started_at=7.0, address="127.0.0.1:18081", counters=None,
                     metrics_error="/metrics 127.0.0.1:18081: HTTP 401 Invalid API Key")
    samples = [Sample(1000.0 + 5 * i, (s.servers[0], locked))
               for i, s in enumerate(_samples(*[(1, 100 * i, 1.0 * i, 600) for i in range(9)]))]
    result = judge_watch(meta, samples)
    assert result.status is Status.PASS, result.summary
    assert "127.0.0.1:18081 not watched: /metrics 127.0.0.1:18081: HTTP 401" in result.summary
    stopped = [Sample(s.at, (s.servers[0], locked if i >= 5 else dataclasses.replace(
        locked, counters=ServedCounters(predicted_tokens=10.0 * i, predicted_seconds=1.0 * i),
        metrics_error=None))) for i, s in enumerate(samples)]
    assert judge_watch(meta, stopped).status is Status.FAIL


@pytest.mark.system
def test_a_server_with_an_api_key_is_read(sshd: Sshd, benched, tmp_path: Path) -> None:
    """Production servers run with keys (issue 47: such a server was never read, and was told
    "Invalid API Key (start it with --metrics)" although started with --metrics). The helper
    asks with the server's own key where it can read it (its --api-key, its key file), else
    with omni_serve.api_key (vaulted here); a 401 with no key is said as such; the key is in no
    stored file and no output."""
    inv, store, model = benched
    key = "sk-omni-test-5be1c0d3"
    with _llama_server(model, "-t", "1", "--api-key", key, key=key) as (pid, _):
        _, mine = _audit(sshd, inv, store, pid)
        assert mine["status"] == "pass", mine  # read with the key of its own argv
    key_file = tmp_path / "keys"
    key_file.write_text(f"{key}\n")
    key_file.chmod(0o600)
    with _llama_server(model, "-t", "1", "--api-key-file", str(key_file), key=key) as (pid, port):
        _, mine = _audit(sshd, inv, store, pid)
        assert mine["status"] == "pass", mine  # read with the key of its key file
        key_file.unlink()  # read at its start and gone: the helper has no key of its own now
        _, blind = _audit(sshd, inv, store, pid)
        assert blind["status"] == "skip", blind
        assert "HTTP 401: the server asks for an API key, and none was found (set " \
            "omni_serve.api_key, vault welcome)" in blind["line"], blind
        assert "start it with --metrics" not in blind["line"]
        watched = [_watch(sshd, inv, store, "--for", "3s", "--every", "1s").communicate(
            timeout=120)]  # no key anywhere
        password = tmp_path / "vault-pass"
        password.write_text("omni-test-vault\n")
        vaulted = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string",
             "--vault-password-file", str(password), key, "--name", "api_key"],
            capture_output=True, text=True, check=True).stdout
        serve_vars = inv / "host_vars" / "loop.yml"
        serve_vars.parent.mkdir(exist_ok=True)
        indented = vaulted.replace("\n", "\n  ").rstrip()
        serve_vars.write_text(f"omni_serve:\n  min_fraction: {MIN_FRACTION}\n  {indented}\n")
        try:
            _, given = _audit(sshd, inv, store, pid, "--vault-password-file", str(password))
            # serve watch asks through the same credential path (issue 61: it ignored a
            # vaulted key, then advised setting it, after 13 rounds of 401)
            watched.append(_watch(sshd, inv, store, "--for", "3s", "--every", "1s",
                                  "--vault-password-file", str(password)).communicate(timeout=120))
        finally:
            serve_vars.unlink()
        assert given["status"] == "pass", given  # read with the operator's key
        assert all(out.strip() for out, _ in watched), [err[-600:] for _, err in watched]
        blind_watch, keyed_watch = (next(s for s in _stability(out)["details"]["servers"]
                                         if s["server"] == f"127.0.0.1:{port}")
                                    for out, _ in watched)
        assert "HTTP 401" in blind_watch["not_watched"], blind_watch  # no key anywhere
        assert "not_watched" not in keyed_watch and keyed_watch["memory"], keyed_watch
        assert not any(key in out + err for out, err in watched)
    leaked = [str(p) for p in store.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert not leaked, leaked


def test_a_watch_of_a_pattern_of_two_hosts_is_refused_before_any_connection(tmp_path: Path) -> None:
    """The watch resolves its hosts itself (the command line hands it the inventory, the
    pattern and the -e values): a pattern of two hosts is refused by name, exit 2, before any
    host is reached (the hosts here do not exist) and nothing is stored."""
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpus]\ngpu01 ansible_host=192.0.2.1\ngpu02 ansible_host=192.0.2.2\n")
    store = tmp_path / "store"
    result = run_cli("serve", "watch", "-i", str(inv), "gpus", "--for", "2s", "--every", "1s",
                     "--report-dir", str(store), timeout=30)
    assert result.code == 2, result.stderr
    assert "serve watch watches one host; the pattern selects 2" in result.stderr
    assert not store.exists()
