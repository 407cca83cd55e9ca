#!/usr/bin/env bash
# A CPU-only llama-bench, llama-server and llama-fit-params (one build: the serve tests hold the server to the
# bench of the same build) for the bench and serve tests, built from the llama.cpp sources that the
# llama-cpp-python sdist on PyPI vendors (Debian 12 packages no llama.cpp), and the real
# llama-spm vocabulary shipped beside them (the tests write random-weight models around it).
# About 7 minutes on 2 cores, once: cached by version under ~/.cache/omni-host (or
# $XDG_CACHE_HOME). Prints the cache directory; it holds bin/llama-bench, bin/llama-server,
# bin/llama-fit-params (the engine's own memory estimate: omni-host plan) and vocab.gguf.
set -euo pipefail
version=0.3.36
cache="${XDG_CACHE_HOME:-$HOME/.cache}/omni-host/llama-cpp-python-$version"
if [ -x "$cache/bin/llama-bench" ] && [ -x "$cache/bin/llama-server" ] \
    && [ -x "$cache/bin/llama-fit-params" ] && [ -s "$cache/vocab.gguf" ]; then
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
mkdir -p "$cache.tmp/bin"
cp "$work/build/bin/llama-bench" "$work/build/bin/llama-server" "$work/build/bin/llama-fit-params" \
  "$cache.tmp/bin/"
cp "$src/models/ggml-vocab-llama-spm.gguf" "$cache.tmp/vocab.gguf"
rm -rf "$cache" && mv "$cache.tmp" "$cache"
echo "$cache"
