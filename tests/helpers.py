"""Helpers shared by tests: reading the real GPU-machine bundles and their raw outputs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from functools import cache
from pathlib import Path

from omni_host.collect.bundle import Bundle, read_bundles
from omni_host.model import CommandResult
from omni_host.plan.policy import Policy
from omni_host.probes.catalog import DYNAMIC, helper_code, probes_for

BUNDLES = Path(__file__).resolve().parent / "fixtures" / "bundles"
GPU_MACHINES = ("h100-x1", "h200-x2")


@cache
def gpu_bundle(name: str) -> Bundle:
    (bundle,) = read_bundles(BUNDLES / f"{name}.tar.gz")
    return bundle


def raw(name: str, probe_id: str) -> str:
    """The raw stdout one probe captured on a real machine."""
    return gpu_bundle(name).results[probe_id].stdout


def assert_valid_report(doc: dict) -> None:
    """A report.json (or --format json) document fits the published JSON Schema, judged by
    the jsonschema library, and reads back into the same typed report."""
    import json

    import jsonschema

    from omni_host.report.schema import SCHEMA_FILE
    from omni_host.reports import Report

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(doc)
    assert Report.from_dict(doc).to_dict() == doc


def with_probe(bundle: Bundle, probe_id: str, stdout: str, argv: tuple[str, ...] = ("sh",)) -> Bundle:
    results = dict(bundle.results)
    results[probe_id] = CommandResult(probe_id, argv, "ran", 0, stdout, "", 0.01)
    return dataclasses.replace(bundle, results=results)


def collected_under(bundle: Bundle, policy: Policy) -> Bundle:
    """The bundle as if its policy probes had been collected under ``policy`` (the captures
    are real outputs; the arguments they ran with are the policy's)."""
    argv = {p.id: p.argv for p in probes_for(policy)}
    dynamic = {p.id for p in DYNAMIC}
    results = {pid: dataclasses.replace(r, argv=argv[pid]) if pid in argv and pid in dynamic
               else r for pid, r in bundle.results.items()}
    return dataclasses.replace(bundle, results=results)


def write_gguf(path: Path, arch: str, size: int | None = None) -> Path:
    """A real GGUF file of architecture ``arch``, written with the gguf library; ``size``
    makes it sparse to that many bytes (a 642 GB model on paper, nothing on disk)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(2)
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello"])
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if size is not None:
        with open(path, "r+b") as fh:
            fh.truncate(size)
    return path


def model_helper(*args: str) -> str:
    """The stdout of omni-host's real model helper (the model.files probe) run here."""
    return subprocess.run([sys.executable, "-c", helper_code("gguf_models", ("gguf",)), *args],
                          capture_output=True, text=True, check=True).stdout


def active_swap_mib() -> int:
    """This machine's active swap now, as omni-host init records it (/proc/swaps' sizes in KiB,
    summed, in MiB): a user's machine has swap, this VM may not; a test judges what it sees."""
    lines = Path("/proc/swaps").read_text().splitlines()[1:]
    return round(sum(int(line.split()[2]) for line in lines if line.strip()) / 1024)


def swap_verdict() -> str:
    """What swap.capacity says of this machine's own swap as omni-host init records it (its
    size, and its path where it is one swap file): a pass, or a warn where that one file is not
    in /etc/fstab (ordinary-machine's 64 MiB swap file is not) or more than half of the swap
    is in use."""
    areas = [line.split() for line in Path("/proc/swaps").read_text().splitlines()[1:]
             if line.strip()]
    size, used = sum(int(a[2]) for a in areas), sum(int(a[3]) for a in areas)
    fstab = Path("/etc/fstab").read_text() if Path("/etc/fstab").exists() else ""
    listed = {line.split()[0] for line in fstab.splitlines()
              if line.strip() and not line.lstrip().startswith("#")}
    one_file = len(areas) == 1 and areas[0][1] == "file"
    if one_file and areas[0][0] not in listed:
        return "warn"
    return "warn" if size and used * 100 > 50 * size else "pass"


def kept(runs: int, left_out: dict) -> int:
    """The pairs or rounds an A/B or a proof judged: those it ran less those it left out as
    disturbed by other processes (its own rule, named in its details: beside another bench a
    pair may be), at least 2 of them."""
    assert runs - len(left_out) >= 2, left_out
    return runs - len(left_out)
