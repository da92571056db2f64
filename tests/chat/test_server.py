"""agentgym's chat-completions endpoint over real HTTP on loopback, and the policy's transport."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

torch = pytest.importorskip("torch", reason="the server needs the [train] extra")

from agentgym.chat.messages import tool_specs  # noqa: E402
from agentgym.chat.policy import OpenAIChatPolicy  # noqa: E402
from agentgym.errors import ConfigError, ServiceError  # noqa: E402
from agentgym.harmony import HarmonyCodec, Message  # noqa: E402
from agentgym.serving.chat_server import render_conversation  # noqa: E402
from agentgym.serving.model_server import CompletionServer, build_app  # noqa: E402
from agentgym.tokenizers import ByteTokenizer  # noqa: E402
from agentgym.trainer.model.gptoss import build_tiny_gptoss  # noqa: E402
from agentgym.trainer.model.logprobs import policy_forward  # noqa: E402
from agentgym.trainer.rollout.engines.hf import HFEngine  # noqa: E402

CODEC = HarmonyCodec(ByteTokenizer())
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluates arithmetic.",
                                           "parameters": {"type": "object", "properties": {
                                               "expression": {"type": "string"}}, "required": ["expression"]}}},
         {"type": "function", "function": {"name": "clock", "description": "The time.", "parameters": {}}}]
CONVO = [{"role": "system", "content": "Use the calculator."}, {"role": "user", "content": "What is 2+3?"}]


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.set_num_threads(1)
    return build_tiny_gptoss(CODEC.tok.vocab_size, seed=0, num_hidden_layers=2).eval()


@pytest.fixture(scope="module")
def server(model: torch.nn.Module) -> Iterator[CompletionServer]:
    with CompletionServer(HFEngine(model), max_tokens=24) as s:
        yield s


def post(server: CompletionServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)


def test_chat_completion_renders_samples_and_reports_token_ids(server: CompletionServer, model) -> None:
    body = {"model": "agentgym", "messages": CONVO, "tools": TOOLS, "temperature": 1.0, "seed": 3,
            "max_tokens": 16, "logprobs": True, "return_token_ids": True}
    r = post(server, body)
    assert r.status_code == 200, r.text
    out = r.json()
    prompt = render_conversation(CODEC, CONVO, tool_specs(TOOLS), "low")
    assert out["prompt_token_ids"] == prompt and out["object"] == "chat.completion"
    ch = out["choices"][0]
    assert ch["message"]["role"] == "assistant" and ch["finish_reason"] in ("stop", "length", "tool_calls")
    ids, lps = ch["token_ids"], [e["logprob"] for e in ch["logprobs"]["content"]]
    assert len(ids) == len(lps) == out["usage"]["completion_tokens"] <= 16
    # the reported log-probs are the trainer's for the same tokens
    with torch.no_grad():
        ref = policy_forward(model, torch.tensor([prompt + ids])).logprobs[0, len(prompt):]
    assert (ref - torch.tensor(lps)).abs().max().item() < 1e-5
    assert post(server, body).json()["choices"][0]["token_ids"] == ids  # seeded: reproducible


def test_a_streamed_request_gets_the_same_completion_as_server_sent_events(server: CompletionServer) -> None:
    """``stream: true`` (what agent loops such as verifiers' chat program send) is served whole:
    the openai SDK's stream reads one chunk carrying the same message, then the usage."""
    openai = pytest.importorskip("openai")
    body = {"model": "agentgym", "messages": CONVO, "tools": TOOLS, "temperature": 1.0, "seed": 5, "max_tokens": 12}
    whole = post(server, body).json()["choices"][0]
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    chunks = list(client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True}))
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert len(deltas) == 1 and deltas[0].finish_reason == whole["finish_reason"]
    assert deltas[0].delta.content == whole["message"]["content"]
    calls = [c.function.model_dump() for c in deltas[0].delta.tool_calls or []]
    assert calls == [c["function"] for c in whole["message"].get("tool_calls", [])]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    raw = httpx.post(f"{server.url}/v1/chat/completions", json={**body, "stream": True}, timeout=60)
    assert raw.headers["content-type"].startswith("text/event-stream") and raw.text.endswith("data: [DONE]\n\n")

def test_named_tool_choice_forces_the_call_header(server: CompletionServer) -> None:
    r = post(server, {"model": "agentgym", "messages": CONVO, "tools": TOOLS, "return_token_ids": True,
                      "logprobs": True, "tool_choice": {"type": "function", "function": {"name": "clock"}}})
    ch = r.json()["choices"][0]
    assert ch["finish_reason"] == "tool_calls" and ch["message"]["tool_calls"][0]["function"]["name"] == "clock"
    assert ch["message"]["tool_calls"][0]["id"].startswith("call_")
    forced = CODEC.render(Message("assistant", "", channel="commentary", recipient="functions.clock",
                                  constrain="json", end="<|call|>"))[len(CODEC.generation_prompt):-1]
    assert ch["token_ids"][:len(forced)] == forced  # the call header, then what the model wrote
    assert len(ch["logprobs"]["content"]) < len(ch["token_ids"])  # forced tokens were not sampled
    r = post(server, {"model": "agentgym", "messages": CONVO, "tools": TOOLS, "tool_choice": "none",
                      "return_token_ids": True})
    ch = r.json()["choices"][0]
    assert CODEC.parse(ch["token_ids"]).messages[0].channel == "final"
    assert "tool_calls" not in ch["message"]
    single = post(server, {"model": "agentgym", "messages": CONVO, "tools": TOOLS[:1], "tool_choice": "required"})
    assert single.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "calculator"


@pytest.mark.parametrize("patch, status, words", [
    ({"top_p": 0.9}, 400, "top_p"),
    ({"messages": []}, 400, "non-empty"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
    ({"messages": [{"role": "tool", "tool_call_id": "q", "content": "x"}]}, 400, "tool_call_id"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, 400, "nope"),
    ({"tool_choice": "required"}, 400, "exactly one tool"),
    ({"reasoning_effort": "max"}, 400, "reasoning_effort"),
    ({"max_tokens": 0}, 400, "max_tokens"),
    ({"tools": [{"type": "function"}]}, 400, "tools[0]"),
    ({"model": "gpt-4o"}, 404, "agentgym"),
])
def test_bad_requests_get_clear_errors(server: CompletionServer, patch: dict, status: int, words: str) -> None:
    r = post(server, {"model": "agentgym", "messages": CONVO, "tools": TOOLS, **patch})
    assert r.status_code == status and words in r.json()["error"]["message"]


def test_malformed_json_body_is_a_400(server: CompletionServer) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json", timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400


def test_server_refuses_a_tokenizer_larger_than_the_model() -> None:
    small = build_tiny_gptoss(200, seed=0, num_hidden_layers=1)
    with pytest.raises(ConfigError, match="vocabulary"):
        build_app(HFEngine(small))


# ---------------------------------------------------------------------------- the policy's transport
class _Flaky:
    """ASGI middleware on the real app: answers the first chat requests with the given HTTP
    errors and counts requests in flight."""

    def __init__(self, app: Any, failures: list[int]) -> None:
        self.app, self.failures = app, list(failures)
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.responses import JSONResponse

        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            with self.lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                status = self.failures.pop(0) if self.failures else None
            try:
                if status is not None:
                    await JSONResponse({"error": {"message": "try again"}}, status_code=status,
                                       headers={"retry-after": "0"})(scope, receive, send)
                    return
                await self.app(scope, receive, send)
            finally:
                with self.lock:
                    self.in_flight -= 1
            return
        await self.app(scope, receive, send)


@pytest.fixture
def flaky(model: torch.nn.Module) -> Iterator[tuple[_Flaky, str]]:
    import uvicorn

    app = _Flaky(build_app(HFEngine(model), max_tokens=8), [])
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    while not srv.started:
        time.sleep(0.02)
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield app, f"http://127.0.0.1:{port}/v1"
    srv.should_exit = True
    th.join(timeout=10)


def test_policy_retries_transient_errors_with_backoff(flaky: tuple[_Flaky, str]) -> None:
    app, url = flaky
    app.failures = [429, 503, 500]
    with OpenAIChatPolicy(base_url=url, model="agentgym", max_retries=3, backoff=0.01, max_tokens=8) as p:
        reply = p.complete(CONVO, TOOLS)
        assert reply.message["role"] == "assistant" and p.stats["retries"] == 3 and p.stats["requests"] == 4
        app.failures = [503, 503]
        p.max_retries = 1
        with pytest.raises(ServiceError, match="failed 2 times; last error: HTTP 503"):
            p.complete(CONVO, TOOLS)
        app.failures = [400]
        with pytest.raises(ServiceError, match="refused the request: HTTP 400"):
            p.complete(CONVO, TOOLS)


def test_policy_reports_an_unreachable_server_and_bad_settings() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    p = OpenAIChatPolicy(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff=0.0)
    with pytest.raises(ServiceError, match="ConnectError.*Is the server up"):
        p.complete(CONVO, [])
    assert p.stats["requests"] == 2
    for bad in ({"base_url": "127.0.0.1:8000"}, {"temperature": "hot"}, {"concurrency": 0},
                {"extra_body": "[1]"}, {"model": ""}):
        with pytest.raises(ConfigError):
            OpenAIChatPolicy(**{"base_url": "http://127.0.0.1:1/v1", "model": "m", **bad})


def test_policy_settings_from_strings_and_the_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGYM_TEST_KEY", "sk-secret")
    p = OpenAIChatPolicy(base_url="http://127.0.0.1:1/v1", model="m", temperature="0", max_tokens="32",
                         seed="7", parallel_tool_calls="none", token_ids="true", tool_choice="calculator",
                         extra_body='{"top_k": -1}', api_key_env="AGENTGYM_TEST_KEY")
    d = p.describe()
    assert d["sampling"] == {"temperature": 0.0, "max_completion_tokens": 32,
                             "tool_choice": {"type": "function", "function": {"name": "calculator"}}}
    assert d["seed"] == 7 and d["token_ids"] is True and d["api_key_set"] is True
    assert "sk-secret" not in repr(d) and p._client.headers["authorization"] == "Bearer sk-secret"


def test_policy_limits_requests_in_flight(flaky: tuple[_Flaky, str]) -> None:
    app, url = flaky
    with OpenAIChatPolicy(base_url=url, model="agentgym", concurrency=2, max_tokens=8) as p:
        threads = [threading.Thread(target=p.complete, args=(CONVO, TOOLS)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert p.stats["requests"] == 6 and 1 <= app.max_in_flight <= 2


@pytest.mark.slow
def test_serve_command_serves_chat() -> None:
    """``agentgym serve model``: the way a serving box runs it, chat included."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agentgym.cli", "serve", "model", "--model", "tiny",
                             "--port", str(port), "--device", "cpu", "--max-tokens", "8"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "server died"
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        with OpenAIChatPolicy(base_url=f"{url}/v1", model="agentgym", token_ids=True, max_tokens=8) as p:
            reply = p.complete(CONVO, TOOLS)
        assert reply.prompt_token_ids == render_conversation(CODEC, CONVO, tool_specs(TOOLS), "low")
        assert reply.token_ids and len(reply.token_ids) <= 8
    finally:
        proc.terminate()
        proc.wait(timeout=30)
