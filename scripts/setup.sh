#!/usr/bin/env bash
# Create .venv and install the project with everything the main job and the tests need.
# torch comes first, pinned to the CPU build on this machine's disk: a bare `torch`
# requirement (pulled in by ray[rllib]'s extras) would otherwise fetch a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[rllib,serve,dev]"
# The replay page is tested in headless Chromium (Debian packages).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) ||
    echo "setup: could not install chromium; the browser test will fail" >&2
fi
echo "setup: done ($(.venv/bin/python --version), torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"
