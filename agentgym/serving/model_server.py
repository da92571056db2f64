"""agentgym's OpenAI-compatible server, backed by the ``hf`` engine.

Serves token-id completions with processed log-probs (the wire format in
``agentgym.trainer.engines.model_wire``), chat completions with tool calling
(``/v1/chat/completions``: the messages rendered in Harmony exactly as the environments render
them, the sampled action parsed back into an assistant message with ``tool_calls``;
``stream: true`` sends the finished completion as server-sent events;
``agentgym.serving.chat_server``), and a ``/reload_weights`` endpoint that loads a safetensors checkpoint into the served model. So the ``openai-http``
engine, weight sync and the ``openai-chat`` policy are tested end to end over real HTTP
without vLLM.

Run it in a thread (:class:`CompletionServer`, used by tests) or as a process::

    agentgym serve model --model tiny --port 8000
    agentgym serve model --model runs/x/checkpoints/step-20 --tokenizer PATH
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agentgym.chat.chat_wire import CHAT_PATH
from agentgym.errors import CheckpointError, ConfigError, ServiceError
from agentgym.harmony import HarmonyCodec
from agentgym.serving.chat_server import chat_completion, stream_events
from agentgym.tokenizers import Tokenizer, as_tokenizer
from agentgym.trainer.engines.hf import HFEngine
from agentgym.trainer.engines.model_wire import COMPLETIONS_PATH, RELOAD_PATH, completion_response

__all__ = ["CompletionServer", "build_app", "load_safetensors_into", "run"]


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


def build_app(engine: HFEngine, model_name: str = "agentgym", *, tokenizer: Tokenizer | str | None = None,
              reasoning_effort: str = "low", max_tokens: int = 2048) -> Starlette:
    """The Starlette app: completions, chat completions, weight reload, health and model list.

    ``tokenizer`` (default: agentgym's ByteTokenizer) renders and parses chat; its ids must be
    the model's. ``reasoning_effort`` and ``max_tokens`` are the chat defaults (``low`` is what
    the environments' system message says).
    """
    lock = threading.Lock()  # one generation or reload at a time
    codec = HarmonyCodec(as_tokenizer(tokenizer))
    vocab = getattr(engine.model.config, "vocab_size", None)
    if vocab is not None and codec.tok.vocab_size > vocab:
        raise ConfigError(f"tokenizer {codec.tok!r} has {codec.tok.vocab_size} ids but the model's "
                          f"vocabulary has {vocab}: pass the tokenizer the model was trained with")

    class _Locked:  # the engine, one generation at a time (reloads share the lock)
        def generate(self, prompts: list[list[int]], **kw: Any) -> Any:
            with lock:
                return engine.generate(prompts, **kw)

    locked = _Locked()

    def _chat(body: Any) -> dict[str, Any]:
        if isinstance(body, dict) and body.get("model") not in (None, model_name):
            raise LookupError(f"the model {body.get('model')!r} is not served here; this server serves {model_name!r}")
        return chat_completion(locked, codec, body, model_name=model_name,
                               reasoning_effort=reasoning_effort, max_tokens=max_tokens)

    def _complete(body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt = [prompt]
        if not (isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt)):
            raise ValueError("prompt must be a list of token ids or a list of such lists (text is not accepted)")
        if float(body.get("top_p", 1.0)) != 1.0 or int(body.get("top_k", -1)) not in (-1, 0):
            raise ValueError("only top_p=1 and top_k=-1 are served (log-probs must match the trainer)")
        if int(body.get("n", 1)) != 1:
            raise ValueError("n must be 1; repeat the prompt instead")
        with lock:
            samples = engine.generate(
                [[int(t) for t in p] for p in prompt],
                max_new_tokens=int(body.get("max_tokens", 16)),
                temperature=float(body.get("temperature", 1.0)),
                stop_ids=[int(t) for t in body.get("stop_token_ids") or []],
                seed=body.get("seed"),
            )
        return completion_response(model_name, samples)

    def _reload(body: dict[str, Any]) -> dict[str, Any]:
        path = body.get("path") or body.get("model_path")
        if not isinstance(path, str):
            raise ValueError("reload body must be {\"path\": \"<checkpoint dir or .safetensors file>\"}")
        with lock:
            n = load_safetensors_into(engine.model, path)
        return {"ok": True, "loaded_tensors": n, "path": path}

    async def answer(request: Request, fn: Callable[[Any], dict[str, Any]],
                     errors: tuple[type[Exception], ...], kind: str) -> JSONResponse:
        """``fn(body)`` off the event loop as JSON; ``errors`` are the caller's: a 400 of type ``kind``."""
        try:
            return JSONResponse(await run_in_threadpool(fn, await request.json()))
        except errors as e:
            return JSONResponse({"error": {"message": str(e), "type": kind}}, status_code=400)

    async def completions(request: Request) -> JSONResponse:
        return await answer(request, _complete, (ValueError, TypeError), "invalid_request")

    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
            completion = await run_in_threadpool(_chat, body)
            if isinstance(body, dict) and body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return StreamingResponse(iter(stream_events(completion, usage)), media_type="text/event-stream")
            return JSONResponse(completion)
        except LookupError as e:
            return JSONResponse({"error": {"message": str(e), "type": "model_not_found"}}, status_code=404)
        except (ValueError, TypeError) as e:  # a malformed JSON body is a ValueError too
            return JSONResponse({"error": {"message": str(e), "type": "invalid_request"}}, status_code=400)

    async def reload(request: Request) -> JSONResponse:
        return await answer(request, _reload, (ValueError, CheckpointError), "reload_failed")

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": model_name, "object": "model"}]})

    return Starlette(
        routes=[
            Route(COMPLETIONS_PATH, completions, methods=["POST"]),
            Route(CHAT_PATH, chat, methods=["POST"]),
            Route(RELOAD_PATH, reload, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )


class CompletionServer:
    """Run :func:`build_app` with uvicorn in a background thread on ``host`` (a free port by default).

    Use as a context manager; ``url`` is the base URL once started.
    """

    def __init__(self, engine: HFEngine, *, host: str = "127.0.0.1", port: int = 0, model_name: str = "agentgym",
                 **app_kwargs: Any) -> None:
        import uvicorn

        app = build_app(engine, model_name, **app_kwargs)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
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
        max_tokens: int = 2048, threads: int = 1) -> None:
    """``agentgym serve model``: load ``model`` (a checkpoint directory, hub id or ``tiny``) and serve it; blocks.

    ``tokenizer``: for chat (``byte`` = agentgym's ByteTokenizer; default: ``byte`` for tiny
    models, else the model's own directory). ``threads``: torch intra-op threads.
    """
    import uvicorn

    from agentgym.trainer.model import load_policy

    torch.set_num_threads(max(1, threads))
    policy = load_policy(model, device=device or ("cuda" if torch.cuda.is_available() else "cpu"))
    engine = HFEngine(policy, share=True)
    tok = tokenizer or ("byte" if model.startswith("tiny") else model)
    app = build_app(engine, model_name, tokenizer=None if tok == "byte" else tok,
                    reasoning_effort=reasoning_effort, max_tokens=max_tokens)
    uvicorn.run(app, host=host, port=port, log_level="info")
