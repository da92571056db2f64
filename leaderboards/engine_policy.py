"""Policies backed by the trainer's rollout engines: ``hf``, ``vllm`` and ``openai-http``.

They reuse the trainer's pieces rather than re-implementing them: ``make_engine`` builds the
engine, ``load_policy`` / ``latest_checkpoint`` load a model from a run dir, a checkpoint or a
model dir, and each episode is played by the trainer's :class:`Collector` on a pool of one env
(token ids in and out); the trajectory it hands back is the episode's record
(``Episode.record``: the env's trajectory with the engine's log-probs in it).

Sampling is per episode: round ``r`` of the episode with reset seed ``s`` samples with seed
``s + r`` and a batch of one, so an episode's tokens depend on nothing but the weights and its
seed (not on which episodes happen to run next to it). That is what makes a killed
``agentgym-eval`` resume to the same submission. In-process engines (``hf``, ``vllm``) are
called by one thread at a time; the environments of the other workers step meanwhile.
``openai-http`` requests go out concurrently and the server batches them.

    agentgym-eval --suite core --policy hf --policy-arg model=runs/cpu-quickstart
    agentgym-eval --suite core --policy openai-http --policy-arg base_url=http://127.0.0.1:8000 \\
        --policy-arg model=gpt-oss-20b --policy-arg tokenizer=/models/gpt-oss-20b
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError
from agentgym.trajectory import Trajectory

__all__ = ["EnginePolicy", "hf_policy", "openai_http_policy", "resolve_model_dir", "vllm_policy"]


class _Serialized:
    """An engine that one thread at a time may call (in-process models are not re-entrant)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._lock = threading.Lock()

    def generate(self, prompts: list[list[int]], **kwargs: Any) -> Any:
        with self._lock:
            return self.engine.generate(prompts, **kwargs)

    def sync_weights(self, model: Any) -> None:
        with self._lock:
            self.engine.sync_weights(model)

    def close(self) -> None:
        self.engine.close()


class EnginePolicy:
    """Plays episodes with an :class:`~agentgym.trainer.rollout.engines.base.Engine` at ``temperature``."""

    def __init__(self, engine: Any, *, name: str, tokenizer: Any, temperature: float,
                 info: dict[str, Any], serialize: bool = True) -> None:
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        self.name = name
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.engine = _Serialized(engine) if serialize else engine
        self._info = info
        self._collectors: dict[int, Any] = {}  # id(env) -> Collector over that env alone
        self._lock = threading.Lock()

    def _collector(self, env: Any) -> Any:
        from agentgym.trainer.rollout.collector import Collector
        from agentgym.vector import EnvPool

        with self._lock:
            c = self._collectors.get(id(env))
            if c is None or c.pool.envs[0] is not env:
                c = Collector(EnvPool([env], max_workers=1), self.engine,
                              max_new_tokens=env.unwrapped.max_action_tokens)
                self._collectors[id(env)] = c
            return c

    def play(self, env: Any, *, seed: int, options: dict[str, Any] | None = None) -> Trajectory:
        episodes, _ = self._collector(env).collect([seed], temperature=self.temperature, sample_seed=seed,
                                                   options=options)
        return episodes[0].record()  # type: ignore[no-any-return]

    def describe(self) -> dict[str, Any]:
        return {**self._info, "temperature": self.temperature}

    def close(self) -> None:
        with self._lock:
            collectors, self._collectors = list(self._collectors.values()), {}
        for c in collectors:
            c.close()  # closes the env too: env.close() is idempotent, the evaluator's call is then a no-op
        self.engine.close()


# ---------------------------------------------------------------------------- model loading

def resolve_model_dir(path: str) -> str:
    """A directory with config.json + safetensors: the path itself, a run dir's latest
    checkpoint (``checkpoints/step-N/model``), or ``PATH/model``. ``tiny`` passes through."""
    if path == "tiny" or path.startswith("tiny:"):
        return path
    from agentgym.trainer.model.files import find_model_dir

    found = find_model_dir(path, "config.json")
    if found is not None:
        return str(found)
    raise ConfigError(f"model={path!r}: expected a model directory (config.json + *.safetensors), a run dir "
                      "written by agentgym-train (its latest checkpoint is used) or a checkpoint dir")


def weights_digest(model_dir: str) -> str | None:
    """SHA-256 (16 hex) over the model's safetensors files: which weights made a submission."""
    files = sorted(Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def hf_policy(*, model: str | None = None, tokenizer: str = "auto", device: str = "cpu", dtype: str = "float32",
              threads: int = 1, temperature: float = 1.0, attn_implementation: str = "auto",
              name: str | None = None) -> EnginePolicy:
    """A transformers model in process (``make_engine("hf")``): ``model`` is a model dir, a run dir of
    agentgym-train (latest checkpoint), a checkpoint dir, or ``random`` (alias ``tiny``: an untrained
    tiny model with random weights, for tests). It must be named: no default model is evaluated."""
    if model is None:
        raise ConfigError("--policy hf needs the model to evaluate: pass --policy-arg model=PATH (a model "
                          "directory, or a run dir of agentgym-train), or model=random for an untrained random "
                          "model (a smoke test)")
    if model == "random":
        model = "tiny"
    import torch

    from agentgym.trainer.model.gptoss import load_policy, resolve_tokenizer
    from agentgym.trainer.rollout.engines import make_engine

    if threads:
        torch.set_num_threads(int(threads))  # CPU float sums depend on the thread count: it is recorded
    model_dir = resolve_model_dir(model)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ConfigError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    net = load_policy(model_dir, device=device, dtype=torch_dtype, attn_implementation=attn_implementation)
    config: Any = net.config
    tok = resolve_tokenizer(model_dir, tokenizer, vocab_size=int(config.vocab_size))
    pad = getattr(tok, "pad_id", None)
    engine = make_engine("hf", model=net, pad_id=pad if pad is not None else config.pad_token_id)
    info = {"engine": "hf", "model": model, "model_dir": model_dir, "weights_sha256": weights_digest(model_dir),
            "device": device, "dtype": dtype, "threads": threads, "attn_implementation": attn_implementation}
    return EnginePolicy(engine, name=name or f"hf:{Path(model).name}", tokenizer=tok,
                        temperature=temperature, info=info)


def vllm_policy(*, model: str, tokenizer: str | None = None, temperature: float = 1.0,
                name: str | None = None, **engine_kwargs: Any) -> EnginePolicy:
    """In-process vLLM (GPU; ``make_engine("vllm")``); ``engine_kwargs`` go to the engine."""
    from agentgym.trainer.model.gptoss import resolve_tokenizer
    from agentgym.trainer.rollout.engines import make_engine

    model_dir = resolve_model_dir(model) if Path(model).exists() else model
    engine = make_engine("vllm", model=model_dir, **engine_kwargs)
    tok = resolve_tokenizer(model_dir, tokenizer or "auto")
    info = {"engine": "vllm", "model": model, "weights_sha256": weights_digest(model_dir), **engine_kwargs}
    return EnginePolicy(engine, name=name or f"vllm:{Path(model).name}", tokenizer=tok,
                        temperature=temperature, info=info)


def openai_http_policy(*, base_url: str, model: str = "agentgym", tokenizer: str = "byte",
                       api_key_env: str = "OPENAI_API_KEY", temperature: float = 1.0, timeout: float = 120.0,
                       max_concurrency: int = 16, name: str | None = None) -> EnginePolicy:
    """Any OpenAI-compatible completions server that takes and returns token ids (vLLM, SGLang,
    ``agentgym serve model``), local or remote. ``tokenizer`` must be the server's: ``byte`` or a
    path; the API key, if any, is read from the environment variable ``api_key_env``."""
    from agentgym.trainer.model.gptoss import resolve_tokenizer
    from agentgym.trainer.rollout.engines import make_engine

    tok = resolve_tokenizer(model, tokenizer)
    engine = make_engine("openai-http", base_url=base_url, model=model, api_key=os.environ.get(api_key_env),
                         timeout=timeout, max_concurrency=max_concurrency)
    info = {"engine": "openai-http", "model": model, "base_url": base_url, "tokenizer": tokenizer}
    return EnginePolicy(engine, name=name or f"openai-http:{model}", tokenizer=tok, temperature=temperature,
                        info=info, serialize=False)
