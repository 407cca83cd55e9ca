"""GGUF headers, read on the audited host: the architecture, the counts a placement needs and
the tensor table (name, bytes, rows), never the weights. Standard library only, Python 3.6;
prepended to the helpers that use it (the model files helper, the bench helper).

A tensor's bytes are the distance from its offset to the next tensor's in the data section
(the last one: to the end of its file), so every tensor type counts, known here or not; the
padding to the file's alignment (32 bytes by default) is counted with the tensor before it.
Split models (``-00001-of-00009.gguf``) give one table over all their parts.
"""

import os
import re
import struct

GGUF_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
GGUF_INTS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 7: "<?", 10: "<Q", 11: "<q"}
GGUF_STRING, GGUF_ARRAY = 8, 9
GGUF_MAX_KV = 1 << 20
GGUF_MAX_TENSORS = 1 << 20
GGUF_MAX_NAME = 65536
GGUF_SPLIT = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$")


def open_regular(path):
    """``path`` opened for reading, only where it is a regular file: the one way a model or a
    GGUF is opened on the host (a FIFO that a policy or a process names is never opened to
    block the helper: O_NONBLOCK, then fstat; a device or a socket is refused the same way).
    Raises OSError as ``open`` does, with "not a regular file" for the rest."""
    import stat

    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file", path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def gguf_model_files(path):
    """The files of a model: a directory's GGUFs, every part of a split model, or the file."""
    if os.path.isdir(path):
        return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".gguf"))
    match = GGUF_SPLIT.match(os.path.basename(path))
    if match:
        base, total = match.group(1), int(match.group(3))
        folder = os.path.dirname(path)
        return [os.path.join(folder, "%s-%05d-of-%05d.gguf" % (base, i, total))
                for i in range(1, total + 1)]
    return [path]


def gguf_take(f, n):
    data = f.read(n)
    if len(data) != n:
        raise ValueError("truncated GGUF header")
    return data


def _gguf_string(f):
    (n,) = struct.unpack("<Q", gguf_take(f, 8))
    if n > GGUF_MAX_NAME:
        raise ValueError("corrupt GGUF header: a string of %d bytes" % n)
    return gguf_take(f, n).decode("utf-8", "replace")


def gguf_skip(f, vtype):
    if vtype in GGUF_FIXED:
        gguf_take(f, GGUF_FIXED[vtype])
    elif vtype == GGUF_STRING:
        (n,) = struct.unpack("<Q", gguf_take(f, 8))
        f.seek(n, 1)
    elif vtype == GGUF_ARRAY:
        etype, count = struct.unpack("<IQ", gguf_take(f, 12))
        if etype in GGUF_FIXED:
            f.seek(GGUF_FIXED[etype] * count, 1)
        else:
            for _ in range(count):
                gguf_skip(f, etype)
    else:
        raise ValueError("corrupt GGUF header: unknown value type %d" % vtype)


def gguf_header(f, wanted=None, stop_at=None):
    """(the values of the keys wanted: strings and integers, the tensor count, the version);
    ``stop_at``: return as soon as that key is read. ``wanted`` None: every scalar key."""
    if gguf_take(f, 4) != b"GGUF":
        raise ValueError("not a GGUF file (bad magic)")
    (version,) = struct.unpack("<I", gguf_take(f, 4))
    if version < 2:
        raise ValueError("GGUF version %d is not supported" % version)
    n_tensors, n_kv = struct.unpack("<QQ", gguf_take(f, 16))
    if n_kv > GGUF_MAX_KV or n_tensors > GGUF_MAX_TENSORS:
        raise ValueError("corrupt GGUF header: %d keys, %d tensors" % (n_kv, n_tensors))
    values = {}
    for _ in range(n_kv):
        key = _gguf_string(f)
        (vtype,) = struct.unpack("<I", gguf_take(f, 4))
        keep = wanted is None or key in wanted or key.endswith(tuple(wanted))
        if keep and vtype == GGUF_STRING:
            values[key] = _gguf_string(f)
        elif keep and vtype in GGUF_INTS:
            (values[key],) = struct.unpack(GGUF_INTS[vtype], gguf_take(f, GGUF_FIXED[vtype]))
        else:
            gguf_skip(f, vtype)
        if key == stop_at:
            break
    return values, n_tensors, version


def gguf_architecture(path):
    """general.architecture of a GGUF file; raises ValueError on a bad or truncated header."""
    with open_regular(path) as f:
        values, _, _ = gguf_header(f, ("general.architecture",), "general.architecture")
    if "general.architecture" not in values:
        raise ValueError("no general.architecture in the GGUF header")
    return values["general.architecture"]


def _gguf_tensors(path, counts):
    """[[name, bytes, rows]] of one file; ``counts`` gets the architecture's counts."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        values, n_tensors, _ = gguf_header(f, (".block_count", ".expert_count",
                                                ".expert_used_count", ".context_length",
                                                "general.architecture", "general.alignment"))
        infos = []
        for _ in range(n_tensors):
            name = _gguf_string(f)
            (n_dims,) = struct.unpack("<I", gguf_take(f, 4))
            if n_dims > 8:
                raise ValueError("corrupt GGUF tensor table: %d dimensions" % n_dims)
            dims = struct.unpack("<%dQ" % n_dims, gguf_take(f, 8 * n_dims))
            _ttype, offset = struct.unpack("<IQ", gguf_take(f, 12))
            infos.append((offset, name, dims[1] if n_dims > 1 else 1))
        align = values.get("general.alignment") or 32
        start = (f.tell() + align - 1) // align * align
    arch = values.get("general.architecture")
    if arch and not counts:
        counts["architecture"] = arch
        for key in ("block_count", "expert_count", "expert_used_count", "context_length"):
            counts[key] = values.get("%s.%s" % (arch, key)) or 0
    infos.sort()
    table = []
    for i, (offset, name, rows) in enumerate(infos):
        end = infos[i + 1][0] if i + 1 < len(infos) else size - start
        if end < offset or start + offset > size:
            raise ValueError("corrupt GGUF tensor table: %s lies outside the file" % name)
        table.append([name, end - offset, rows])
    return table


def gguf_tensor_map(files):
    """The tensor table of a model (all its split parts): {"architecture", "block_count",
    "expert_count", "expert_used_count", "tensors": [[name, bytes, rows], ...]} or
    {"error": why}."""
    counts = {}
    tensors = []
    try:
        for path in files:
            tensors.extend(_gguf_tensors(path, counts))
    except (OSError, IOError) as exc:
        return {"error": "%s: %s" % (getattr(exc, "filename", None) or files[0],
                                     exc.strerror or exc)}
    except (ValueError, struct.error) as exc:
        return {"error": str(exc)}
    if not counts:
        return {"error": "no general.architecture in the GGUF header"}
    counts["tensors"] = tensors
    return counts
