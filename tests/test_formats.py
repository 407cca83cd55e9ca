"""Report formats as their consumers read them: the HTML in a real headless Chromium, JUnit
through junitparser, the Prometheus textfile through prometheus_client's parser."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, run_cli
from junitparser import Error, Failure, JUnitXml, Skipped
from prometheus_client.parser import text_string_to_metric_families

ARTIFACTS = REPO / "tests" / "artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def chromium(*args: str, user_dir: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed (run tests/setup.sh)")
    return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={user_dir}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.system  # headless Chromium
def test_html_report_renders_in_chromium(two_audits: Path, tmp_path: Path) -> None:
    html = tmp_path / "sentinel.html"
    shown = run_cli("report", "show", "latest", "--format", "html", "--output", str(html),
                    "--report-dir", str(two_audits))
    assert shown.code == 0, shown.stderr
    text = html.read_text()
    assert "http://" not in text and "https://" not in text and " src=" not in text  # self-contained
    pdf = tmp_path / "sentinel.pdf"
    printed = chromium("--no-pdf-header-footer", f"--print-to-pdf={pdf}", html.as_uri(),
                       user_dir=tmp_path / "ud1")
    assert pdf.is_file(), printed.stderr[-2000:]
    seen = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout
    for heading in ("omni-host Sentinel audit", "System", "Software", "Strategic", "Cold Case"):
        assert heading in seen, heading
    assert "FAIL" in seen and "swap.capacity" in seen  # the badge, upper-cased by CSS
    stored = json.loads(sorted(two_audits.glob("*/report.json"))[-1].read_text())
    swap = next(r for r in stored["hosts"][0]["results"] if r["id"] == "swap.capacity")
    assert swap["summary"].split(",")[0] in " ".join(seen.split())  # "no active swap" or "64 MiB"
    # a failure's fix is on the page as printed, without a click (its details are open)
    flat = " ".join(seen.split())
    assert "Fix: preview playbook swap.yml (add --apply to run it, then it re-audits): " \
        "omni-host remediate" in flat, flat[:3000]
    assert "KTransformers" in seen and "vLLM" in seen
    # the timeline: swap.capacity passed in the first audit and fails in the second
    dom = chromium("--dump-dom", html.as_uri(), user_dir=tmp_path / "ud2").stdout
    row = dom[dom.index('aria-label="history of swap.capacity"'):]
    row = row[: row.index("</summary>")]
    assert row.count(' title="') == 2 and row.index(": pass") < row.index(": fail")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "sentinel-report.png"
    chromium(f"--screenshot={shot}", "--window-size=1280,1600", html.as_uri(),
             user_dir=tmp_path / "ud3")
    assert shot.is_file() and shot.stat().st_size > 10_000


def test_junit_is_accepted_by_junitparser(two_audits: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit.xml"
    assert run_cli("report", "show", "latest", "--format", "junit", "--output", str(out),
                   "--report-dir", str(two_audits)).code == 0
    xml = JUnitXml.fromfile(str(out))
    (suite,) = list(xml)
    assert suite.name == "thisbox"
    # ISO 8601 as the Ant JUnit schema's ISO8601_DATETIME_PATTERN has it, in UTC: the time
    # the host's bundle was collected, as the stored report says
    stored = json.loads(sorted(two_audits.glob("*/report.json"))[-1].read_text())
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", suite.timestamp)
    collected = stored["hosts"][0]["collected_at"]
    assert dt.datetime.fromisoformat(suite.timestamp).replace(tzinfo=dt.timezone.utc) == \
        dt.datetime.fromtimestamp(int(collected), dt.timezone.utc)
    cases = {case.name: case for case in suite}
    assert any(isinstance(r, Failure) for r in cases["swap.capacity"].result)
    assert cases["numa.nps1"].is_passed
    assert any(isinstance(r, Skipped) for r in cases["containers.glibc-tunables"].result)
    assert suite.failures == sum(1 for c in suite if any(isinstance(r, Failure) for r in c.result))
    assert suite.tests == len(cases)
    assert not any(isinstance(r, Error) for c in suite for r in c.result)


def test_prometheus_textfile_parses(two_audits: Path, tmp_path: Path) -> None:
    out = tmp_path / "omni_host.prom"
    assert run_cli("report", "show", "latest", "--format", "prometheus", "--output", str(out),
                   "--report-dir", str(two_audits)).code == 0
    families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    assert {"omni_host_reachable", "omni_host_check_status", "omni_host_check_failing",
            "omni_host_audit_timestamp_seconds"} <= set(families)
    failing = {s.labels["check"]: s.value for s in families["omni_host_check_failing"].samples}
    assert failing["swap.capacity"] == 1 and failing["numa.nps1"] == 0
    assert families["omni_host_reachable"].samples[0].value == 1


def test_prometheus_output_is_written_atomically(tmp_path: Path) -> None:
    out = tmp_path / "textfile" / "omni_host.prom"
    out.parent.mkdir()
    result = run_cli("audit", "--no-store", "--format", "prometheus", "--output", str(out))
    assert result.code == 1 and out.is_file()
    assert [p.name for p in out.parent.iterdir()] == ["omni_host.prom"]  # no temporary left
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name for f in text_string_to_metric_families(out.read_text())}
    assert {"omni_host_reachable", "omni_host_check_status"} <= families  # whole, parseable


def _findings(dom: str) -> list[dict[str, str | bool]]:
    """The findings as Chromium left them after the page's script ran."""
    import re

    return [{"status": m.group(2), "hidden": " hidden" in m.group(0), "open": " open" in m.group(0)}
            for m in re.finditer(r'<details class="finding f-(\w+)"[^>]*data-status="(\w+)"[^>]*>',
                                 dom)]


@pytest.mark.system  # headless Chromium
def test_html_fleet_report_matrix_filters_and_evidence_in_chromium(tmp_path: Path) -> None:
    """Two real GPU machines (one with a waiver) and an unreachable host: the matrix comes
    first, the filters (set here from the address, as a shared link would) hide what they
    should, and each finding opens to its evidence. Screenshots: tests/artifacts/."""
    from test_views import fixed_report

    from omni_host.report.views import render

    report, ctx = fixed_report()
    html = tmp_path / "fleet.html"
    html.write_text(render("html", report, ctx), encoding="utf-8")
    dom = chromium("--dump-dom", html.as_uri(), user_dir=tmp_path / "ud1").stdout
    matrix = dom[dom.index('<table class="matrix"'):dom.index("</table>")]
    assert dom.index('class="matrix"') < dom.index('class="finding')  # the overview first
    assert matrix.count("<tr>") == 1 + len(report.hosts)
    assert 'title="swap.capacity on h200-x2: waived"' in matrix
    assert "unreachable: cannot connect to gone.lab:22" in matrix
    everything = _findings(dom)
    assert everything and not any(f["hidden"] for f in everything)
    # failures open (their fix shows without a click), the rest closed
    assert all(f["open"] == (f["status"] in ("fail", "error")) for f in everything)
    statuses = [f["status"] for f in everything]
    assert statuses.index("fail") < statuses.index("pass")  # failures first

    shown = f"{html.as_uri()}#status=fail,waived&open=1"
    dom = chromium("--dump-dom", shown, user_dir=tmp_path / "ud2").stdout
    filtered = _findings(dom)
    assert {f["status"] for f in filtered if not f["hidden"]} == {"fail", "waived"}
    assert all(f["hidden"] for f in filtered if f["status"] not in ("fail", "waived"))
    assert all(f["open"] for f in filtered)
    waived = dom[dom.index('data-status="waived"'):]
    waived = waived[:waived.index("</details>")]
    assert "Waived by <strong>ops-lead</strong> until 2027-03-31" in waived
    assert "Evidence (mem.swaps): <code>$ cat /proc/swaps</code>" in waived

    ARTIFACTS.mkdir(exist_ok=True)
    for name, url in (("fleet-report.png", html.as_uri()), ("fleet-failures-open.png", shown)):
        shot = ARTIFACTS / name
        chromium(f"--screenshot={shot}", "--window-size=1280,1400", url,
                 user_dir=tmp_path / f"ud-{name}")
        assert shot.is_file() and shot.stat().st_size > 10_000


def _replayed_store(tmp_path: Path) -> Path:
    """The lent H100's drop series (tests/fixtures/captures/bench-h100-quiet/drops: a baseline,
    unchanged runs, then runs under a competing GPU load), judged and stored in the order it
    ran, as ``omni-host bench`` stored it there."""
    from test_quiet_sentinel import _bundles, _replay

    store = tmp_path / "store"
    _replay(_bundles("drops", tmp_path), store)
    return store


@pytest.mark.system  # headless Chromium
def test_the_tokens_plots_render_in_chromium(tmp_path: Path) -> None:
    """The HTML report's plots (issue 47), drawn as inline SVG with no script: each bench test
    over time with dated ticks, the baseline and the band the bench judged within, the
    baseline's run and the disturbed or failing runs marked; read from what Chromium printed
    (pdftotext) and its DOM; a screenshot in tests/artifacts/."""
    store = _replayed_store(tmp_path)
    html = tmp_path / "bench.html"
    shown = run_cli("report", "show", "latest", "--format", "html", "--output", str(html),
                    "--report-dir", str(store))
    assert shown.code == 0, shown.stderr
    page = html.read_text()
    plots = re.findall(r'<figure class="plot">(.*?)</figure>', page, re.S)
    assert len(plots) == 2, len(plots)  # pp512 and tg128
    runs = len(list(store.iterdir()))
    for plot in plots:
        assert "<script" not in plot and f": {runs} runs, " in plot  # every stored bench
        assert plot.count("(baseline)</title>") == 1 and "(disturbed" in plot  # the load's runs
        assert "baseline " in plot and "\u00b1" in plot  # the line and its band, labelled
    pdf = tmp_path / "bench.pdf"
    printed = chromium("--no-pdf-header-footer", f"--print-to-pdf={pdf}", html.as_uri(),
                       user_dir=tmp_path / "ud1")
    assert pdf.is_file(), printed.stderr[-2000:]
    seen = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout
    assert "baseline run" in seen and "disturbed" in seen and "UTC" in seen, seen[:3000]
    assert re.search(r"\d\d:\d\d:\d\d", seen)  # the ticks (a replay spans seconds), as read
    dom = chromium("--dump-dom", html.as_uri(), user_dir=tmp_path / "ud2").stdout
    assert dom.count("<svg") >= 2 and "polyline" in dom
    # a fleet's matrix has a tokens/s column: the latest verdict, the generation test against
    # its baseline (the stored verdict's own reference) and against its ceiling
    from omni_host.report.history import load_history
    from omni_host.report.views import context, render

    stored = load_history(store).audits[0].report
    perf = stored.hosts[0].result("perf.tokens-per-s")
    assert perf is not None
    tg = perf.details["verdicts"]["tg128"]
    of_base = perf.details["tests"]["tg128"]["center_ts"] / tg["reference_ts"]
    fleet = dataclasses.replace(stored, hosts=(
        stored.hosts[0], dataclasses.replace(stored.hosts[0], host="gpu-2")))
    page = render("html", fleet, context("html", fleet, lambda: load_history(store)))
    matrix = page[page.index('<table class="matrix"'):page.index("</table>")]
    assert '<th scope="col">tokens/s</th>' in matrix
    assert matrix.count(f'<td class="small s-{perf.status.value}" title="latest bench of ') == 2
    assert f"{of_base:.0%} of baseline" in matrix, matrix[:2000]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "tokens-plots.png"
    chromium(f"--screenshot={shot}", "--window-size=1400,900", html.as_uri(),
             user_dir=tmp_path / "ud3")
    assert shot.is_file() and shot.stat().st_size > 10_000


@pytest.mark.system  # headless Chromium
def test_a_watch_report_plots_its_own_samples_in_chromium(tmp_path: Path) -> None:
    """A 1-hour stability gate should show its samples: the watch's rate per interval and its
    memory per sample, each a plot (the rate's median as its line)."""
    from test_serve import _samples

    from omni_host.app.audit import Hosts, finish, keep
    from omni_host.evaluate.checks import catalog
    from omni_host.measure.watch import judge_watch
    from omni_host.reports import HostReport

    rounds = [(1, 100 * i, 1.0 * i if i < 7 else 6 + 4.0 * (i - 6), 600 + 10 * i)
              for i in range(9)]
    result = judge_watch(catalog()["serve.stability"], _samples(*rounds))
    report = HostReport("box", None, "local", True, None, 40.0, (result,))
    store = tmp_path / "store"
    keep(finish(Hosts([report], "serve-watch", 1000.0), inventory=None, waivers=(),
                history=None), store)
    html = tmp_path / "watch.html"
    assert run_cli("report", "show", "latest", "--format", "html", "--output", str(html),
                   "--report-dir", str(store)).code == 0
    plots = re.findall(r'<figure class="plot">(.*?)</figure>', html.read_text(), re.S)
    rate = next(p for p in plots if "rate per interval" in p)
    memory = next(p for p in plots if "resident" in p)
    assert rate.count("<circle") == 8 and "median 100 t/s" in rate  # 8 intervals, the median
    assert "25 t/s (judged)" in rate  # the interval where it fell
    assert memory.count("<circle") == 9 and ": 680 MiB" in memory  # the last sample's memory
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "watch-plots.png"
    chromium(f"--screenshot={shot}", "--window-size=1400,900", html.as_uri(),
             user_dir=tmp_path / "ud1")
    assert shot.is_file() and shot.stat().st_size > 10_000
