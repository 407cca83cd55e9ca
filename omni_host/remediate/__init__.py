"""Remediation through Ansible: a pure plan, then ansible-runner in check mode, then (when
asked) for real, then a re-audit that proves the fix."""
