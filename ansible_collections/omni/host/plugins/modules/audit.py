# The documentation of the action plugin omni.host.audit (plugins/action/audit.py); the audit
# runs on the controller, so this module is never sent to a host.
from __future__ import annotations

DOCUMENTATION = r"""
module: audit
short_description: omni-host's audit of an LLM inference host, as a task
description:
  - Runs omni-host's collector on the host over the play's own connection (credentials, become,
    forks as Ansible and AWX give them), in one command, and judges its output on the controller
    with the same checks and the same expected state (the host's omni_* variables, validated with
    the role omni.host.omni's argument spec) as C(omni-host audit).
  - The task fails for a host with a failing check (O(fail_on)); the result lists the failing and
    warning check ids, each finding, and the count of each verdict.
  - Needs omni-host installed on the controller (in AWX, in the execution environment).
version_added: "0.3.0"
author: omni-host
options:
  fail_on:
    description:
      - V(fail) fails the host when a check fails; V(warn) also when one warns; V(never) reports only.
      - A waived finding never fails the host.
    type: str
    default: fail
    choices: [fail, warn, never]
  bundle_dir:
    description:
      - Directory on the controller for the host's bundle (V(<bundle_dir>/<host>/manifest.json),
        private to its owner), read by C(omni-host audit --bundle) and stored by it.
    type: path
  waivers:
    description:
      - "A waivers file (omni-host's format): accepted findings are marked and fail no host."
    type: path
  probe_timeout:
    description:
      - Seconds each probe may run (default the catalog's own).
    type: float
attributes:
  check_mode:
    support: full
    details: The audit only reads the host.
notes:
  - The playbook C(omni.host.audit) runs this task on every host of the inventory.
"""

EXAMPLES = r"""
- name: Audit the inference hosts
  omni.host.audit:
    bundle_dir: /var/lib/omni-host/bundles
    fail_on: fail
"""

RETURN = r"""
failing:
  description: The ids of the checks that fail (waived ones not counted).
  type: list
  elements: str
  returned: success
warning:
  description: The ids of the checks that warn (waived ones not counted).
  type: list
  elements: str
  returned: success
findings:
  description:
    - Each check that fails, warns or could not be judged (error), with its severity, summary,
      lessons, the fix playbook (if any) and whether a waiver accepts it.
  type: list
  elements: dict
  returned: success
counts:
  description: How many checks gave each verdict (pass, fail, warn, skip, error).
  type: dict
  returned: success
bundle:
  description: Where the host's bundle was written, if O(bundle_dir) was given.
  type: str
  returned: success
"""
