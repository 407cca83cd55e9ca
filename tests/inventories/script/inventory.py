#!/usr/bin/env python3
"""An executable inventory script, as Ansible's script plugin runs it (--list, --host)."""
import json
import sys

if "--host" in sys.argv:
    print("{}")
else:
    print(json.dumps({
        "inference": {"hosts": ["gpu01", "gpu02"], "vars": {"omni_swap_size_mib": 2048}},
        "_meta": {"hostvars": {"gpu01": {"ansible_host": "10.0.2.1", "ansible_port": 2201},
                               "gpu02": {"ansible_host": "10.0.2.2", "omni_numa_nps": 1}}},
    }))
