"""``python -m omni_host`` and the console script (``omni-host``): most of a run's start-up is
importing the CLI, so a Ctrl-C or SIGTERM during it ends the run as one during the run does
(exit 130 or 143, one line), never with a traceback."""

import signal
import sys


def _terminated(signum: int, frame: object) -> None:
    sys.stderr.write("omni-host: terminated\n")
    raise SystemExit(143)


def main() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        from omni_host.cli import run
    except KeyboardInterrupt:
        sys.stderr.write("omni-host: interrupted\n")
        sys.exit(130)
    signal.signal(signal.SIGTERM, previous)  # the CLI installs its own
    from omni_host import invocation

    invocation.record(sys.argv[0], sys.argv[0].endswith("__main__.py"))  # what hints name
    run()


if __name__ == "__main__":
    main()
