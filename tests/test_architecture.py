"""The house rules, checked: imports go one way along the flow (import-linter's contracts in
pyproject.toml), only the CLI prints or exits, and the paths that need no SSH never import
paramiko."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from helpers import BUNDLES

PACKAGE = REPO / "omni_host"
# The CLI prints; remote/ runs on the audited host and answers on its stdout; __main__.py is
# the console script's door, which says "interrupted" for a Ctrl-C before the CLI is imported.
MAY_PRINT = (PACKAGE / "cli", PACKAGE / "remote", PACKAGE / "__main__.py")


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--no-cache", "--no-logo"], cwd=REPO, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _printing_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("print", "input", "exit", "quit"):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.func.id}()")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "sys" and node.attr in ("exit", "stdout", "stderr"):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: sys.{node.attr}")
    return found


def test_only_the_cli_prints_prompts_or_exits() -> None:
    modules = [p for p in PACKAGE.rglob("*.py") if not any(p.is_relative_to(m) for m in MAY_PRINT)]
    assert len(modules) > 30
    offenders = [line for path in modules for line in _printing_calls(path)]
    assert offenders == []


def test_the_rule_finds_what_it_forbids(tmp_path: Path) -> None:
    """The checker above would see a print and a sys.exit if a library module had them."""
    bad = REPO / "omni_host" / "_probe_of_rule.py"
    bad.write_text("import sys\nprint('x')\nsys.exit(1)\n")
    try:
        assert [line.split(": ")[1] for line in _printing_calls(bad)] == ["print()", "sys.exit"]
    finally:
        bad.unlink()


_IMPORTS = """
import io, json, sys, contextlib
from omni_host.cli import main
for argv in json.loads(sys.argv[1]):  # one interpreter, the commands in turn: what one
    buf = io.StringIO()               # imports stays imported for the next ones
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    heavy = sorted(m for m in ("paramiko", "invoke", "cryptography") if m in sys.modules)
    sys.stderr.write(json.dumps({"code": code, "heavy": heavy, "out": len(buf.getvalue())}) + "\\n")
"""


def _import_facts(commands: list[list[str]], home: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", _IMPORTS, json.dumps(commands)],
                          capture_output=True, text=True, check=False,
                          env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
    lines = [line for line in proc.stderr.splitlines() if line.startswith('{"code"')]
    assert len(lines) == len(commands), proc.stderr[-2000:]
    return [json.loads(line) for line in lines]


def test_paths_without_ssh_do_not_import_paramiko(tmp_path: Path) -> None:
    commands = [["audit", "--bundle", str(BUNDLES / "h100-x1.tar.gz"), "--format", "json",
                 "--no-store"], ["checks", "list"], ["payload"]]
    for argv, facts in zip(commands, _import_facts(commands, tmp_path), strict=True):
        assert facts["out"] > 0, argv  # the command really ran and wrote its output
        assert facts["heavy"] == [], argv


def test_an_ssh_audit_does_import_paramiko(tmp_path: Path) -> None:
    """The other side of the test above: the probe does see paramiko when SSH is used."""
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    far: {ansible_host: 127.0.0.1, ansible_port: 9}\n")
    (facts,) = _import_facts([["audit", "-i", str(inv), "--no-store", "--connect-timeout", "2",
                               "--known-hosts", str(tmp_path / "kh")]], tmp_path)
    assert facts["code"] == 3
    assert "paramiko" in facts["heavy"]


@pytest.mark.parametrize("argv", [
    ["audit", "-i", "inv.yml", "gpu01", "--format", "json", "--forks", "4"],
    ["collect", "--out", "b.tar.gz"],
    ["remediate", "swap.capacity", "--apply"],
    ["bootstrap", "-i", "inv.yml", "box"],
    ["report", "show", "latest", "--format", "html", "-q"],
    ["schedule", "install", "--quarterly"],
    ["checks", "explain", "F-010"],
    ["init", "-i", "inv.yml", "gpu01"],
    ["payload"],
])
def test_a_command_parses_the_same_when_only_its_group_is_built(argv: list[str]) -> None:
    from omni_host.cli import GROUPS, HANDLERS, build_parser

    assert GROUPS.keys() == HANDLERS.keys()
    assert vars(build_parser(argv).parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_no_module_imports_itself_back() -> None:
    """No import circle anywhere in the package (issue 45), lazy imports inside functions
    included: the check registry's metadata (evaluate.meta) and the CLI's shared pieces
    (cli.common) are what both sides import."""
    import grimp

    graph = grimp.build_graph("omni_host")
    modules = sorted(graph.modules)
    circles = [(a, b) for i, a in enumerate(modules) for b in modules[i + 1:]
               if graph.chain_exists(importer=a, imported=b)
               and graph.chain_exists(importer=b, imported=a)]
    assert circles == []


def test_the_catalog_names_its_parsers_without_importing_them() -> None:
    """A run's collection starts once the catalog is imported; its parsers (70 ms of imports
    on the lent H100, issue 44) load with the evaluation, while the host's probes run. Every
    parser the catalog names is a function of its module, and the evaluation loads them."""
    code = ("import sys, omni_host.probes.catalog as c\n"
            "print(sorted(m for m in sys.modules if m.startswith('omni_host.probes.parsers.')))\n"
            "import omni_host.evaluate.facts\n"
            "print(sorted(m for m in sys.modules if m.startswith('omni_host.probes.parsers.')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    before, after = proc.stdout.splitlines()
    assert before == "[]"
    from omni_host.probes.catalog import BENCH, PROBES_BY_ID

    named = {repr(p.parse).split(".")[0] for p in (*PROBES_BY_ID.values(), BENCH)}
    assert {f"omni_host.probes.parsers.{m}" for m in named} <= set(ast.literal_eval(after))
    for probe in (*PROBES_BY_ID.values(), BENCH):
        parse = probe.parse.resolve()  # type: ignore[attr-defined]
        assert callable(parse) and parse.__name__ == repr(probe.parse).split(".")[1], probe.id


_EARLY = """
import json, subprocess, sys
seen = []
_init = subprocess.Popen.__init__
def _spy(self, args, *rest, **kw):
    if not seen and list(args[-3:]) == ["-I", "-S", "-"]:  # the host's collector
        seen.append(sorted(m for m in ("omni_host.model", "omni_host.cli.audit",
                                       "omni_host.evaluate.checks") if m in sys.modules))
    _init(self, args, *rest, **kw)
subprocess.Popen.__init__ = _spy
from omni_host.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "seen": seen}))
"""


def test_a_local_audit_starts_its_collector_before_the_checks_load(tmp_path: Path) -> None:
    """This machine's audit (the README's first command) starts its collector once the plan is
    valid: the report's types and the checks load while its probes run, not before."""
    argv = ["audit", "--no-store", "--format", "json"]
    proc = subprocess.run([sys.executable, "-c", _EARLY, *argv], capture_output=True,
                          text=True, check=False,
                          env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]})
    *report, last = proc.stdout.strip().splitlines()
    facts = json.loads(last)
    assert facts["seen"] == [["omni_host.cli.audit"]], proc.stderr[-2000:]
    host = json.loads("\n".join(report))["hosts"][0]
    assert host["reachable"] and host["results"], proc.stderr[-2000:]  # judged as ever


def test_a_bench_starts_its_host_before_the_report_types_load(tmp_path: Path) -> None:
    """A bench's fixed cost (issue 44): the local collector starts before the report's types
    (omni_host.model: 47 ms of dataclasses on the lent H100's Python 3.12), the other
    command groups and the checks are imported; they load while the host's probes run."""
    capture = (Path(__file__).parent / "fixtures" / "captures" / "llama-bench" /
               "llama-bench-json_h100_random-llama-1.7gb-f16_vmm.json")
    fake = tmp_path / "llama-bench"
    fake.write_text(f"#!/bin/sh\ncat {capture}\n")
    fake.chmod(0o755)
    (tmp_path / "model.gguf").write_bytes(b"\0" * 4096)
    inv = tmp_path / "inv.yml"
    inv.write_text(json.dumps({"all": {"hosts": {"box": {
        "ansible_connection": "local", "omni_build_packages": [],
        "omni_bench": {"llama_bench": str(fake), "model": str(tmp_path / "model.gguf"),
                       "max_spread_pct": 100, "max_other_cpus": 64}}}}}))
    argv = ["bench", "-i", str(inv), "box", "--report-dir", str(tmp_path / "store"),
            "--format", "json", "--force", "--wait", "15m"]  # beside another bench of the host
    proc = subprocess.run([sys.executable, "-c", _EARLY, *argv], capture_output=True,
                          text=True, check=False,
                          env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]})
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["seen"] == [[]], proc.stderr[-2000:]
    assert facts["code"] == 0, proc.stderr[-2000:]  # the bench ran and passed: its baseline


def test_the_rooms_keep_their_shape() -> None:
    """Issue 64: no package holds more than 20% of the lines, no module outside remote/
    (which runs on the host, one helper a file) is over 600 lines, at most 3 functions are
    over 60 lines (the measuring side was 27% of the package in evaluate/, 13 functions)."""
    lines = {p: len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    total = sum(lines.values())
    by_package: dict[str, int] = {}
    for path, n in lines.items():
        parts = path.relative_to(PACKAGE).parts
        if len(parts) > 1:
            by_package[parts[0]] = by_package.get(parts[0], 0) + n
    assert max(by_package.values()) <= 0.2 * total, by_package
    big = [str(p) for p, n in lines.items() if n > 600 and "remote" not in p.parts]
    assert not big, big
    long = [f"{p.name}:{node.name}" for p in lines for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (node.end_lineno or 0) - node.lineno + 1 > 60]
    assert len(long) <= 3, long


def test_the_user_directories_have_one_spelling(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """The controller reads the XDG base directories in resources.user_dir alone; a relative one is
    ignored, as the spec says, by the store, the waivers and the cache alike (the store read
    it as is: a relative $XDG_DATA_HOME put the reports under the working directory)."""
    from omni_host.plan.waivers import default_waivers
    from omni_host.report.store import default_report_dir
    from omni_host.resources import cache_home

    # remote/ runs on the host with the standard library alone: it has its own reader
    spelled = [p.name for p in PACKAGE.rglob("*.py") if p.name != "resources.py"
               and "remote" not in p.relative_to(PACKAGE).parts
               and any(f'"{v}' in p.read_text() for v in ("XDG_DATA_HOME", "XDG_CONFIG_HOME",
                                                          "XDG_CACHE_HOME", "XDG_STATE_HOME"))]
    assert not spelled, spelled
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, "relative/dir")
    monkeypatch.delenv("OMNI_HOST_REPORT_DIR", raising=False)
    monkeypatch.delenv("OMNI_HOST_WAIVERS", raising=False)
    assert default_report_dir() == tmp_path / ".local/share/omni-host/reports"
    assert cache_home() == tmp_path / ".cache/omni-host"
    (tmp_path / ".config/omni-host").mkdir(parents=True)
    (tmp_path / ".config/omni-host/waivers.yml").write_text("waivers: []\n")
    assert default_waivers() == tmp_path / ".config/omni-host/waivers.yml"
