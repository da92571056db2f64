"""The docs' "Evaluating chat models" example (docs/chat.md) runs, against the server it starts."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the server needs the [train] extra")

from agentgym.serving.model_server import CompletionServer  # noqa: E402
from agentgym.trainer.model.gptoss import load_policy  # noqa: E402
from agentgym.trainer.rollout.engines.hf import HFEngine  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "chat.md"


def test_evaluate_a_chat_model_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    section = PAGE.read_text()
    assert "agentgym serve model --model tiny --port 8000" in section
    code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    torch.set_num_threads(1)
    with CompletionServer(HFEngine(load_policy("tiny"))) as server:  # what `serve --model tiny` runs
        exec(compile(code.replace("http://127.0.0.1:8000", server.url), "docs/chat.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "What is 10 * 7 - 6? ['calculator']"
    assert out[1] == "[{'role': 'tool', 'tool_call_id': 'call_1', 'content': '64'}]"
    assert out[2] == "1.0 True 5" and out[3].endswith("<|channel|>final<|message|>64<|return|>")
    reward, stats = out[4].split(" ", 1)
    stats = ast.literal_eval(stats)  # an untrained model: whatever it wrote, the server saw the env's tokens
    assert float(reward) == 0.0  # untrained: noise, read as a wrong final answer (as the page says)
    assert stats["episodes"] == 1 and stats["prompt_exact_turns"] == stats["turns"] >= 1
