"""Sizes and GGUF headers of models, and which architectures llama.cpp binaries know.

Run on the audited host as ``python3 -c <this file> --models PATH... --llama PATH...``. Only
the header of a GGUF file is read (key by key, up to general.architecture), never the weights.
Split models (``-00001-of-00009.gguf``) count all their parts; a directory counts its GGUFs.
"""

import json
import os
import re
import struct
import sys

SPLIT = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$")
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
MAX_KV = 1 << 20


def _read(f, n):
    data = f.read(n)
    if len(data) != n:
        raise ValueError("truncated GGUF header")
    return data


def _skip(f, vtype):
    if vtype in FIXED:
        _read(f, FIXED[vtype])
    elif vtype == STRING:
        (n,) = struct.unpack("<Q", _read(f, 8))
        f.seek(n, 1)
    elif vtype == ARRAY:
        etype, count = struct.unpack("<IQ", _read(f, 12))
        if etype in FIXED:
            f.seek(FIXED[etype] * count, 1)
        else:
            for _ in range(count):
                _skip(f, etype)
    else:
        raise ValueError("corrupt GGUF header: unknown value type %d" % vtype)


def read_architecture(path):
    """general.architecture of a GGUF file; raises ValueError on a bad or truncated header."""
    with open(path, "rb") as f:
        if _read(f, 4) != b"GGUF":
            raise ValueError("not a GGUF file (bad magic)")
        (version,) = struct.unpack("<I", _read(f, 4))
        if version < 2:
            raise ValueError("GGUF version %d is not supported" % version)
        _n_tensors, n_kv = struct.unpack("<QQ", _read(f, 16))
        if n_kv > MAX_KV:
            raise ValueError("corrupt GGUF header: %d keys" % n_kv)
        for _ in range(n_kv):
            (klen,) = struct.unpack("<Q", _read(f, 8))
            if klen > 65536:
                raise ValueError("corrupt GGUF header: key of %d bytes" % klen)
            key = _read(f, klen).decode("utf-8", "replace")
            (vtype,) = struct.unpack("<I", _read(f, 4))
            if key == "general.architecture" and vtype == STRING:
                (n,) = struct.unpack("<Q", _read(f, 8))
                return _read(f, n).decode("utf-8", "replace")
            _skip(f, vtype)
    raise ValueError("no general.architecture in the GGUF header")


def model_files(path):
    if os.path.isdir(path):
        return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".gguf"))
    match = SPLIT.match(os.path.basename(path))
    if match:
        base, total = match.group(1), int(match.group(3))
        folder = os.path.dirname(path)
        return [os.path.join(folder, "%s-%05d-of-%05d.gguf" % (base, i, total))
                for i in range(1, total + 1)]
    return [path]


def describe_model(path):
    record = {"path": path, "error": None, "size_bytes": 0, "files": 0, "architecture": None}
    try:
        files = model_files(path)
        if not files:
            raise OSError("no .gguf file in this directory")
        record["size_bytes"] = sum(os.stat(f).st_size for f in files)
        record["files"] = len(files)
        first = files[0]
        if first.endswith(".gguf"):
            record["architecture"] = read_architecture(first)
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
    with open(path, "rb") as f:
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
