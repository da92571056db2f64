#!/usr/bin/env bash
# Create .venv at the repo root and install agentgym with the CPU training, scale (Ray,
# websockets: remote envs and Ray collection are tested in CI) and dev extras.
# torch is pinned first: `pip install torch==2.13.0` takes the CPU build; an unpinned torch
# would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/pip install -q "torch==2.13.0"
.venv/bin/pip install -q -e ".[train,scale,dev]"
.venv/bin/python -c "import agentgym, torch; print('agentgym', agentgym.__version__, '| torch', torch.__version__)"
