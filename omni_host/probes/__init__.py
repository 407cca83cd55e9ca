"""Probes: what each host is asked (a fixed command) and how its answer is read (a pure
parser), and a probe's three outcomes: observed, unavailable, unparseable."""
