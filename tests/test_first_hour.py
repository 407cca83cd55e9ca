"""The first hour of a new operator (issue 33): every hint the program prints is a command
that works when pasted, and the small habits of a Unix tool hold (NO_COLOR, a closed pipe,
one line per failure). Each test follows a line literally, as a new user did."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, Sshd, run_cli


def _lines_with(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


@pytest.mark.system  # a pseudo-terminal (script), the real console entry point
def test_no_color_leaves_no_escape_code_on_a_terminal(tmp_path: Path) -> None:
    """NO_COLOR=1 removed colours, but bold and dim codes stayed on a terminal."""
    cmd = f"{shlex.quote(sys.executable)} -m omni_host audit --no-store"
    seen = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True,
                          env={**os.environ, "NO_COLOR": "1", "TERM": "xterm-256color"},
                          timeout=120, cwd=tmp_path, text=True).stdout
    assert "1 host(s), 0 unreachable" in seen  # the table was printed
    assert "\x1b[" not in seen
    coloured = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True,
                              env={k: v for k, v in os.environ.items() if k != "NO_COLOR"} |
                              {"TERM": "xterm-256color"}, timeout=120, cwd=tmp_path,
                              text=True).stdout
    assert "\x1b[" in coloured  # the same command does style a terminal without it


def test_a_closed_pipe_ends_quietly(tmp_path: Path, two_audits: Path) -> None:
    """`report list | head` printed `omni-host: Broken pipe`: the reader going away is not an
    error to report; the exit status is the shell's for SIGPIPE (141)."""
    proc = subprocess.Popen([sys.executable, "-m", "omni_host", "report", "list", "--report-dir",
                             str(two_audits)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path)
    proc.stdout.close()  # before it writes: its first write meets a closed pipe
    stderr = proc.stderr.read().decode()
    assert proc.wait(60) == 141
    assert stderr == ""


def test_an_extra_var_type_error_names_the_extra_var_not_the_inventory(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    box:\n      ansible_connection: local\n")
    result = run_cli("audit", "-i", str(inv), "box", "--no-store", "-e",
                     "omni_swap_size_mib=abc")
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "-e" in line and "omni_swap_size_mib" in line and str(inv) not in line
    assert "hosts.yml" not in line


def test_the_init_hint_of_an_inventory_file_works_as_printed(tmp_path: Path) -> None:
    """`audit -i inv.yml box` said `record one with omni-host init -i inv.yml box`, and init
    then said it needs an inventory directory. Ansible reads host_vars/ beside an inventory
    file: init writes there, and the next audit reads it."""
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    box:\n      ansible_connection: local\n")
    audit = run_cli("audit", "-i", str(inv), "box", "--no-store")
    (hint,) = _lines_with(audit.stderr, "omni-host init")
    assert hint.endswith(f"(record one with omni-host init -i {inv} box)")
    command = hint[hint.index("omni-host init"):].rstrip(")")
    argv = shlex.split(command)[1:]
    assert argv[:3] == ["init", "-i", str(inv)], command
    done = run_cli(*argv)
    assert done.code == 0, done.stderr
    assert (tmp_path / "host_vars" / "box.yml").is_file()
    again = run_cli("audit", "-i", str(inv), "box", "--no-store", "--format", "json")
    assert json.loads(again.stdout)["hosts"][0]["unconfigured"] is False


@pytest.mark.system  # over the loopback sshd
def test_the_init_hint_of_an_ssh_host_carries_the_options_the_run_needed(
        sshd: Sshd, tmp_path: Path) -> None:
    """The audit needed --known-hosts and --ssh-config to reach the host; its init hint
    dropped them, and init pasted from it failed on the unknown host key (issue 43). Pasted
    now, it records the host's state over SSH, and the next audit reads it."""
    inv = tmp_path / "inv.yml"
    inv.write_text(f"all:\n  hosts:\n    loop:\n      ansible_host: 127.0.0.1\n"
                   f"      ansible_port: {sshd.port}\n      ansible_user: {sshd.user}\n"
                   f"      ansible_ssh_private_key_file: {sshd.client_key}\n")
    reach = ["--known-hosts", str(sshd.known_hosts), "--ssh-config", str(tmp_path / "none")]
    audit = run_cli("audit", "-i", str(inv), "loop", "--no-store", *reach)
    (hint,) = _lines_with(audit.stderr, "omni-host init")
    command = hint[hint.index("omni-host init"):].rstrip(")")
    argv = shlex.split(command)[1:]
    assert argv == ["init", "-i", str(inv), *reach, "loop"], command
    done = run_cli(*argv)
    assert done.code == 0, done.stderr
    again = run_cli("audit", "-i", str(inv), "loop", "--no-store", "--format", "json", *reach)
    assert json.loads(again.stdout)["hosts"][0]["unconfigured"] is False


@pytest.mark.system  # ansible-playbook's check mode over the local connection
def test_the_local_audit_remediate_hint_works_as_printed(tmp_path: Path) -> None:
    """The README's first command audits this machine with the built-in policy; its fix line
    said `omni-host remediate -i INVENTORY localhost`, and remediate then only said it needs
    an inventory. Now remediate without -i does for this machine what audit without -i does
    (the built-in policy, Ansible's local connection), and the printed hint, pasted into a
    shell, previews the fix of what the audit found (nothing is changed)."""
    audit = run_cli("audit", "--no-store", "--format", "markdown")
    hints = re.findall(r"`(omni-host remediate [^`]*)`", audit.stdout)
    assert "omni-host remediate localhost" in hints, audit.stdout[-2000:]
    assert not any("INVENTORY" in line for line in audit.stdout.splitlines())
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "omni-host").write_text(f"#!/bin/sh\nexec {sys.executable} -m omni_host \"$@\"\n")
    (shim / "omni-host").chmod(0o755)
    done = subprocess.run(["sh", "-c", "omni-host remediate localhost --check swap.capacity"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"})
    assert done.returncode in (0, 1), (done.stdout[-1500:], done.stderr[-1500:])
    assert "Preview (ansible check mode, nothing is changed):" in done.stdout
    assert "swap.yml on localhost: " in done.stdout and "Nothing was changed." in done.stdout
    # the reference box's 200 GiB swap file: previewed where the disk holds it, else the
    # preview says it cannot fit and never invites --apply (issue 47)
    import shutil

    free_mib = shutil.disk_usage("/nvme" if Path("/nvme").is_dir() else "/").free // 2**20
    fits = free_mib >= 204800 + 1024
    assert ("FAILED" not in done.stdout) is fits, done.stdout[-1500:]
    assert ("does not fit at /nvme/swap200g" in done.stdout) is not fits
    assert ("Run again with --apply" in done.stdout) is fits
    other = run_cli("remediate", "somebox")
    assert other.code == 2 and "needs an inventory (-i) for 'somebox'" in other.stderr


def test_the_module_documentation_reads_as_yaml_strings() -> None:
    """Every description of the audit module is text (an unquoted ': ' made one a mapping,
    and `ansible-doc omni.host.audit` failed for every AWX user)."""
    import re

    import yaml

    source = (REPO / "ansible_collections" / "omni" / "host" / "plugins" / "modules" /
              "audit.py").read_text()
    doc = yaml.safe_load(re.search(r'DOCUMENTATION = r?"""(.*?)"""', source, re.S).group(1))
    bad = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "description":
                    items = value if isinstance(value, list) else [value]
                    bad.extend(f"{path}.{i}" for i, v in enumerate(items) if not isinstance(v, str))
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")

    walk(doc, "DOCUMENTATION")
    assert bad == []


def test_report_diff_names_a_verdict_that_became_a_warn(tmp_path: Path) -> None:
    """A bench that went from pass to warn printed its tokens/s and then `no change in
    verdicts, state or policy`. Replayed from the H100's series: the baseline, then the run
    whose prompt-processing noise was too wide to judge 5% (a warn)."""
    from test_bench_trust import TRUST, _judged

    store = tmp_path / "store"
    _judged("baseline", store, where=TRUST)
    warned, _, _ = _judged("unchanged-2", store, where=TRUST)
    assert warned.status.value == "warn"
    diff = run_cli("report", "diff", "--report-dir", str(store))
    assert "  new warnings: perf.tokens-per-s" in diff.stdout
    assert "no change in verdicts" not in diff.stdout
    assert "  tokens/s: pp512: " in diff.stdout


def _swap_inventory(tmp_path: Path, size_mib: int) -> Path:
    inv = tmp_path / "hosts.yml"
    where = {"omni_swap_path": str(tmp_path / "swapfile")} if size_mib else {}
    inv.write_text(json.dumps({"all": {"hosts": {"box": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "omni_build_packages": [], "omni_swap_size_mib": size_mib, **where}}}}))
    return inv


@pytest.mark.system  # a pseudo-terminal to answer on, ansible-playbook's check mode
def test_declining_the_apply_says_so_and_stores_nothing(tmp_path: Path) -> None:
    """Answering `n` printed nothing after the prompt, exited 2 and stored a pre-remediation
    audit of a remediation that never ran."""
    inv = _swap_inventory(tmp_path, 64)  # not active: fails on any machine; fits any disk
    store = tmp_path / "store"
    cmd = (f"{shlex.quote(sys.executable)} -m omni_host remediate -i {shlex.quote(str(inv))} "
           f"box --apply --report-dir {shlex.quote(str(store))}")
    done = subprocess.run(["script", "-qec", cmd, "/dev/null"], input="n\n", text=True,
                          capture_output=True, timeout=600, cwd=tmp_path)
    assert "Apply these changes? [y/N]" in done.stdout, done.stdout[-2000:]
    assert "Not applied (declined): nothing was changed, nothing stored." in done.stdout
    assert done.returncode == 1
    assert not store.exists() or not any(store.iterdir())
    assert not (tmp_path / "swapfile").exists()


@pytest.mark.system  # the pre-remediation audit over the local connection
def test_an_apply_with_nothing_to_do_stores_nothing(tmp_path: Path) -> None:
    inv = _swap_inventory(tmp_path, 0)
    store = tmp_path / "store"
    done = run_cli("remediate", "-i", str(inv), "box", "--apply", "--yes", "--report-dir",
                   str(store))
    assert done.code == 0 and "Nothing to remediate with a playbook." in done.stdout
    assert not store.exists() or not any(store.iterdir())


@pytest.mark.parametrize("size, text", [
    (133_407_776, "127 MiB"),        # the tests' random llama: it read "0 GiB"
    (1_701_027_840, "1.6 GiB"),      # the H100's 1.7 GB model (llama-bench's model_size)
    (642_000_000_000, "598 GiB"),    # the registry's 642 GB DeepSeek files
])
def test_sizes_read_as_an_operator_reads_them(size: int, text: str) -> None:
    from omni_host.measure.rules import size_text

    assert size_text(size) == text


def test_an_unreachable_reason_is_said_once(tmp_path: Path) -> None:
    """The fleet's progress lines and the run's end both printed each unreachable reason."""
    from conftest import free_port

    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {"hosts": {
        name: {"ansible_host": "127.0.0.1", "ansible_port": free_port()}
        for name in ("gone1", "gone2")}}}))
    result = run_cli("audit", "-i", str(inv), "all", "--no-store")
    assert result.code == 3
    for name in ("gone1", "gone2"):
        assert result.stderr.count("Connection refused") == 2
        assert len(_lines_with(result.stderr, f"{name}: unreachable")) == 2  # progress, reason
        assert len([line for line in _lines_with(result.stderr, f"{name}: unreachable")
                    if "Connection refused" in line]) == 1


@pytest.mark.parametrize("columns", [60, 80])
def test_narrow_terminals_cut_text_never_the_hints(tmp_path: Path, columns: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns the cuts ate the hints themselves (`(-v lists t…`)."""
    monkeypatch.chdir(tmp_path)
    inv = "inv.yml"
    (tmp_path / inv).write_text("all:\n  hosts:\n    box:\n      ansible_connection: local\n"
                                "      omni_build_packages: []\n")
    shown = run_cli("audit", "-i", inv, "box", "--no-store", env={"COLUMNS": str(columns)})
    lines = shown.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert any(line.endswith(" (-v lists them)") for line in lines), shown.stdout
    assert any(line.endswith(" (-v: why)") for line in lines), shown.stdout
    joined = " ".join(line.strip() for line in lines)
    assert f"record it: omni-host init -i {inv} box" in joined


def _paragraph(text: str, start: str) -> str:
    """The wrapped paragraph that begins with ``start``, as one line (its wraps were spaces)."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    taken = [lines[first]]
    for line in lines[first + 1:]:
        if not line.startswith("  ") or line.startswith("   "):
            break
        taken.append(line.strip())
    return " ".join(taken)


def _command_after(text: str, prose: str) -> str:
    """The command printed on the lines after the one that ends with ``prose``, as printed:
    its broken lines end in `` \\``, the last one does not."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.rstrip().endswith(prose)) + 1
    taken = [lines[at].strip()]
    while lines[at].endswith(" \\"):
        at += 1
        taken.append(lines[at])
    return "\n".join(taken)


def test_a_newcomers_first_audit_init_and_second_audit(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What a person reads (issue 47): the first audit without an inventory says, right after
    the host's line, that it judged against the built-in reference box (what that box is) and
    prints the command that records this machine's own state; pasted, it works; the second
    audit no longer says either, nor "record it" for what init cannot observe (it looped:
    init answered that it already recorded this state); init run again changes nothing."""
    monkeypatch.chdir(tmp_path)
    store = str(tmp_path / "reports")
    first = run_cli("audit", "--report-dir", store)
    lines = first.stdout.splitlines()
    assert lines[0].startswith("localhost (local)"), first.stdout
    said = _paragraph(first.stdout.split("Record this machine's:")[0] + "Record this machine's:",
                      "Judged against the built-in reference box")
    assert said.startswith("Judged against the built-in reference box (RTX PRO 6000 Blackwell "
                           "96 GB + RTX 5090 32 GB, NPS1, 200 GiB of swap at /nvme/swap200g, "
                           "model DeepSeek-V3.2-Q4_K_M-00001-of-00009.gguf), not this "
                           "machine's own state (docs/first-hour.md)."), said
    assert lines[1].startswith("Judged against"), first.stdout  # the host's first line
    command = _command_after(first.stdout, "Record this machine's:")
    flat = re.sub(r" \\\n\s*", " ", command)  # what the shell reads: one line
    assert command.startswith("printf ") and flat.endswith("omni-host init -i hosts.ini "
                                                           "localhost"), command
    pasted = subprocess.run(
        ["sh", "-c", command.replace("omni-host", f"{shlex.quote(sys.executable)} -m omni_host")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert pasted.returncode == 0, pasted.stderr
    assert (tmp_path / "host_vars" / "localhost.yml").is_file()
    inv = str(tmp_path / "hosts.ini")  # the in-process runs of other tests read other hosts.ini
    second = run_cli("audit", "-i", inv, "localhost", "--report-dir", store)
    assert "Judged against" not in second.stdout and "record it" not in second.stdout, \
        second.stdout
    verbose = " ".join(run_cli("audit", "-i", inv, "localhost", "--report-dir", store,
                               "-v").stdout.split())
    assert "No expected state for" in verbose and "set them in the inventory" in verbose
    again = run_cli("init", "-i", inv, "localhost")
    assert again.code == 0 and "already records this state" in again.stdout + again.stderr


def _program(how: str) -> list[str]:
    """omni-host as a user runs it: the venv's script by its path, or python -m omni_host."""
    return [str(Path(sys.executable).parent / "omni-host")] if how == "script" else \
        [sys.executable, "-m", "omni_host"]


@pytest.mark.system  # init over Ansible's local connection; the remediation preview, check mode
@pytest.mark.parametrize("how", ["script", "module"])
def test_every_hint_of_the_first_audit_runs_pasted_as_printed(tmp_path: Path, how: str) -> None:
    """Issue 62: the hints said bare `omni-host` (not on PATH after the README's install:
    exit 127), and at 80 columns or in a pipe the init hint wrapped inside its quoted printf
    string (a two-line hosts.ini; init then failed). The real entry point, its output piped at
    80 columns, each command pasted as printed into bash without the venv on PATH."""
    work = tmp_path / "empty"
    work.mkdir()
    bare = {**os.environ, "PATH": "/usr/bin:/bin", "COLUMNS": "80"}
    first = subprocess.run([*_program(how), "audit", "--no-store"], cwd=work, env=bare,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 1, first.stderr
    assert max(len(line) for line in first.stdout.splitlines()) <= 80
    named = shlex.join(_program(how)) if how == "module" else _program(how)[0]
    record = _command_after(first.stdout, "Record this machine's:")
    assert f"{named} init -i hosts.ini" in re.sub(r" \\\n\s*", " ", record), record
    pasted = subprocess.run(["bash", "-c", record], cwd=work, env=bare, capture_output=True,
                            text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    assert (work / "hosts.ini").read_text().count("\n") == 1  # one line, as printed
    assert (work / "host_vars" / "localhost.yml").is_file()
    if how == "module":
        return
    # one expected state without -i, wherever it runs: init's files here are not read, and said
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    verdicts = []
    for where in (work, elsewhere):
        again = subprocess.run([*_program(how), "audit", "--no-store", "--format", "json"],
                               cwd=where, env=bare, capture_output=True, text=True, timeout=300)
        verdicts.append({r["id"]: r["status"] for r in json.loads(again.stdout)["hosts"][0]["results"]})
        told = "not the state omni-host init recorded in this directory's hosts.ini"
        assert (told in again.stderr) is (where == work), again.stderr
    assert verdicts[0] == verdicts[1]
    swap = first.stdout[first.stdout.index("FAIL  swap.capacity"):]
    preview = _command_after(swap, "re-audits):")
    assert preview.endswith(f"{named} remediate localhost"), preview
    done = subprocess.run(["bash", "-c", preview + " --check swap.capacity"], cwd=work, env=bare,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode in (0, 1), done.stdout[-1500:] + done.stderr[-1500:]
    assert "PLAN swap.yml: localhost (swap.capacity)" in done.stdout, done.stdout[-1500:]


def test_the_audits_bench_hint_measures_again_as_the_bench_was_run(tmp_path: Path) -> None:
    """Issue 62: the audit's "measure again" named the audit's inventory, not the one the
    bench ran with (the lent H100's stored benches: their own inventory and options)."""
    import tarfile

    from omni_host.report.history import last_bench, load_history
    from omni_host.report.text import last_bench_line, plain, target

    store = Path(__file__).parent / "fixtures" / "captures" / "bench-h100-quiet" / \
        "steady.stores.tar.gz"
    with tarfile.open(store) as tar:
        tar.extractall(tmp_path, filter="data")
    history = load_history(tmp_path / "steady")
    newest = history.audits[0]
    host = newest.report.hosts[0].host
    bench = last_bench(tuple(history.for_host(host)))
    assert bench is not None and bench.audit == newest.id
    assert bench.reach == target(newest.report) and bench.reach.startswith("-i ")
    line = plain(last_bench_line(bench, newest.started_at, "-i elsewhere.yml", host))
    assert line.endswith(f"measure again: omni-host bench {bench.reach} {host}"), line
    assert "elsewhere.yml" not in line


def test_the_cold_case_says_whose_store_its_previous_audit_is_in() -> None:
    """Issue 62: "Cold case: nothing changed since audit X" named an audit another clone ran
    (the store is the user's, not the checkout's): the line says whose store it is."""
    from omni_host.model import ColdCase, Source
    from omni_host.report.terminal import terminal_lines
    from omni_host.reports import HostReport, Report

    host = HostReport("box", None, "local", True, None, 1.0, (),
                      cold_case=ColdCase(previous="20261201T000000000Z-abcdef"))

    report = Report(started_at=0.0, finished_at=1.0, inventory=None, hosts=(host,), source=Source.LIVE)
    lines = ["".join(part for part, _ in line) for line in terminal_lines(report, 80)]
    assert any(line.startswith("Cold case: nothing changed since audit 20261201T000000000Z-"
                               "abcdef (this user's report store)") for line in lines), lines
