#!/usr/bin/env bash
# System pieces the test suite uses for real: the Docker engine (started if not running),
# debootstrap and bubblewrap for the sandboxes, PostgreSQL for WebAPI-v1's database option,
# chromium + chromedriver for the leaderboard page's browser test;
# then the sandbox image (built without any container registry, cached by content hash), which
# needs .venv (scripts/setup-venv.sh). `--no-image` stops before the image: scripts/test.sh installs
# the packages beside the venv and builds the image after both.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || need+=(postgresql)
# The leaderboard page is tested in a real headless browser (tests/leaderboards/test_board.py).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  echo "starting dockerd"
  nohup dockerd >/tmp/agentgym-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /tmp/agentgym-dockerd.log"; exit 1; }
fi
if [ "${1:-}" != "--no-image" ]; then
  .venv/bin/agentgym sandbox build
fi
