"""``agentgym serve model`` lets in only who it should, loads weights only from where it was told,
and checks every request before the engine sees it.

Everything binds loopback: 127.0.0.1, or 127.0.0.2 where a server must act as if bound elsewhere
(a token is required there).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="agentgym serve model needs the [train] extra")
httpx = pytest.importorskip("httpx")

from agentgym.serving import env_wire  # noqa: E402
from agentgym.serving.guard import Access  # noqa: E402
from agentgym.serving.model_server import CompletionServer, ModelLimits  # noqa: E402
from agentgym.tokenizers import ByteTokenizer  # noqa: E402
from agentgym.trainer.model.gptoss import build_tiny_gptoss  # noqa: E402
from agentgym.trainer.rollout.engines import model_wire  # noqa: E402
from agentgym.trainer.rollout.engines.hf import HFEngine  # noqa: E402
from agentgym.trainer.rollout.engines.openai_http import OpenAIHTTPEngine, write_checkpoint  # noqa: E402

TOK = ByteTokenizer()
TOKEN = "t0ken-for-the-tests-0123456789"
PROMPT = TOK.encode("What is 2+3?")


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return build_tiny_gptoss(TOK.vocab_size, seed=0)


@pytest.fixture(scope="module")
def server(model: torch.nn.Module) -> Iterator[CompletionServer]:
    with CompletionServer(HFEngine(model), limits=ModelLimits(max_prompt_tokens=512, max_tokens=2048)) as s:
        yield s


def complete(url: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, **body}, timeout=60)


def test_the_clients_read_the_same_token_variable() -> None:
    assert model_wire.TOKEN_ENV == env_wire.TOKEN_ENV == "AGENTGYM_SERVE_TOKEN"


def test_off_loopback_every_route_needs_the_token(model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    access = Access("127.0.0.2", token=TOKEN)
    with CompletionServer(HFEngine(model), host="127.0.0.2", access=access) as s:
        for path in ("/health", "/v1/models"):
            assert httpx.get(s.url + path, timeout=30).status_code == 401
            assert httpx.get(s.url + path, headers={"authorization": "Bearer " + "x" * 30}, timeout=30).status_code == 401
            assert httpx.get(s.url + path, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30).status_code == 200
        r = complete(s.url)
        assert r.status_code == 401 and env_wire.TOKEN_ENV in r.json()["error"]["message"]
        assert httpx.post(f"{s.url}/reload_weights", json={"path": "/etc"}, timeout=30).status_code == 401
        monkeypatch.setenv(model_wire.TOKEN_ENV, TOKEN)  # the openai-http engine sends it
        eng = OpenAIHTTPEngine(s.url)
        try:
            assert len(eng.generate([PROMPT], max_new_tokens=3, temperature=1.0, stop_ids=[])[0].tokens) == 3
        finally:
            eng.close()


def test_cross_site_requests_are_refused(server: CompletionServer) -> None:
    # The attack: a web page's "simple" POST (text/plain) swapping the served weights.
    r = httpx.post(f"{server.url}/reload_weights", content=b'{"path": "/tmp/x.safetensors"}',
                   headers={"content-type": "text/plain"}, timeout=30)
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": PROMPT},
                   headers={"origin": "https://attacker.example"}, timeout=30)
    assert r.status_code == 403 and "cross-site" in r.json()["error"]["message"]
    r = httpx.get(f"{server.url}/v1/models", headers={"host": "attacker.example:8000"}, timeout=30)
    assert r.status_code == 403 and "--allow-host" in r.json()["error"]["message"]
    assert complete(server.url).status_code == 200  # a program on this machine: let in


def test_reload_loads_only_from_the_named_directories(model: torch.nn.Module, tmp_path: Path) -> None:
    allowed, outside = tmp_path / "sync", tmp_path / "elsewhere"
    ckpt = write_checkpoint(model, outside / "v1")
    (allowed / "v1").mkdir(parents=True)
    (allowed / "v1" / "model.safetensors").symlink_to(next(ckpt.glob("*.safetensors")))
    good = write_checkpoint(model, allowed / "v2")

    def reload(s: CompletionServer, path: Path | str) -> httpx.Response:
        return httpx.post(f"{s.url}/reload_weights", json={"path": str(path)}, timeout=60)

    with CompletionServer(HFEngine(model)) as s:  # no --weights-dir: no reload at all
        r = reload(s, good)
        assert r.status_code == 403 and "--weights-dir" in r.json()["error"]["message"]
    with CompletionServer(HFEngine(model), weights_dirs=[allowed]) as s:
        for path in (ckpt, allowed / ".." / "elsewhere" / "v1", allowed / "v1", "/etc/passwd"):
            r = reload(s, path)
            assert r.status_code == 403 and "outside the directories" in r.json()["error"]["message"], path
        r = reload(s, good)
        assert r.status_code == 200 and r.json()["loaded_tensors"] > 0


@pytest.mark.parametrize(("body", "words"), [
    ({"prompt": [10**6]}, "token ids must be integers in [0, "),
    ({"prompt": [-1]}, "token ids must be integers"),
    ({"prompt": [1.5]}, "token ids must be integers"),
    ({"prompt": [1] * 513}, "1 to 512 tokens"),
    ({"prompt": [[1]] * 65}, "1 to 64 prompts"),
    ({"max_tokens": 10**9}, "max_tokens must be an integer in [1, 2048]"),
    ({"max_tokens": 0}, "max_tokens must be an integer"),
    ({"temperature": "nan"}, "temperature must be a number"),
    ({"temperature": 1e300}, "temperature must be a number"),
    ({"temperature": -1}, "temperature must be a number"),
    ({"seed": -1}, "seed must be null or an integer"),
    ({"seed": 2**64}, "seed must be null or an integer"),
    ({"stop_token_ids": [10**6]}, "stop_token_ids"),
    ({"n": 10**400}, ""),
])
def test_requests_over_the_limits_are_a_400_with_a_reason(server: CompletionServer, body: dict, words: str) -> None:
    r = complete(server.url, **body)
    assert r.status_code == 400 and words in r.json()["error"]["message"], r.text


def test_nan_and_deep_json_and_huge_bodies_are_refused(server: CompletionServer) -> None:
    headers = {"content-type": "application/json"}
    nan = json.dumps({"prompt": PROMPT, "temperature": float("nan")})  # Python writes NaN; JSON has none
    r = httpx.post(f"{server.url}/v1/completions", content=nan, headers=headers, timeout=30)
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
    deep = "[" * 100_000 + "]" * 100_000
    r = httpx.post(f"{server.url}/v1/completions", content=deep, headers=headers, timeout=30)
    assert r.status_code == 400 and "nested too deeply" in r.json()["error"]["message"]
    big = b'{"prompt": [' + b"1," * (3 << 20) + b"1]}"
    r = httpx.post(f"{server.url}/v1/completions", content=big, headers=headers, timeout=60)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{server.url}/v1/chat/completions", json={**chat, "max_tokens": 10**6}, timeout=30)
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]
    r = httpx.post(f"{server.url}/v1/chat/completions", json={**chat, "messages": [
        {"role": "user", "content": "x" * 600}]}, timeout=30)
    assert r.status_code == 400 and "1 to 512 tokens" in r.json()["error"]["message"]
    assert complete(server.url).status_code == 200


def _send_then_hang_up(url: str, body: dict[str, Any], after_s: float) -> None:
    """POST ``body`` on a raw connection and close it ``after_s`` later, without reading the reply."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
        time.sleep(after_s)


def test_a_request_whose_client_left_does_not_hold_the_engine(model: torch.nn.Module) -> None:
    """A long generation stops once its client hangs up; a queued request whose client left never runs."""
    calls: list[int] = []  # the sequence length of every forward pass (prefill: the prompt's length)
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: calls.append(kw["input_ids"].shape[1]),
                                           with_kwargs=True)
    try:
        with CompletionServer(HFEngine(model), limits=ModelLimits(max_tokens=4096)) as s:
            long = {"prompt": PROMPT, "max_tokens": 4096, "stop_token_ids": [], "temperature": 1.0}
            queued = {"prompt": [7] * 37, "max_tokens": 4, "stop_token_ids": []}  # 37: its prefill is recognisable
            first = threading.Thread(target=_send_then_hang_up, args=(s.url, long, 3.0))
            first.start()
            deadline = time.monotonic() + 60
            while len(calls) < 5 and time.monotonic() < deadline:  # the long generation is running
                time.sleep(0.05)
            _send_then_hang_up(s.url, queued, 0.5)  # waits behind it, then its client leaves
            first.join()
            r = complete(s.url, max_tokens=4, stop_token_ids=[])  # answered once the engine is free
            assert r.status_code == 200
    finally:
        hook.remove()
    assert 37 not in calls  # the queued request never reached the engine
    assert len(calls) < 4096, len(calls)  # the long one stopped when its client left


def test_a_busy_port_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        # A model path that does not exist: were it loaded first, that would be the error.
        p = subprocess.run([sys.executable, "-m", "agentgym.cli", "serve", "model", "--model",
                            str(tmp_path / "no-such-model"), "--port", str(port)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port} on 127.0.0.1 is in use" in lines[0] and "--port" in lines[0]
