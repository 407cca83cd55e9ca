# omni.host.audit: omni-host's audit of one host as a task (AWX job templates, ansible-playbook
# omni.host.audit). The controller needs omni-host installed (pip install omni-host; in AWX, the
# execution environment of execution-environment.yml). Documentation: plugins/modules/audit.py.
from __future__ import annotations

import time
from pathlib import Path

from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {
    "fail_on": {"type": "str", "default": "fail", "choices": ["fail", "warn", "never"]},
    "bundle_dir": {"type": "path"},
    "waivers": {"type": "path"},
    "probe_timeout": {"type": "float"},
}


class ActionModule(ActionBase):
    """Runs omni-host's collector over the play's own connection, judges it on the controller."""

    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:
            from omni_host.app.play import play_audit, play_plan
            from omni_host.collect.transport.base import RawRun
            from omni_host.errors import OmniHostError
            from omni_host.plan.inventory import rendered_vars
        except ImportError as exc:
            result.update(failed=True, msg=f"omni-host is not installed where Ansible runs ({exc}): "
                          "pip install omni-host there (AWX: build the execution environment "
                          "of execution-environment.yml)")
            return result

        host = task_vars.get("inventory_hostname", "?")

        def run_collector(command, stdin):
            start = time.monotonic()
            # bytes: the local connection writes in_data to a binary pipe as it is
            out = self._low_level_execute_command(command, sudoable=True,
                                                  in_data=stdin.encode("utf-8"))
            return RawRun(int(out.get("rc", -1)), out.get("stdout", ""), out.get("stderr", ""),
                          time.monotonic() - start)

        try:
            values, origins = rendered_vars(task_vars, self._templar, f"host {host}")
            plan = play_plan(host, values, origins, "inventory")
            done = play_audit(plan, run_collector, fail_on=args["fail_on"],
                              bundle_dir=Path(args["bundle_dir"]) if args["bundle_dir"] else None,
                              waivers=Path(args["waivers"]) if args["waivers"] else None,
                              probe_timeout_s=args["probe_timeout"])
        except OmniHostError as exc:
            result.update(failed=True, msg=f"{host}: {exc}")
            return result
        result.update(done.result(), changed=False, failed=done.failed, msg=done.message)
        return result
