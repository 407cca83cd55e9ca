#!/usr/bin/env bash
# A CPU-only llama-bench, llama-server and llama-fit-params (one build: the serve tests hold the server to the
# bench of the same build) for the bench and serve tests, built from the llama.cpp sources that the
# llama-cpp-python sdist on PyPI vendors (Debian 12 packages no llama.cpp), and the real
# llama-spm vocabulary shipped beside them (the tests write random-weight models around it).
# About 7 minutes on 2 cores, once: cached by version under ~/.cache/omni-host (or
# $XDG_CACHE_HOME). Prints the cache directory; it holds bin/llama-bench, bin/llama-server,
# bin/llama-fit-params (the engine's own memory estimate: omni-host plan) and vocab.gguf.
# Safe to run twice at once (two set-ups of one machine): the build holds a lock beside the
# cache, a second run waits for it and uses the first's build, and the cache is only ever
# replaced whole (a finished build renamed in), never one that is complete (a running test's).
set -euo pipefail
version=0.3.36
cache="${XDG_CACHE_HOME:-$HOME/.cache}/omni-host/llama-cpp-python-$version"
complete() {
  [ -x "$cache/bin/llama-bench" ] && [ -x "$cache/bin/llama-server" ] \
    && [ -x "$cache/bin/llama-fit-params" ] && [ -s "$cache/vocab.gguf" ]
}
if complete; then
  echo "$cache"
  exit 0
fi
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9  # another set-up's build: wait for it, then use it
if complete; then
  echo "$cache"
  exit 0
fi
command -v cmake >/dev/null && command -v g++ >/dev/null || {
  echo "llama_bench.sh: cmake and g++ are needed (apt-get install cmake g++)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  "llama-cpp-python==$version" -d "$work" >&2
tar -xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$work/build" --target llama-bench llama-server llama-fit-params -j "$(nproc)" >&2
staged=$(mktemp -d "$cache.XXXXXX")  # beside the cache: one rename puts it in place
trap 'rm -rf "$work" "$staged"' EXIT
mkdir -p "$staged/bin"
cp "$work/build/bin/llama-bench" "$work/build/bin/llama-server" "$work/build/bin/llama-fit-params" \
  "$staged/bin/"
cp "$src/models/ggml-vocab-llama-spm.gguf" "$staged/vocab.gguf"
chmod 755 "$staged"
rm -rf "$cache" && mv "$staged" "$cache"  # an incomplete cache only: a complete one ended above
echo "$cache"
