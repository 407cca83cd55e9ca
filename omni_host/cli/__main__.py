"""``python -m omni_host.cli``: the console entry point."""

from omni_host.cli import run

run()
