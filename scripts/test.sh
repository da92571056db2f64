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
venv_s=$SECONDS
wait "$system"
setup_s=$SECONDS
# The sandbox image (~25 s) builds beside the first tests, under its build lock: a test (or backend)
# that needs the image before it is done waits for the build (agentgym.sandboxes.image.wait_for_build).
lock=$(.venv/bin/python -c "from agentgym.sandboxes.image import build_lock_path; print(build_lock_path())")
mkdir -p "$(dirname "$lock")"
build_log=$(mktemp)
.venv/bin/agentgym sandbox build > "$build_log" 2>&1 &
build=$!
trap 'wait "$system" "$build" 2>/dev/null || true' EXIT
while kill -0 "$build" 2>/dev/null && flock -n "$lock" true; do sleep 0.1; done  # until it holds the lock
set +e
# Bytecode caches are written: the suite starts ~250 Python processes, and with
# PYTHONDONTWRITEBYTECODE set each one recompiles the repo's modules and every pytest worker
# rewrites every test module's asserts again (~3.5 CPU-s per worker).
unset PYTHONDONTWRITEBYTECODE
# glibc malloc serves blocks above a dynamic threshold (at most 32 MiB) with mmap and unmaps them
# on free, so each of a training step's large temporaries (~90 MiB apiece in the CPU quickstart,
# hundreds per run) came as fresh zeroed pages: 10-25% of a CPU training process's time was kernel
# time. Kept on the heap, the suite uses ~8% less CPU (docs/internals/development.md). Results are
# bitwise the same; peak memory is higher (a process keeps up to 1 GiB of freed heap).
export MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824
# Three workers (pytest-xdist) on two cores: part of the tests' time is spent waiting on
# subprocesses, servers, containers and Ray (docs/internals/development.md: 3 beat 2; 4 did not
# beat 3 on fresh clones). Tests that share a module's fixture or must not run side
# by side stay on one worker (xdist_group, see tests/conftest.py). --durations: where the time goes.
.venv/bin/python -m pytest -q -p no:cacheprovider --timeout=900 -n "${AGENTGYM_TEST_WORKERS:-3}" --dist loadgroup \
  --durations=25 "$@"
rc=$?
pytest_s=$((SECONDS - setup_s))
wait "$build"
built=$?
set -e
cat "$build_log"
# Where the wall time went (the last lines CI shows).
echo "test.sh: setup ${setup_s} s (venv ${venv_s} s, system packages waited for $((setup_s - venv_s)) s)," \
  "pytest ${pytest_s} s, total ${SECONDS} s"
if [ "$built" -ne 0 ]; then
  echo "agentgym sandbox build failed (exit $built): see its output above" >&2
  [ "$rc" -eq 0 ] && rc=1
fi
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
