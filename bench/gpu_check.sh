#!/usr/bin/env bash
# The GPT-OSS-20B single-GPU check (bench/gpu_check.py): five timed, guarded steps; results.json and
# results.md go to $OUT (default bench/out/gpu-check). Arguments pass through (--dry, --steps mfu, ...).
# The GPU machine may have no network: WHEELS=DIR installs the wheels in DIR first, offline; the
# package itself is installed editable (no dependencies) when `import agentgym.trainer` fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then
  PY=.venv/bin/python
fi
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" "$WHEELS"/*.whl
fi
if ! "$PY" -c "import agentgym.trainer" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . \
    || { echo "bench/gpu_check.sh: cannot install agentgym here (offline, no deps); install it or set PYTHON" >&2; exit 2; }
fi
export HF_HUB_OFFLINE=1  # every model here is built from a config: never wait on the network
OUT="${OUT:-bench/out/gpu-check}"
mkdir -p "$OUT"
exec "$PY" bench/gpu_check.py --out "$OUT" "$@"
