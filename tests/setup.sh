#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh Debian/Ubuntu machine, as root:
# the real servers the tests talk to (OpenSSH, Docker), numactl and sudo, then the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
command -v numactl >/dev/null || need+=(numactl)
command -v sudo >/dev/null || need+=(sudo)
command -v dockerd >/dev/null || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v chromium >/dev/null || need+=(chromium)        # renders the HTML report in a test
command -v pdftotext >/dev/null || need+=(poppler-utils)  # reads back what Chromium printed
command -v systemd-analyze >/dev/null || need+=(systemd)  # verifies the generated timer units
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)      # builds the fresh Debian box of the bootstrap test
command -v zsh >/dev/null || need+=(zsh)                  # runs the generated zsh completion
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'

# The bench tests' CPU-only llama-bench (built once, then cached by version).
command -v cmake >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends cmake >/dev/null; }
bash tests/llama_bench.sh >/dev/null
