"""``OpenAIChatPolicy``: play agentgym episodes with any OpenAI-compatible chat server.

Works with hosted APIs, ``vllm serve`` / SGLang serving any model, and agentgym's own server
(``agentgym serve model``). Each episode goes through :class:`ChatWrapper`: the conversation
and the tools go to ``POST {base_url}/chat/completions``, the assistant message comes back and
is stepped; the trajectory record stays the exact token stream.

    policy = OpenAIChatPolicy(base_url="http://127.0.0.1:8000/v1", model="agentgym")
    traj = policy.play(gym.make("agentgym/MathCalc-v1"), seed=0)

The API key is read from the environment variable ``api_key_env`` (never passed or logged);
without one no ``Authorization`` header is sent (local servers). Requests are retried on
connection errors, timeouts and HTTP 408/409/429/5xx with exponential backoff and jitter
(``Retry-After`` honoured), at most ``concurrency`` in flight across threads. With
``token_ids=True`` (vLLM >= 0.10.2, agentgym's server) the server's prompt and sampled token
ids are compared with the episode's: ``stats["prompt_exact_turns"]`` counts the turns where the
server conditioned on exactly the episode's token stream, ``stats["exact_turns"]`` those where it
also sampled exactly the recorded action; a fully sampled exact action (no header forced by
``tool_choice``) gets the server's behaviour log-probs in the record.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from typing import Any

import gymnasium as gym
import httpx

from agentgym.chat.chat_wire import ChatReply, chat_request, parse_chat_response
from agentgym.chat.wrapper import ChatWrapper
from agentgym.errors import ConfigError, ServiceError
from agentgym.tokenizers import Tokenizer, as_tokenizer
from agentgym.trajectory import Trajectory

__all__ = ["OpenAIChatPolicy"]

RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504})


def _coerce(name: str, value: Any, kind: type, optional: bool = False) -> Any:
    """Accept typed values from Python and strings from ``--policy-arg key=value``."""
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null", "")):
        if optional:
            return None
        raise ConfigError(f"{name} is required")
    try:
        if kind is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                return value.lower() in ("true", "1", "yes")
            return bool(value)
        if kind is dict:
            v = json.loads(value) if isinstance(value, str) else value
            if not isinstance(v, dict):
                raise ValueError(value)
            return dict(v)
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be {'None or ' if optional else ''}a {kind.__name__}, "
                          f"got {value!r}") from None


class OpenAIChatPolicy:
    """An ``EpisodePolicy`` for ``agentgym-eval`` (``play`` / ``describe`` / ``close``), thread-safe."""

    name = "openai-chat"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float | None = 1.0,
        top_p: float | None = None,
        max_tokens: int | None = 2048,
        seed: int | None = 0,
        reasoning_effort: str | None = None,
        tool_choice: str = "auto",
        parallel_tool_calls: bool | None = False,
        send_reasoning: bool = True,
        token_ids: bool = False,
        extra_body: dict[str, Any] | str | None = None,
        timeout: float = 120.0,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        concurrency: int = 8,
        tokenizer: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``base_url``: up to and including ``/v1`` (``http://127.0.0.1:8000/v1``). ``model``: the
        served model name. ``temperature``/``top_p``/``max_tokens``/``reasoning_effort``: sampling
        settings sent as given (None: not sent, the server's default; ``reasoning_effort="env"``
        sends the environment's own, which GPT-OSS servers need to render the env's exact system
        message; hosted non-reasoning models refuse the field). ``seed``: per-request seeds
        derived from it, the episode seed and the turn (None: no seed sent). ``tool_choice``: ``auto``, ``none``,
        ``required`` or a function name. ``parallel_tool_calls``: sent when not None (Harmony runs
        one call per turn). ``send_reasoning``: keep ``reasoning_content`` in the history sent back
        (some APIs refuse it). ``token_ids``: ask for vLLM-style token ids and log-probs (module
        doc). ``extra_body``: more request fields (a dict or a JSON string). ``timeout``: seconds
        per request. ``max_retries``, ``backoff``, ``max_backoff``: retry schedule (seconds).
        ``concurrency``: requests in flight at most, across threads. ``tokenizer``: a Hugging Face
        tokenizer path for the environments ``agentgym-eval`` builds (None: agentgym's byte
        tokenizer); a GPT-OSS server's token ids match the record only with the model's own."""
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must be an http(s) URL ending in /v1, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ConfigError("model must name the served model (GET {base_url}/models lists them)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = str(api_key_env or "")
        self.sampling: dict[str, Any] = {}
        self.effort_from_env = reasoning_effort == "env"
        if self.effort_from_env:
            reasoning_effort = None
        for key, value, kind in (("temperature", temperature, float), ("top_p", top_p, float),
                                 ("max_completion_tokens", max_tokens, int),
                                 ("reasoning_effort", reasoning_effort, str),
                                 ("parallel_tool_calls", parallel_tool_calls, bool)):
            v = _coerce(key, value, kind, optional=True)
            if v is not None:
                self.sampling[key] = v
        choice = _coerce("tool_choice", tool_choice, str)
        self.sampling["tool_choice"] = (choice if choice in ("auto", "none", "required")
                                        else {"type": "function", "function": {"name": choice}})
        self.seed = _coerce("seed", seed, int, optional=True)
        # agentgym-eval builds the environments with this object (None: the byte tokenizer)
        self.tokenizer_spec = _coerce("tokenizer", tokenizer, str, optional=True)
        self.tokenizer: Tokenizer | None = as_tokenizer(self.tokenizer_spec) if self.tokenizer_spec else None
        self.send_reasoning = _coerce("send_reasoning", send_reasoning, bool)
        self.token_ids = _coerce("token_ids", token_ids, bool)
        self.extra_body = _coerce("extra_body", extra_body, dict, optional=True) or {}
        self.timeout = _coerce("timeout", timeout, float)
        self.max_retries = _coerce("max_retries", max_retries, int)
        self.backoff = _coerce("backoff", backoff, float)
        self.max_backoff = _coerce("max_backoff", max_backoff, float)
        self.concurrency = _coerce("concurrency", concurrency, int)
        if self.timeout <= 0 or self.max_retries < 0 or self.backoff < 0 or self.concurrency < 1:
            raise ConfigError("expected timeout > 0, max_retries >= 0, backoff >= 0 and concurrency >= 1; "
                              f"got {self.timeout}, {self.max_retries}, {self.backoff}, {self.concurrency}")
        headers: dict[str, str] = {"Content-Type": "application/json"}
        api_key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._api_key_set = bool(api_key)
        self._client = httpx.Client(timeout=self.timeout, headers=headers, transport=transport)
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._lock = threading.Lock()
        self.stats = {"episodes": 0, "requests": 0, "retries": 0, "turns": 0, "prompt_exact_turns": 0,
                      "exact_turns": 0}

    # ------------------------------------------------------------------ EpisodePolicy protocol
    def play(self, env: gym.Env, *, seed: int, options: dict[str, Any] | None = None) -> Trajectory:
        """Reset ``env`` with ``seed``/``options``, play one episode, return a copy of its record."""
        chat = env if isinstance(env, ChatWrapper) else ChatWrapper(env)
        _, info = chat.reset(seed=seed, options=options)
        traj = chat.inner.trajectory
        assert traj is not None
        done, turn = False, 0
        while not done:
            stream = list(traj.tokens)
            reply = self.complete(chat.messages, info["tools"], seed=self._request_seed(seed, turn),
                                  reasoning_effort=info["reasoning_effort"] if self.effort_from_env else None)
            _, _, terminated, truncated, _ = chat.step(reply.message)
            seen, exact = self._attach_logprobs(traj, stream, reply)
            self._count(turns=1, prompt_exact_turns=int(seen), exact_turns=int(exact))
            done, turn = terminated or truncated, turn + 1
        self._count(episodes=1)
        return Trajectory.from_dict(traj.to_dict())

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "engine": "openai-chat", "model": self.model, "base_url": self.base_url,
                "sampling": json.loads(json.dumps(self.sampling)), "seed": self.seed,
                "reasoning_effort_from_env": self.effort_from_env,
                "extra_body": dict(self.extra_body), "token_ids": self.token_ids,
                "send_reasoning": self.send_reasoning, "timeout": self.timeout,
                "max_retries": self.max_retries, "concurrency": self.concurrency,
                "api_key_env": self.api_key_env, "api_key_set": self._api_key_set,
                "tokenizer": self.tokenizer_spec, "temperature": self.sampling.get("temperature")}

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIChatPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests
    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                 seed: int | None = None, reasoning_effort: str | None = None) -> ChatReply:
        """One chat completion (with retries) for a conversation and its tools; ``seed`` and
        ``reasoning_effort`` are added to the policy's sampling settings when given."""
        if not self.send_reasoning:
            messages = [{k: v for k, v in m.items() if k not in ("reasoning_content", "reasoning")}
                        for m in messages]
        sampling = dict(self.sampling)
        if seed is not None:
            sampling["seed"] = seed
        if reasoning_effort is not None:
            sampling["reasoning_effort"] = reasoning_effort
        body = chat_request(self.model, messages, tools, sampling=sampling, token_ids=self.token_ids)
        body.update(self.extra_body)
        return parse_chat_response(self._post(body))

    def _post(self, body: dict[str, Any]) -> Any:
        url = f"{self.base_url}/chat/completions"
        last = ""
        for attempt in range(self.max_retries + 1):
            wait: float | None = None
            with self._slots:
                self._count(requests=1)
                try:
                    r = self._client.post(url, json=body)
                except httpx.TransportError as e:  # connect errors, timeouts, resets
                    last = f"{type(e).__name__}: {e}"
                else:
                    if r.status_code == 200:
                        try:
                            return r.json()
                        except ValueError:
                            raise ServiceError(f"{url} answered 200 with a body that is not JSON: "
                                               f"{r.text[:300]!r}") from None
                    last = f"HTTP {r.status_code}: {r.text[:500]}"
                    if r.status_code not in RETRYABLE:
                        hint = (f"; set ${self.api_key_env} to the API key" if r.status_code in (401, 403)
                                else "; check base_url (it should end in /v1)" if r.status_code == 404 else "")
                        raise ServiceError(f"chat completions at {url} refused the request: {last}{hint}")
                    wait = _retry_after(r)
            if attempt == self.max_retries:
                break
            delay = wait if wait is not None else self.backoff * 2**attempt * (0.5 + random.random() / 2)
            self._count(retries=1)
            time.sleep(min(delay, self.max_backoff))
        raise ServiceError(f"chat completions at {url} failed {self.max_retries + 1} times; last error: "
                           f"{last}. Is the server up (GET {self.base_url}/models)? Raise max_retries or "
                           "timeout for a slow or rate-limited server.")

    # ------------------------------------------------------------------ internals
    def _request_seed(self, episode_seed: int | None, turn: int) -> int | None:
        if self.seed is None:
            return None
        return (self.seed * 1_000_003 + (episode_seed or 0) * 1_009 + turn) % 2**31

    def _attach_logprobs(self, traj: Trajectory, stream: list[int], reply: ChatReply) -> tuple[bool, bool]:
        """(the server saw exactly the episode's tokens, and sampled exactly the recorded action);
        when both hold and every action token was sampled, the turn gets the server's log-probs."""
        if reply.token_ids is None or reply.prompt_token_ids != stream:
            return False, False
        t = traj.turns[-1]
        if traj.tokens[t.action_start:t.action_end] != reply.token_ids:
            return True, False
        if reply.logprobs is not None and len(reply.logprobs) == len(reply.token_ids):
            traj.set_action_logprobs(len(traj.turns) - 1, reply.logprobs)
        return True, True

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self.stats[k] += v


def _retry_after(r: httpx.Response) -> float | None:
    try:
        return max(0.0, float(r.headers.get("retry-after", "")))
    except ValueError:
        return None
