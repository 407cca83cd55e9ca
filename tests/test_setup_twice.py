"""Two set-ups of one machine at once (issue 62): tests/llama_bench.sh checked its cache, built
in its own temp dir, then removed the cache and moved its own in: a second set-up built again
(twice the CPU: 34.7 min instead of 7) and deleted the binaries the first one's tests ran.

The script itself runs here, twice at once, with stand-ins for the 7-minute build on PATH
(``cmake`` and the sdist download, which only lay out what the real ones make): what is under
test is its lock and its one rename, not the compiler."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "llama_bench.sh"
CMAKE = """#!/bin/sh
# the stand-in build: slow enough for the second set-up to arrive while it runs
if [ "$1" = "--build" ]; then
  echo built >> "$BUILDS"
  sleep 3
  mkdir -p "$2/bin"
  for b in llama-bench llama-server llama-fit-params; do
    printf '#!/bin/sh\\n' > "$2/bin/$b"; chmod 755 "$2/bin/$b"
  done
fi
"""
PYTHON3 = """#!/bin/sh
# `python3 -m pip download ... -d DIR`: the sdist's layout; anything else, the real python3
if [ "$1 $2 $3" = "-m pip download" ]; then
  for a in "$@"; do [ "$prev" = "-d" ] && dir="$a"; prev="$a"; done
  src="$dir/llama_cpp_python-0.3.36/vendor/llama.cpp/models"
  mkdir -p "$src" && printf 'vocab' > "$src/ggml-vocab-llama-spm.gguf"
  tar -czf "$dir/llama_cpp_python-0.3.36.tar.gz" -C "$dir" llama_cpp_python-0.3.36
  rm -rf "$dir/llama_cpp_python-0.3.36"
  exit 0
fi
exec /usr/bin/python3 "$@"
"""


@pytest.mark.system  # runs the set-up script with flock and g++ of this machine
def test_two_setups_at_once_build_once_and_both_succeed(tmp_path: Path) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    for name, text in (("cmake", CMAKE), ("python3", PYTHON3)):
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)
    builds = tmp_path / "builds"
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}",
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "BUILDS": str(builds)}
    runs = [subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [r.communicate(timeout=120) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outs
    cache = tmp_path / "cache" / "omni-host" / "llama-cpp-python-0.3.36"
    assert [o.strip() for o, _ in outs] == [str(cache)] * 2
    assert builds.read_text().splitlines() == ["built"]  # one build, used by both
    assert (cache / "bin" / "llama-bench").is_file() and (cache / "vocab.gguf").read_text() == "vocab"
    assert sorted(p.name for p in cache.parent.iterdir()) == [cache.name, f"{cache.name}.lock"]
