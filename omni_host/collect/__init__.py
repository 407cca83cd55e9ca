"""Collect: carry the collector to hosts (local, SSH, Ansible) in one round trip each, in a
bounded pool, and keep what came back as bundles."""
