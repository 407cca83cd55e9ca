"""``python -m omni_host``: the console script, for a venv without its bin/ on PATH."""

from omni_host.cli import run

run()
