"""The exception tree. Library code raises these; only the CLI turns them into exit codes."""


class OmniHostError(Exception):
    """Base of every error omni-host raises on purpose."""


class UsageError(OmniHostError):
    """A command-line value or combination that cannot work."""


class InventoryError(OmniHostError):
    """A malformed inventory file, a bad policy value or a pattern matching no host."""


class TransportError(OmniHostError):
    """A host could not be reached or the connection broke (never a non-zero exit)."""


class BundleError(OmniHostError):
    """A bundle that cannot be read: missing manifest, wrong schema, truncated archive."""


class StoreError(OmniHostError):
    """The report store could not be written; nothing partial was left behind."""


class ParseError(OmniHostError):
    """Output a parser does not recognise. The probe becomes 'unparseable' with an excerpt."""


class RemediationError(OmniHostError):
    """A remediation that cannot run: a missing playbook, a refused flag, a runner failure."""


class PlayCanceled(KeyboardInterrupt):
    """A playbook ansible-runner stopped on a signal (SIGTERM, Ctrl-C): what its tasks changed
    so far stays; nothing after it runs, nothing claims the fix ran."""

    def __init__(self, playbook: str, done: tuple[str, ...],
                 in_flight: tuple[str, ...] = (), check_mode: bool = False) -> None:
        super().__init__(playbook)
        self.playbook = playbook
        self.check_mode = check_mode  # a preview: its tasks changed nothing
        self.done = done  # "host: task (status)" of the tasks that ran, in order
        self.in_flight = in_flight  # "host: task" begun when the signal came: effect unknown
