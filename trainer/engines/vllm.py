"""The ``vllm`` engine: in-process vLLM on the training GPU (optional dependency).

Written against vLLM's offline ``LLM`` API (>= 0.10, V1 engine) the way TRL's colocate mode
drives it; **not run in agentgym's CI** (no GPU there). Settings that make its log-probs
comparable with the trainer's ``policy_forward``:

* ``logprobs_mode="processed_logprobs"``: log-probs *after* temperature (the default reports
  raw logits' log-probs, before temperature, which biases every importance ratio);
* ``top_p=1``, ``top_k=0`` (off), ``min_p=0``, no repetition penalty, ``logprobs=0`` (the
  sampled token only);
* prompts as token ids (``{"prompt_token_ids": [...]}``), no detokenization needed.

Weight sync copies each trainer parameter into the worker's model with
``model.load_weights([(name, tensor)])`` (vLLM maps HF names onto its fused layout), then
resets the prefix cache, whose KV entries were computed with the old weights. This needs the
model runner in this process: we start vLLM with ``distributed_executor_backend=
"external_launcher"`` (as TRL does), which reads ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``.
GPT-OSS sinks are honoured by vLLM's own attention backends (FlashAttention-3 with sinks,
Triton), so the engine side never drops them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Any

import torch

from agentgym.errors import ConfigError
from agentgym.trainer.engines.base import Sample

__all__ = ["VLLMEngine"]

_HINT = "pip install 'agentgym-suite[gpu]'"


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ConfigError(
            f"the 'vllm' engine needs vLLM and a CUDA GPU: {_HINT} (or use engine 'hf' / 'openai-http')"
        ) from e
    return vllm


def _single_process_env() -> None:
    """Rendezvous variables for a one-process 'external_launcher' group, unless already set."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if not os.environ.get("MASTER_PORT"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])


class VLLMEngine:
    """Sample with an in-process ``vllm.LLM``.

    ``model``: a local checkpoint directory or hub id (what ``vllm.LLM(model=...)`` accepts;
    save the trainer's initial weights there first). ``gpu_memory_utilization``: the share of
    the GPU vLLM may take; keep it low enough for the learner (colocated). Extra keyword
    arguments go to ``vllm.LLM``.
    """

    def __init__(
        self,
        model: str,
        *,
        dtype: str = "bfloat16",
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        seed: int = 0,
        **llm_kwargs: Any,
    ) -> None:
        vllm = _import_vllm()
        if not torch.cuda.is_available():
            raise ConfigError("the 'vllm' engine needs a CUDA GPU; none is visible. Use engine 'hf' on CPU.")
        _single_process_env()
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=model,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
            logprobs_mode="processed_logprobs",
            distributed_executor_backend="external_launcher",
            **llm_kwargs,
        )
        self._closed = False

    def _runner_model(self) -> Any:
        try:
            return self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        except AttributeError as e:  # layout differs across vLLM versions
            raise ConfigError(
                "could not reach vLLM's in-process model runner "
                "(llm.llm_engine.model_executor.driver_worker.model_runner.model); this vLLM "
                f"version ({getattr(self._vllm, '__version__', '?')}) is not supported for in-process "
                "weight sync. Use engine 'openai-http' with a vLLM server instead."
            ) from e

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
            raise ConfigError("VLLMEngine used after close(); build a new engine")
        SamplingParams = self._vllm.SamplingParams

        def params(i: int) -> Any:
            return SamplingParams(
                n=1,
                temperature=float(temperature),
                top_p=1.0,
                top_k=0,
                min_p=0.0,
                repetition_penalty=1.0,
                max_tokens=int(max_new_tokens),
                stop_token_ids=[int(t) for t in stop_ids],
                logprobs=0,
                # one seed per prompt: identical prompts (a GRPO group) must not share a stream
                seed=None if seed is None else seed + i,
                skip_special_tokens=False,
                detokenize=False,
            )

        requests = [{"prompt_token_ids": [int(t) for t in p]} for p in prompts]
        outputs = self.llm.generate(requests, sampling_params=[params(i) for i in range(len(prompts))], use_tqdm=False)
        samples = []
        for out in outputs:
            comp = out.outputs[0]
            ids = [int(t) for t in comp.token_ids]
            if comp.logprobs is None or len(comp.logprobs) != len(ids):
                raise ConfigError("vLLM returned no per-token logprobs; SamplingParams.logprobs=0 is required")
            lps = [float(step[t].logprob) for step, t in zip(comp.logprobs, ids)]
            samples.append(Sample(ids, lps, str(comp.finish_reason or "length")))
        return samples

    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        runner = self._runner_model()
        for name, param in model.state_dict().items():
            runner.load_weights([(name, param.detach())])
        self.llm.reset_prefix_cache()

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory while the colocated learner updates (needs ``enable_sleep_mode=True``):
        level 1 offloads the weights to CPU and drops the KV cache, level 2 drops the weights
        too (the next ``sync_weights`` refills them). ``wake_up`` before generating again."""
        self.llm.sleep(level=level)

    def wake_up(self) -> None:
        self.llm.wake_up()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        del self.llm
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
