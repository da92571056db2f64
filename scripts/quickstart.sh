#!/usr/bin/env bash
# The CPU quickstart: set up .venv, then warm start + PPO of a tiny GPT-OSS on agentgym/MathCalc-v1 on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
exec .venv/bin/agentgym-train --config cpu-quickstart "$@"
