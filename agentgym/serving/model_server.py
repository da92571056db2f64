"""agentgym's OpenAI-compatible server, backed by the ``hf`` engine.

Serves token-id completions with processed log-probs (the wire format in
``agentgym.trainer.rollout.engines.model_wire``), chat completions with tool calling
(``/v1/chat/completions``: the messages rendered in Harmony exactly as the environments render
them, the sampled action parsed back into an assistant message with ``tool_calls``;
``stream: true`` sends the finished completion as server-sent events;
``agentgym.serving.chat_server``), and a ``/reload_weights`` endpoint that loads a safetensors checkpoint into the served model. So the ``openai-http``
engine, weight sync and the ``openai-chat`` policy are tested end to end over real HTTP
without vLLM.

Who gets in is :mod:`agentgym.serving.guard` (loopback by default; a bearer token elsewhere);
``/reload_weights`` loads only from the directories named at start (``--weights-dir``); every
request is checked against :class:`ModelLimits` (prompt length, ``max_tokens``, token ids,
temperature, seed) before the engine sees it, and a request whose client disconnects leaves
the queue, or stops generating at its next token.

Run it in a thread (:class:`CompletionServer`, used by tests) or as a process::

    agentgym serve model --model tiny --port 8000
    agentgym serve model --model runs/x/checkpoints/step-20 --tokenizer PATH --weights-dir runs/x/sync
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import torch
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentgym.chat.chat_wire import CHAT_PATH
from agentgym.errors import CheckpointError, ConfigError, ServiceError
from agentgym.harmony import HarmonyCodec
from agentgym.serving.chat_server import chat_completion, stream_events
from agentgym.serving.guard import Access, Guard
from agentgym.serving.transport import BodyError, listen, read_body, uvicorn_config
from agentgym.tokenizers import Tokenizer, as_tokenizer
from agentgym.trainer.rollout.engines.hf import HFEngine
from agentgym.trainer.rollout.engines.model_wire import COMPLETIONS_PATH, RELOAD_PATH, completion_response

__all__ = ["CompletionServer", "ModelLimits", "build_app", "load_safetensors_into", "run"]


def load_safetensors_into(model: torch.nn.Module, path: str | Path) -> int:
    """Load a safetensors file, or every ``*.safetensors`` in a directory, into ``model``.

    Every parameter and buffer of the checkpoint must match the model by name and shape;
    returns the number of tensors loaded.
    """
    from safetensors.torch import load_file

    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        raise CheckpointError(f"no safetensors checkpoint at {str(p)!r}; expected a file or a directory of *.safetensors")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        sd.update(load_file(str(f)))
    own = model.state_dict()
    unknown = sorted(set(sd) - set(own))
    if unknown:
        raise CheckpointError(f"checkpoint {str(p)!r} has tensors the served model lacks: {unknown[:5]}")
    for k, v in sd.items():
        if own[k].shape != v.shape:
            raise CheckpointError(f"{k}: checkpoint shape {tuple(v.shape)} != model shape {tuple(own[k].shape)}")
    with torch.no_grad():
        for k, v in sd.items():
            own[k].copy_(v.to(own[k].dtype))
    return len(sd)


@dataclass(frozen=True)
class ModelLimits:
    """What one request to ``agentgym serve model`` may ask for (larger asks are a 400)."""

    max_prompt_tokens: int = 8192  # one prompt (chat: the rendered conversation)
    max_tokens: int = 4096  # completion tokens per prompt (chat's default budget is build_app's max_tokens)
    max_prompts: int = 64  # prompts in one request (chat: n)
    max_body_bytes: int = 4 << 20  # one request body
    body_timeout_s: float = 30.0  # a request body that takes longer is refused (408)
    header_timeout_s: float = 10.0  # a connection idle, or slow with its request headers, is closed


class _Refused(Exception):
    """A request the operator's settings forbid (403)."""


class _ClientGone(Exception):
    """The client of the running generation disconnected: the generation stops at the next token."""


def _weights_dirs(dirs: Sequence[str | Path]) -> tuple[Path, ...]:
    out = []
    for d in dirs:
        p = Path(d).expanduser().resolve()
        if not p.is_dir():
            raise ConfigError(f"--weights-dir {str(d)!r} is not a directory; name the directory the trainer "
                              "writes its weights to (the openai-http engine's checkpoint_dir)")
        out.append(p)
    return tuple(out)


def _allowed_checkpoint(path: str, dirs: tuple[Path, ...]) -> Path:
    """``path`` resolved (symlinks, ``..``), if it and every file it names lie in ``dirs``; else _Refused."""
    if not dirs:
        raise _Refused("this server loads no weights: it was started without --weights-dir. Restart it with "
                       "--weights-dir DIR (repeatable) naming where the trainer writes its checkpoints")
    target = Path(path).expanduser().resolve()
    files = [f.resolve() for f in target.glob("*.safetensors")] if target.is_dir() else [target]
    for p in (target, *files):
        if not any(p.is_relative_to(d) for d in dirs):
            raise _Refused(f"{path!r} is outside the directories this server loads weights from "
                           f"({', '.join(str(d) for d in dirs)}); write the checkpoint there, or restart the "
                           "server with --weights-dir naming its directory")
    return target


def _check_sampling(prompts: list[list[int]], vocab: int, limits: ModelLimits, *, max_new_tokens: Any,
                    temperature: Any, stop_ids: Any, seed: Any) -> None:
    """Refuse (ValueError) what the engine must never see: sizes over the limits, ids outside the
    vocabulary, a temperature that is not a finite number in [0, 2], a seed outside [0, 2^63)."""
    def is_int(x: Any) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    if not 1 <= len(prompts) <= limits.max_prompts:
        raise ValueError(f"a request may carry 1 to {limits.max_prompts} prompts, got {len(prompts)}")
    for p in prompts:
        if not 1 <= len(p) <= limits.max_prompt_tokens:
            raise ValueError(f"a prompt must have 1 to {limits.max_prompt_tokens} tokens (this server's "
                             f"--max-prompt-tokens), got {len(p)}")
        if not all(is_int(t) and 0 <= t < vocab for t in p):
            bad = next(t for t in p if not (is_int(t) and 0 <= t < vocab))
            raise ValueError(f"prompt token ids must be integers in [0, {vocab}), got {bad!r}")
    if not (is_int(max_new_tokens) and 1 <= max_new_tokens <= limits.max_tokens):
        raise ValueError(f"max_tokens must be an integer in [1, {limits.max_tokens}] (this server's "
                         f"--max-completion-tokens), got {max_new_tokens!r}")
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
            and math.isfinite(temperature) and 0.0 <= temperature <= 2.0):
        raise ValueError(f"temperature must be a number in [0, 2] (0 = greedy), got {temperature!r}")
    if len(stop_ids) > 64 or not all(is_int(t) and 0 <= t < vocab for t in stop_ids):
        raise ValueError(f"stop_token_ids must be at most 64 integers in [0, {vocab})")
    if seed is not None and not (is_int(seed) and 0 <= seed < 2**63):
        raise ValueError(f"seed must be null or an integer in [0, 2^63), got {seed!r}")


def build_app(engine: HFEngine, model_name: str = "agentgym", *, tokenizer: Tokenizer | str | None = None,
              reasoning_effort: str = "low", max_tokens: int = 2048, access: Access | None = None,
              weights_dirs: Sequence[str | Path] = (), limits: ModelLimits | None = None) -> Guard:
    """The Starlette app (completions, chat completions, weight reload, health, model list) behind
    :class:`~agentgym.serving.guard.Guard`.

    ``tokenizer`` (default: agentgym's ByteTokenizer) renders and parses chat; its ids must be
    the model's. ``reasoning_effort`` and ``max_tokens`` are the chat defaults (``low`` is what
    the environments' system message says). ``access``: who is let in (default: loopback, no
    token). ``weights_dirs``: the only directories ``/reload_weights`` loads from (none: reload
    is refused). ``limits``: what one request may ask for.
    """
    lim = limits or ModelLimits()
    if not 1 <= max_tokens <= lim.max_tokens:
        raise ConfigError(f"the chat default --max-tokens {max_tokens} must be in [1, {lim.max_tokens}] "
                          "(--max-completion-tokens)")
    allowed = _weights_dirs(weights_dirs)
    gate = anyio.Lock()  # one generation or reload at a time: the engine's batch is the request
    codec = HarmonyCodec(as_tokenizer(tokenizer))
    model_vocab = getattr(engine.model.config, "vocab_size", None)
    if model_vocab is not None and codec.tok.vocab_size > model_vocab:
        raise ConfigError(f"tokenizer {codec.tok!r} has {codec.tok.vocab_size} ids but the model's "
                          f"vocabulary has {model_vocab}: pass the tokenizer the model was trained with")
    vocab = int(model_vocab or codec.tok.vocab_size)
    running: list[threading.Event] = []  # the cancel flag of the generation in progress, if any

    def stop_if_gone(*_: Any) -> None:  # a forward pre-hook: runs before every decoding step
        if running and running[0].is_set():
            raise _ClientGone()

    engine.model.register_forward_pre_hook(stop_if_gone)

    class _Checked:  # the engine as requests reach it: every ask checked against the limits
        def generate(self, prompts: list[list[int]], *, max_new_tokens: Any, temperature: Any,
                     stop_ids: Any, seed: Any = None) -> Any:
            _check_sampling(prompts, vocab, lim, max_new_tokens=max_new_tokens, temperature=temperature,
                            stop_ids=stop_ids, seed=seed)
            return engine.generate(prompts, max_new_tokens=max_new_tokens, temperature=float(temperature),
                                   stop_ids=stop_ids, seed=seed)

    checked = _Checked()

    def _chat(body: Any) -> dict[str, Any]:
        if isinstance(body, dict) and body.get("model") not in (None, model_name):
            raise LookupError(f"the model {body.get('model')!r} is not served here; this server serves {model_name!r}")
        return chat_completion(checked, codec, body, model_name=model_name, reasoning_effort=reasoning_effort,
                               max_tokens=max_tokens, max_tokens_cap=lim.max_tokens)

    def _complete(body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], list):
            prompt = [prompt]
        if not (isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt)):
            raise ValueError("prompt must be a list of token ids or a list of such lists (text is not accepted)")
        if float(body.get("top_p", 1.0)) != 1.0 or int(body.get("top_k", -1)) not in (-1, 0):
            raise ValueError("only top_p=1 and top_k=-1 are served (log-probs must match the trainer)")
        if int(body.get("n", 1)) != 1:
            raise ValueError("n must be 1; repeat the prompt instead")
        stop_ids = body.get("stop_token_ids") or []
        if not isinstance(stop_ids, list):
            raise ValueError(f"stop_token_ids must be a list of token ids, got {stop_ids!r}")
        samples = checked.generate(prompt, max_new_tokens=body.get("max_tokens", 16),
                                   temperature=body.get("temperature", 1.0), stop_ids=stop_ids,
                                   seed=body.get("seed"))
        return completion_response(model_name, samples)

    def _reload(body: Any) -> dict[str, Any]:
        path = body.get("path") or body.get("model_path") if isinstance(body, dict) else None
        if not isinstance(path, str):
            raise ValueError("reload body must be {\"path\": \"<checkpoint dir or .safetensors file>\"}")
        n = load_safetensors_into(engine.model, _allowed_checkpoint(path, allowed))
        return {"ok": True, "loaded_tensors": n, "path": path}

    def _run(cancel: threading.Event, fn: Callable[[Any], dict[str, Any]], body: Any) -> Any:
        running[:] = [cancel]
        try:
            return fn(body)
        except Exception as e:  # returned, not raised: it crosses a task group (module doc of anyio)
            return e
        finally:
            running.clear()

    async def exclusive(request: Request, fn: Callable[[Any], dict[str, Any]], body: Any) -> dict[str, Any]:
        """``fn(body)`` in a worker thread, one request at a time; a request whose client disconnects
        stops waiting for its turn, or stops generating at the next token."""
        cancel, out = threading.Event(), []

        async def work(tg: anyio.abc.TaskGroup) -> None:
            async with gate:
                out.append(await anyio.to_thread.run_sync(_run, cancel, fn, body))
            tg.cancel_scope.cancel()

        async def watch(tg: anyio.abc.TaskGroup) -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            cancel.set()
            tg.cancel_scope.cancel()  # a waiting request leaves the queue; a running one ends at its next token

        async with anyio.create_task_group() as tg:
            tg.start_soon(work, tg)
            tg.start_soon(watch, tg)
        if not out:
            raise _ClientGone()
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]  # type: ignore[no-any-return]

    async def answer(request: Request, fn: Callable[[Any], dict[str, Any]], kind: str) -> Response:
        """One request: its body read within the limits, ``fn`` run exclusively, errors as JSON."""
        try:
            body = json.loads(await read_body(request, lim.max_body_bytes, lim.body_timeout_s))
            out = await exclusive(request, fn, body)
            if fn is _chat and isinstance(body, dict) and body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return StreamingResponse(iter(stream_events(out, usage)), media_type="text/event-stream")
            return JSONResponse(out)
        except BodyError as e:
            return _error(str(e), "invalid_request", e.status)
        except _Refused as e:
            return _error(str(e), "forbidden", 403)
        except _ClientGone:
            return _error("the client disconnected", "cancelled", 499)
        except LookupError as e:
            return _error(str(e), "model_not_found", 404)
        except (ValueError, TypeError, OverflowError, RecursionError, CheckpointError) as e:
            # a malformed JSON body is a ValueError too; deep nesting a RecursionError
            return _error(str(e) if not isinstance(e, RecursionError) else "the JSON body is nested too deeply",
                          kind, 400)

    async def completions(request: Request) -> Response:
        return await answer(request, _complete, "invalid_request")

    async def chat(request: Request) -> Response:
        return await answer(request, _chat, "invalid_request")

    async def reload(request: Request) -> Response:
        return await answer(request, _reload, "reload_failed")

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": model_name, "object": "model"}]})

    return Guard(Starlette(
        routes=[
            Route(COMPLETIONS_PATH, completions, methods=["POST"]),
            Route(CHAT_PATH, chat, methods=["POST"]),
            Route(RELOAD_PATH, reload, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    ), access or Access())


def _error(message: str, kind: str, status: int) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


class CompletionServer:
    """Run :func:`build_app` with uvicorn in a background thread on ``host`` (a free port by default).

    Use as a context manager; ``url`` is the base URL once started. ``app_kwargs`` go to
    :func:`build_app` (``access`` defaults to ``host`` with no token: loopback only).
    """

    def __init__(self, engine: HFEngine, *, host: str = "127.0.0.1", port: int = 0, model_name: str = "agentgym",
                 **app_kwargs: Any) -> None:
        import uvicorn

        if app_kwargs.get("access") is None:
            app_kwargs["access"] = Access(host=host)
        limits = app_kwargs.get("limits") or ModelLimits()
        app = build_app(engine, model_name, **app_kwargs)
        config = uvicorn_config(app, header_timeout_s=limits.header_timeout_s, max_ws_bytes=1 << 20,
                                log_level="warning", host=host, port=port)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="agentgym-completions", daemon=True)
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> CompletionServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServiceError(f"completions server did not start on {self.host}:{self.port} within {timeout}s")
            time.sleep(0.02)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def __enter__(self) -> CompletionServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run(model: str, *, host: str = "127.0.0.1", port: int = 8000, device: str | None = None,
        model_name: str = "agentgym", tokenizer: str | None = None, reasoning_effort: str = "low",
        max_tokens: int = 2048, threads: int = 1, access: Access | None = None,
        weights_dirs: Sequence[str | Path] = (), limits: ModelLimits | None = None) -> None:
    """``agentgym serve model``: load ``model`` (a checkpoint directory, hub id or ``tiny``) and serve it; blocks.

    The port is bound first: a busy port is a ConfigError before the model loads. ``tokenizer``:
    for chat (``byte`` = agentgym's ByteTokenizer; default: ``byte`` for tiny models, else the
    model's own directory). ``threads``: torch intra-op threads. ``access``, ``weights_dirs``,
    ``limits``: as :func:`build_app`.
    """
    import uvicorn

    from agentgym.trainer.model.gptoss import load_policy

    limits = limits or ModelLimits()
    _weights_dirs(weights_dirs)  # a mistyped directory fails before the model loads, too
    sock = listen(host, port, what="agentgym serve model")
    try:
        torch.set_num_threads(max(1, threads))
        policy = load_policy(model, device=device or ("cuda" if torch.cuda.is_available() else "cpu"))
        engine = HFEngine(policy, share=True)
        tok = tokenizer or ("byte" if model.startswith("tiny") else model)
        app = build_app(engine, model_name, tokenizer=None if tok == "byte" else tok,
                        reasoning_effort=reasoning_effort, max_tokens=max_tokens,
                        access=access or Access(host=host), weights_dirs=weights_dirs, limits=limits)
        config = uvicorn_config(app, header_timeout_s=limits.header_timeout_s, max_ws_bytes=1 << 20,
                                log_level="info")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
