"""Transports carry the collector to a host and bring its output back.

The interface is deliberately small (see ``base.Transport``): one call runs one command with
a stdin payload. Arguments are quoted in exactly one place, ``base.command_line``. Nothing is
imported here: ``loading`` and ``prompt`` stay light for whoever needs only them.
"""
