"""The LLM judge reward against agentgym's own chat server on loopback (a tiny GPT-OSS taught, with
the trainer's SFT step, to grade one question), through agentgym/ReasoningGym-v0's final answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from agentgym.errors import SubmissionError
from agentgym.judge import Judge, JudgeConfig, JudgeError, parse_score
from agentgym.trajectory import Trajectory
from tests.environments.interop.conftest import require
from tests.memorize import memorize

require("reasoning_gym")
torch = pytest.importorskip("torch", reason="the chat server needs the [train] extra")

RUBRIC = "Question: {question}\nAnswer: {answer}\nReference: {reference}\nGrade it."
RG = "agentgym/ReasoningGym-v0"
KW: dict[str, Any] = {"dataset": "basic_arithmetic", "config": {"size": 40}}


def test_parse_score() -> None:
    assert parse_score("looks right.\nSCORE: 1") == 1.0 and parse_score("SCORE: 0.5") == 0.5
    assert parse_score("score: 1") is None and parse_score("SCORE: 7") is None and parse_score("yes") is None


def _demo(codec: Any, judge: Judge, question: str, answer: str, reference: str, reply: str) -> Trajectory:
    from agentgym.serving.chat_server import render_conversation

    prompt = render_conversation(codec, judge.messages(question=question, answer=answer, reference=reference), [],
                                 "low")
    t = Trajectory(env_id="judge", seed=0, task_id="judge", tokenizer="byte")
    t.append(prompt, policy=False)
    t.prompt_len = len(prompt)
    t.append(codec.final_ids(reply), policy=True)
    return t


@pytest.fixture(scope="module")
def graded() -> Iterator[tuple[str, dict[str, Any]]]:
    """A tiny GPT-OSS served by agentgym's chat server that grades task 0's right answer 1, a wrong one 0."""
    from agentgym.harmony import HarmonyCodec
    from agentgym.serving.model_server import CompletionServer
    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.rollout.engines.hf import HFEngine

    env = gym.make(RG, **KW)
    env.reset(seed=0, options={"index": 0})
    task = env.unwrapped.task
    tok = ByteTokenizer()
    codec = HarmonyCodec(tok)
    cfg = {"base_url": "unused", "model": "agentgym", "rubric": RUBRIC, "max_tokens": 24}
    judge = Judge(JudgeConfig.from_dict(cfg))
    demos = [_demo(codec, judge, task.prompt, task.answer, task.answer, "SCORE: 1"),
             _demo(codec, judge, task.prompt, "12345", task.answer, "SCORE: 0")]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build_tiny_gptoss(tok.vocab_size, seed=0, num_hidden_layers=2)
        memorize(model, demos, pad_id=tok.pad_id)  # both verdicts greedy, not just likely on average
        model.eval()
        with CompletionServer(HFEngine(model)) as server:
            yield f"{server.url}/v1", {**cfg, "base_url": f"{server.url}/v1"}
    finally:
        torch.set_num_threads(threads)
        env.close()


def _answer(env: Any, text: str) -> tuple[float, dict[str, Any]]:
    env.reset(seed=0, options={"index": 0})
    *_, r, _, _, info = env.step(env.unwrapped.codec.final_ids(text))
    return r, info


def test_the_judge_scores_through_the_env_caches_and_records(graded: tuple[str, dict[str, Any]]) -> None:
    _, cfg = graded
    env = gym.make(RG, **KW, judge=cfg)
    u = env.unwrapped
    right = str(u.source[u._split_positions("train")[0]]["answer"])
    r, info = _answer(env, right)
    assert r == 1.0 and "judge: 1" in info["tool_result"]["content"]
    calls = u.trajectory.meta["judge_calls"]
    assert len(calls) == 1 and calls[0]["score"] == 1.0 and calls[0]["reply"].strip().endswith("SCORE: 1")
    assert _answer(env, "12345")[0] == 0.0  # the judge, not the verifier, says 0 here
    asked = u.judge.calls_made
    assert _answer(env, right)[0] == 1.0 and u.judge.calls_made == asked  # cached: not asked again
    env.close()


def test_shaped_role_keeps_the_verifiers_outcome_and_adds_the_judge_term(graded: tuple[str, dict[str, Any]]) -> None:
    _, cfg = graded
    env = gym.make(RG, **KW, reward_mode="shaped", judge={**cfg, "role": "shaped", "weight": 0.5})
    u = env.unwrapped
    right = str(u.source[u._split_positions("train")[0]]["answer"])
    r, info = _answer(env, right)
    assert info["reward_components"]["judge"] == 1.0 and info["reward_components"]["outcome"] == 1.0
    assert r > 1.0
    env.close()


def test_replay_rescores_from_the_record_without_the_endpoint(graded: tuple[str, dict[str, Any]], tmp_path: Path
                                                                ) -> None:
    from agentgym.leaderboards.replay import compare, replay

    _, cfg = graded
    env = gym.make(RG, **KW, judge=cfg)
    u = env.unwrapped
    right = str(u.source[u._split_positions("train")[0]]["answer"])
    _answer(env, right)
    record = Trajectory.from_json(u.trajectory.to_json())
    dead = gym.make(RG, **KW, judge={**cfg, "base_url": "http://127.0.0.1:9/v1"})  # nothing listens there
    truth, problems = replay(dead, record, seed=0, options={"index": 0})
    assert not problems and not compare(record, truth, u.tokenizer) and truth.total_reward == 1.0
    forged = Trajectory.from_json(record.to_json())
    forged.meta["judge_calls"] = []  # a record without the judge's reply cannot be re-scored
    truth, _ = replay(dead, forged, seed=0, options={"index": 0})
    assert truth.meta["infra_error"] and "no judge reply" in truth.meta["infra_error"]
    tampered = Trajectory.from_json(record.to_json())
    tampered.meta["judge_calls"][0]["score"] = 0.5  # a score its own recorded reply does not give
    with pytest.raises(SubmissionError, match="recorded judge call 0: the record's score is 0.5"):
        replay(dead, tampered, seed=0, options={"index": 0})


@pytest.mark.parametrize("where", ["dead endpoint", "unparsable reply"])
def test_judge_failures_are_infrastructure_faults_not_zeros(where: str, tiny_server: tuple[str, Any]) -> None:
    url = "http://127.0.0.1:9/v1" if where == "dead endpoint" else tiny_server[0]  # an untrained model babbles
    env = gym.make(RG, **KW, judge={"base_url": url, "model": "agentgym", "rubric": RUBRIC, "max_tokens": 8})
    env.reset(seed=0)
    _, r, term, trunc, info = env.step(env.unwrapped.codec.final_ids("7"))
    assert trunc and not term and r == 0.0 and info["infra_error"].startswith("judge:")
    with pytest.raises(JudgeError):
        env.unwrapped.judge.score(question="q", answer="a")
    env.close()
