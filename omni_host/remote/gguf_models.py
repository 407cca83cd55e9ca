"""Sizes and GGUF headers of models, and which architectures llama.cpp binaries know.

Run on the audited host as ``python3 -c <gguf.py, then this file> --models PATH... --llama
PATH...``. Only the header of a GGUF file is read (key by key, up to general.architecture),
never the weights.
Split models (``-00001-of-00009.gguf``) count all their parts; a directory counts its GGUFs.
"""

import json
import os
import struct
import sys

if "gguf_header" not in globals():  # imported as a module; on the host gguf.py comes first
    from omni_host.remote.gguf import gguf_architecture, gguf_model_files, open_regular


def describe_model(path):
    record = {"path": path, "error": None, "size_bytes": 0, "files": 0, "architecture": None}
    try:
        files = gguf_model_files(path)
        if not files:
            raise OSError("no .gguf file in this directory")
        record["size_bytes"] = sum(os.stat(f).st_size for f in files)
        record["files"] = len(files)
        first = files[0]
        if first.endswith(".gguf"):
            record["architecture"] = gguf_architecture(first)
    except OSError as exc:
        record["error"] = "%s: %s" % (getattr(exc, "filename", None) or path, exc.strerror or exc)
    except (ValueError, struct.error) as exc:
        record["error"] = "%s: %s" % (path, exc)
    return record


def known_architectures(path, archs):
    """Which of ``archs`` appear as NUL-terminated names in a binary (llama.cpp keeps its
    architecture names as C strings)."""
    found = dict((a, False) for a in archs)
    needles = dict((a, b"\0" + a.encode() + b"\0") for a in archs)
    keep = max([len(n) for n in needles.values()] + [1])
    tail = b""
    with open_regular(path) as f:
        while True:
            chunk = f.read(1 << 22)
            if not chunk:
                break
            window = tail + chunk
            for a, needle in needles.items():
                if not found[a] and needle in window:
                    found[a] = True
            tail = window[-keep:]
    return found


def main(argv):
    models, binaries, target = [], [], None
    for arg in argv:
        if arg in ("--models", "--llama"):
            target = models if arg == "--models" else binaries
        elif target is not None:
            target.append(arg)
    described = [describe_model(m) for m in models]
    archs = sorted(set(m["architecture"] for m in described if m["architecture"]))
    out_bins = []
    for b in binaries:
        try:
            out_bins.append({"path": b, "known": known_architectures(b, archs), "error": None})
        except OSError as exc:
            out_bins.append({"path": b, "known": {}, "error": "%s: %s" % (b, exc.strerror)})
    sys.stdout.write(json.dumps({"models": described, "binaries": out_bins}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
