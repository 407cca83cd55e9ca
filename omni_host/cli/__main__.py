"""``python -m omni_host.cli``: the console entry point."""

import sys

from omni_host.cli import main

sys.exit(main())
