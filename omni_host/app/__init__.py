"""Use cases: what a command does from start to end (the audit with its waivers, history and
store; the schedule), composed from the stages below. Nothing here prints: the CLI does."""
