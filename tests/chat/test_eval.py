"""``agentgym-eval --policy openai-chat``: a chat model served on loopback produces a submission
that the replay verifier accepts."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("torch", reason="the server needs the [train] extra")

from agentgym.leaderboards.cli import eval_main  # noqa: E402
from agentgym.leaderboards.suite import load_suite, suite_hash  # noqa: E402
from agentgym.leaderboards.verify import verify_submission  # noqa: E402
from agentgym.serving.model_server import CompletionServer  # noqa: E402
from agentgym.trainer.rollout.engines.hf import HFEngine  # noqa: E402


def _suite(tmp_path: Path) -> Path:
    content: dict[str, Any] = {
        "name": "chat-e2e", "trials": 2, "seed": 0, "sampling": {"temperature": 0.0},
        "envs": [{"id": "agentgym/MathCalc-v1", "kwargs": {"reward_mode": "shaped", "max_turns": 2},
                  "tasks": [{}]},
                 {"id": "agentgym/Math-v1", "kwargs": {"reward_mode": "sparse", "max_turns": 2},
                  "tasks": [{}]}]}
    content["version"] = suite_hash(content)
    path = tmp_path / "chat-e2e.yaml"
    path.write_text(yaml.safe_dump(content))
    return path


def test_agentgym_eval_with_openai_chat_writes_a_verifying_submission(tmp_path: Path, memorized) -> None:
    model, _ = memorized
    out, suite = tmp_path / "sub.jsonl.gz", _suite(tmp_path)
    with CompletionServer(HFEngine(model)) as server:
        rc = eval_main(["--suite", str(suite), "--policy", "openai-chat",
                        "--policy-arg", f"base_url={server.url}/v1", "--policy-arg", "model=agentgym",
                        "--policy-arg", "max_tokens=48", "--policy-arg", "token_ids=true",
                        "--policy-arg", "reasoning_effort=env", "--out", str(out), "--workers", "2",
                        "--no-progress"])
    assert rc == 0 and out.exists()
    report = verify_submission(out, suite=load_suite(suite), workers=1)  # replays every episode
    assert report.ok, report.format()
    with gzip.open(out, "rt") as f:
        lines = [json.loads(line) for line in f]
    sub = lines[0]["submission"]
    assert sub["policy"] == "openai-chat" and sub["describe"]["engine"] == "openai-chat"
    assert sub["describe"]["temperature"] == 0.0 and sub["describe"]["api_key_set"] is False
    episodes = [x for x in lines if x.get("kind") == "episode"]
    assert len(episodes) == 4 and all(x["trajectory"]["turns"] for x in episodes)
