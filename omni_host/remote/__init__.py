"""Standalone scripts that probes run with the host's python3 (standard library only,
Python >= 3.6): their source is sent as a ``python3 -c`` argument."""
