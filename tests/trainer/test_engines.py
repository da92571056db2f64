"""Rollout engines: hf sampling vs policy_forward, and openai-http over real HTTP with weight sync."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch

from agentgym.errors import ConfigError, ServiceError
from agentgym.harmony import HarmonyCodec
from agentgym.serving.model_server import CompletionServer
from agentgym.tokenizers import ByteTokenizer
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.model.logprobs import policy_forward
from agentgym.trainer.rollout.engines import make_engine
from agentgym.trainer.rollout.engines.base import Engine, Sample
from agentgym.trainer.rollout.engines.hf import HFEngine
from agentgym.trainer.rollout.engines.openai_http import OpenAIHTTPEngine

TOK = ByteTokenizer()
STOPS = list(HarmonyCodec(TOK).stop_ids)
PROMPTS = [TOK.encode("What is 2+3?"), TOK.encode("hi"), TOK.encode("x" * 70)]  # 70 > sliding window


@pytest.fixture(scope="module")
def policy() -> torch.nn.Module:
    return build_tiny_gptoss(TOK.vocab_size, seed=0)


def _max_mismatch(model: torch.nn.Module, prompts: list[list[int]], samples: list[Sample], temperature: float) -> float:
    worst = 0.0
    for p, s in zip(prompts, samples):
        with torch.no_grad():
            lp = policy_forward(model, torch.tensor([p + s.tokens]), temperature=temperature).logprobs[0, len(p):]
        worst = max(worst, (lp - torch.tensor(s.logprobs)).abs().max().item())
    return worst


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_hf_logprobs_match_policy_forward(policy: torch.nn.Module, temperature: float) -> None:
    eng = make_engine("hf", model=policy)
    assert isinstance(eng, Engine)
    samples = eng.generate(PROMPTS, max_new_tokens=12, temperature=temperature, stop_ids=[], seed=0)
    assert [len(s.tokens) for s in samples] == [12, 12, 12]
    assert all(s.finish_reason == "length" and len(s.logprobs) == 12 for s in samples)
    assert _max_mismatch(policy, PROMPTS, samples, temperature or 1.0) < 1e-5


def test_hf_greedy_is_argmax_and_batch_independent(policy: torch.nn.Module) -> None:
    eng = HFEngine(policy)
    batch = eng.generate(PROMPTS, max_new_tokens=10, temperature=0.0, stop_ids=[])
    alone = eng.generate(PROMPTS[1:2], max_new_tokens=10, temperature=0.0, stop_ids=[])
    assert batch[1].tokens == alone[0].tokens
    with torch.no_grad():
        logits = policy(torch.tensor([PROMPTS[1]])).logits[0, -1]
    assert batch[1].tokens[0] == int(logits.argmax())


def test_hf_stops_at_stop_ids_and_respects_max_new_tokens(policy: torch.nn.Module) -> None:
    eng = HFEngine(policy)
    free = eng.generate(PROMPTS[:1], max_new_tokens=30, temperature=0.0, stop_ids=[])[0]
    stop = free.tokens[4]
    first = free.tokens.index(stop)
    s = eng.generate(PROMPTS[:1], max_new_tokens=30, temperature=0.0, stop_ids=[stop, *STOPS])[0]
    assert s.finish_reason == "stop" and s.tokens == free.tokens[: first + 1]
    assert s.logprobs == free.logprobs[: first + 1]
    short = eng.generate(PROMPTS, max_new_tokens=3, temperature=1.0, stop_ids=STOPS, seed=1)
    assert all(len(x.tokens) <= 3 for x in short)


def test_hf_seeded_sampling_is_reproducible(policy: torch.nn.Module) -> None:
    eng = HFEngine(policy)
    a = eng.generate(PROMPTS, max_new_tokens=12, temperature=1.0, stop_ids=[], seed=7)
    b = eng.generate(PROMPTS, max_new_tokens=12, temperature=1.0, stop_ids=[], seed=7)
    c = eng.generate(PROMPTS, max_new_tokens=12, temperature=1.0, stop_ids=[], seed=8)
    assert [x.tokens for x in a] == [x.tokens for x in b] != [x.tokens for x in c]


def test_hf_sync_weights_copies_into_a_private_model(policy: torch.nn.Module) -> None:
    other = build_tiny_gptoss(TOK.vocab_size, seed=1)
    eng = HFEngine(other, share=False)
    before = eng.generate(PROMPTS, max_new_tokens=8, temperature=1.0, stop_ids=[], seed=0)
    assert _max_mismatch(policy, PROMPTS, before, 1.0) > 1e-3
    eng.sync_weights(policy)
    after = eng.generate(PROMPTS, max_new_tokens=8, temperature=1.0, stop_ids=[], seed=0)
    assert _max_mismatch(policy, PROMPTS, after, 1.0) < 1e-5
    eng.close()
    with pytest.raises(ConfigError):
        eng.generate(PROMPTS, max_new_tokens=1, temperature=1.0, stop_ids=[])


def test_make_engine_unknown_name_suggests() -> None:
    with pytest.raises(ConfigError, match="openai-http"):
        make_engine("openai_http")


def test_openai_http_end_to_end_with_weight_sync(policy: torch.nn.Module, tmp_path: Path) -> None:
    """Real uvicorn server on 127.0.0.1 serving *different* weights until the trainer syncs."""
    served = HFEngine(build_tiny_gptoss(TOK.vocab_size, seed=1), share=False)
    with CompletionServer(served, weights_dirs=[tmp_path]) as server:
        eng = make_engine("openai-http", base_url=server.url, checkpoint_dir=tmp_path / "sync")
        try:
            before = eng.generate(PROMPTS, max_new_tokens=16, temperature=1.0, stop_ids=STOPS, seed=3)
            assert len(before) == 3 and all(len(s.tokens) == len(s.logprobs) > 0 for s in before)
            assert _max_mismatch(policy, PROMPTS, before, 1.0) > 1e-3
            eng.sync_weights(policy)
            assert list((tmp_path / "sync").glob("v*/model.safetensors"))
            after = eng.generate(PROMPTS, max_new_tokens=16, temperature=0.8, stop_ids=STOPS, seed=3)
            assert _max_mismatch(policy, PROMPTS, after, 0.8) < 1e-5
            for s in after:
                assert s.finish_reason in ("stop", "length")
                assert (s.finish_reason == "stop") == (s.tokens[-1] in STOPS)
            # a seeded batch of identical prompts (a GRPO group) must not give identical samples
            group = eng.generate([PROMPTS[1]] * 3, max_new_tokens=8, temperature=1.0, stop_ids=[], seed=5)
            assert len({tuple(s.tokens) for s in group}) > 1
            unseeded = eng.generate(PROMPTS[:2], max_new_tokens=4, temperature=1.0, stop_ids=[])
            assert _max_mismatch(policy, PROMPTS[:2], unseeded, 1.0) < 1e-5
            r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "text", "max_tokens": 2})
            assert r.status_code == 400 and "token ids" in r.text
            assert r.json()["error"]["type"] == "invalid_request"
            r = httpx.post(f"{server.url}/reload_weights", json={"path": str(tmp_path / "nope")})
            assert r.status_code == 400 and r.json()["error"]["type"] == "reload_failed"
        finally:
            eng.close()


def test_openai_http_parses_vllm_style_token_strings() -> None:
    seen: dict[str, object] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.update(body)
        choices = [{"index": 1, "finish_reason": "length",
                    "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [-0.5]}},
                   {"index": 0, "finish_reason": "stop",
                    "logprobs": {"tokens": ["token_id:7", "token_id:262"], "token_logprobs": [-1.0, -2.0]}}]
        return httpx.Response(200, json={"choices": choices})

    eng = OpenAIHTTPEngine("http://vllm.test", transport=httpx.MockTransport(handler))
    out = eng.generate([[1, 2], [3]], max_new_tokens=4, temperature=0.5, stop_ids=[262])
    assert [s.tokens for s in out] == [[7, 262], [5]] and out[0].finish_reason == "stop"
    assert seen["prompt"] == [[1, 2], [3]] and seen["top_p"] == 1.0 and seen["logprobs"] == 0
    assert seen["stop_token_ids"] == [262] and seen["return_tokens_as_token_ids"] is True
    eng.close()


def test_openai_http_errors_are_service_errors() -> None:
    def bad(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("completions"):
            return httpx.Response(200, json={"choices": [{"logprobs": {"tokens": ["hello"], "token_logprobs": [0.0]}}]})
        return httpx.Response(500, text="boom")

    eng = OpenAIHTTPEngine("http://x.test", transport=httpx.MockTransport(bad))
    with pytest.raises(ServiceError, match="token_id"):
        eng.generate([[1]], max_new_tokens=1, temperature=1.0, stop_ids=[])
    with pytest.raises(ServiceError, match="500"):
        eng.sync_weights(torch.nn.Linear(2, 2))
    eng.close()
    with pytest.raises(ConfigError):
        OpenAIHTTPEngine("localhost:8000")


def test_vllm_engine_missing_dependency_has_install_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    build_tiny_gptoss(TOK.vocab_size, seed=0, num_hidden_layers=1).save_pretrained(tmp_path)
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if vLLM were not installed
    with pytest.raises(ConfigError, match=r"agentgym-suite\[vllm-cpu\]"):
        make_engine("vllm", model=str(tmp_path))
    with pytest.raises(ConfigError, match="config.json"):
        make_engine("vllm", model=str(tmp_path / "missing"))


def test_openai_http_vllm_reload_protocol() -> None:
    """``reload="vllm"``: /collective_rpc agentgym_reload with the folder, then /reset_prefix_cache."""
    calls: list[tuple[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        calls.append((request.url.path, body))
        if request.url.path == "/collective_rpc":
            return httpx.Response(200, json={"results": [{"copied": ["w"], "missing": []}]})
        return httpx.Response(200)

    eng = OpenAIHTTPEngine("http://vllm.test", reload="vllm", transport=httpx.MockTransport(handler))
    eng.sync_weights(torch.nn.Linear(2, 2))
    assert [c[0] for c in calls] == ["/collective_rpc", "/reset_prefix_cache"]
    assert calls[0][1]["method"] == "agentgym_reload" and Path(calls[0][1]["args"][0]).name == "v000001"
    eng.close()
    with pytest.raises(ConfigError, match="reload must be one of"):
        OpenAIHTTPEngine("http://vllm.test", reload="nope")


@pytest.mark.slow
def test_server_runs_as_a_process(policy: torch.nn.Module, tmp_path: Path) -> None:
    """``agentgym serve model``: the way a separate serving box runs it."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentgym.cli", "serve", "model", "--model", "tiny", "--port", str(port),
         "--device", "cpu", "--weights-dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "server died"
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        eng = OpenAIHTTPEngine(url, checkpoint_dir=tmp_path)
        eng.sync_weights(policy)
        out = eng.generate(PROMPTS[:2], max_new_tokens=6, temperature=1.0, stop_ids=STOPS)
        assert _max_mismatch(policy, PROMPTS[:2], out, 1.0) < 1e-5
        eng.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
