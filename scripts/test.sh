#!/usr/bin/env bash
# The whole test suite on a fresh machine: .venv, Docker + sandbox image + PostgreSQL, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The system packages (downloads, dpkg) install beside the venv (uv, bytecode); the sandbox image
# needs both. A failure of either stops the run (after the other has finished: no dpkg cut off).
bash scripts/setup-system.sh --no-image &
system=$!
trap 'wait "$system" 2>/dev/null || true' EXIT
bash scripts/setup-venv.sh
wait "$system"
.venv/bin/agentgym sandbox build
set +e
# Two workers (pytest-xdist); tests that share a module's fixture or must not run side by side stay on
# one worker (xdist_group, see tests/conftest.py). --durations: every log shows where the time goes.
.venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 -n "${AGENTGYM_TEST_WORKERS:-2}" --dist loadgroup \
  --durations=25 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
