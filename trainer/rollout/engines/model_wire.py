"""Wire format shared by the ``openai-http`` client and agentgym's completions server.

The OpenAI completions API, with the token-level extensions vLLM and SGLang accept:

request  ``POST /v1/completions``::

    {"model": str, "prompt": [[int, ...], ...], "max_tokens": int, "temperature": float,
     "top_p": 1.0, "top_k": -1, "logprobs": 0, "stop_token_ids": [int, ...], "seed": int | null,
     "skip_special_tokens": false, "return_token_ids": true, "return_tokens_as_token_ids": true}

response::

    {"choices": [{"index": i, "text": str, "finish_reason": "stop" | "length",
                  "token_ids": [int, ...],
                  "logprobs": {"tokens": ["token_id:17", ...], "token_logprobs": [float, ...]}}]}

``logprobs: 0`` asks for the sampled token's log-prob only (no alternatives). The sampled
ids are read from ``choices[i].token_ids`` (vLLM's ``return_token_ids``) or, failing that,
from the ``"token_id:N"`` strings of ``return_tokens_as_token_ids``.

Weight reload (agentgym server; SGLang's ``/update_weights_from_disk`` has the same shape with
key ``model_path``): ``POST /reload_weights {"path": dir_or_safetensors_file}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym.errors import ServiceError

from .base import Sample

__all__ = ["COMPLETIONS_PATH", "RELOAD_PATH", "TOKEN_ENV", "completion_request", "completion_response",
           "parse_completion"]

COMPLETIONS_PATH = "/v1/completions"
RELOAD_PATH = "/reload_weights"
# The bearer token of `agentgym serve model` (required when it is bound off loopback); the
# client sends it when no api_key is given. The same variable as the env server's.
TOKEN_ENV = "AGENTGYM_SERVE_TOKEN"
_TOKEN_PREFIX = "token_id:"


def completion_request(
    model: str,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    stop_ids: Sequence[int],
    seed: int | None,
) -> dict[str, Any]:
    """The JSON body of one batched completions request (module doc)."""
    return {
        "model": model,
        "prompt": [list(map(int, p)) for p in prompts],
        "max_tokens": int(max_new_tokens),
        "temperature": float(temperature),
        "top_p": 1.0,
        "top_k": -1,
        "logprobs": 0,
        "stop_token_ids": [int(t) for t in stop_ids],
        "seed": seed,
        "skip_special_tokens": False,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }


def _ids_from_strings(tokens: list[str]) -> list[int]:
    out = []
    for t in tokens:
        if not t.startswith(_TOKEN_PREFIX):
            raise ServiceError(
                f"expected logprobs.tokens entries like 'token_id:17' (return_tokens_as_token_ids), "
                f"got {t!r}; the server must return token ids, not text"
            )
        out.append(int(t[len(_TOKEN_PREFIX) :]))
    return out


def parse_completion(body: dict[str, Any], n_prompts: int) -> list[Sample]:
    """Samples in prompt order from a completions response body (module doc)."""
    choices = body.get("choices")
    if not isinstance(choices, list) or len(choices) != n_prompts:
        got = len(choices) if isinstance(choices, list) else type(choices).__name__
        raise ServiceError(f"expected {n_prompts} choices in the completions response, got {got}")
    samples: list[Sample | None] = [None] * n_prompts
    for pos, ch in enumerate(choices):
        lp = ch.get("logprobs") or {}
        logprobs = lp.get("token_logprobs")
        if logprobs is None:
            raise ServiceError("completions response has no logprobs.token_logprobs; send logprobs=0")
        ids = ch.get("token_ids")
        if ids is None:
            ids = _ids_from_strings(lp.get("tokens") or [])
        if len(ids) != len(logprobs):
            raise ServiceError(f"got {len(ids)} token ids but {len(logprobs)} log-probs in choice {pos}")
        idx = int(ch.get("index", pos))
        samples[idx] = Sample(
            tokens=[int(t) for t in ids],
            logprobs=[float(x) for x in logprobs],
            finish_reason=str(ch.get("finish_reason") or "length"),
        )
    if any(s is None for s in samples):
        raise ServiceError("completions response choices do not cover every prompt index")
    return [s for s in samples if s is not None]


def completion_response(model: str, samples: list[Sample]) -> dict[str, Any]:
    """What agentgym's server answers (the subset of vLLM's response the client reads)."""
    return {
        "object": "text_completion",
        "model": model,
        "choices": [
            {
                "index": i,
                "text": "",
                "finish_reason": s.finish_reason,
                "token_ids": s.tokens,
                "logprobs": {
                    "tokens": [f"{_TOKEN_PREFIX}{t}" for t in s.tokens],
                    "token_logprobs": s.logprobs,
                    "top_logprobs": None,
                    "text_offset": [0] * len(s.tokens),
                },
            }
            for i, s in enumerate(samples)
        ],
        "usage": {"completion_tokens": sum(len(s.tokens) for s in samples)},
    }
