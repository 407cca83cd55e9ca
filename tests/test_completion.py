"""Shell completion generated from the parser: the real bash and zsh run the script and
complete commands, subcommands, options, an option's choices and a positional's words, as a
user's shell would (COMP_WORDS/COMP_CWORD, then the completion function)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import run_cli

pytestmark = pytest.mark.system  # runs bash and zsh

CASES = [
    (["omni-host", "au"], ["audit"]),
    (["omni-host", "report", "d"], ["diff"]),
    (["omni-host", "audit", "--for"], ["--forks", "--format"]),
    (["omni-host", "audit", "--format", "j"], ["json", "junit"]),
    (["omni-host", "audit", "-i", "inv/ho"], ["inv/hosts.yml"]),  # a value: a file
    (["omni-host", "audit", "--no-store", "--lim"], ["--limit"]),  # a flag takes no value
    (["omni-host", "completion", ""], ["bash", "zsh"]),
    (["omni-host", "schedule", "install", "--quar"], ["--quarterly"]),
]


def complete(shell: str, script: Path, words: list[str], cwd: Path) -> list[str]:
    setup = "autoload -U compinit && compinit -u; " if shell == "zsh" else ""
    program = (f"{setup}source {script}; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
               f"COMP_CWORD={len(words) - 1}; COMPREPLY=(); _omni_host; "
               "printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run([shell, "-c", program], capture_output=True, text=True, cwd=cwd,
                          check=False, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_the_generated_script_completes_in_the_real_shell(shell: str, tmp_path: Path) -> None:
    made = run_cli("completion", shell)
    assert made.code == 0
    script = tmp_path / f"omni-host.{shell}"
    script.write_text(made.stdout)
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text("all: {}\n")
    for words, want in CASES:
        assert sorted(complete(shell, script, words, tmp_path)) == want, (shell, words)


def test_every_command_of_the_parser_is_in_the_script() -> None:
    from omni_host.cli import HANDLERS

    text = run_cli("completion", "bash").stdout
    top = next(line for line in text.splitlines() if line.startswith("_omni_host_subs="))
    for command in HANDLERS:
        assert f"[{command}]=" in top or f" {command} " in top or f" {command}'" in top, command
