"""A chat model served over HTTP on loopback plays every environment through the chat wrapper.

The server is agentgym's own (``CompletionServer``: uvicorn on 127.0.0.1, the ``hf`` engine
sampling a tiny GPT-OSS); the client is ``OpenAIChatPolicy``. Nothing is mocked: the model is
warm-started on one MathCalc-v1 episode (``memorized`` in conftest) and replays it only if the
server renders the chat conversation into exactly the env's tokens and the tool calls survive
the trip through chat messages.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the server needs the [train] extra")

from agentgym.chat.policy import OpenAIChatPolicy  # noqa: E402
from agentgym.serving.model_server import CompletionServer  # noqa: E402
from agentgym.trainer.model.logprobs import policy_forward  # noqa: E402
from agentgym.trainer.rollout.engines.hf import HFEngine  # noqa: E402
from agentgym.trajectory import Trajectory  # noqa: E402
from tests.chat.conftest import ENV_IDS  # noqa: E402
from tests.chat.test_wrapper import replay  # noqa: E402


@pytest.fixture(scope="module")
def served(memorized: tuple[Any, Trajectory]) -> Iterator[tuple[str, Any, Trajectory]]:
    model, demo = memorized
    with CompletionServer(HFEngine(model)) as server:
        yield f"{server.url}/v1", model, demo


def test_served_chat_model_plays_its_episode_token_for_token(served, make) -> None:
    url, model, demo = served
    results: list[Trajectory] = []
    with OpenAIChatPolicy(base_url=url, model="agentgym", temperature=0, max_tokens=96, token_ids=True,
                          concurrency=2, reasoning_effort="env") as policy:
        # agentgym-eval runs episodes on threads, one env each
        envs = [make("agentgym/MathCalc-v1") for _ in range(3)]
        threads = [threading.Thread(target=lambda e=e: results.append(policy.play(e, seed=0))) for e in envs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert policy.stats == {"episodes": 3, "requests": 6, "retries": 0, "turns": 6,
                                "prompt_exact_turns": 6, "exact_turns": 6}
    assert len(results) == 3
    for traj in results:
        # a tool call, its result, the final answer: exactly the demonstration, and solved
        assert traj.tokens == demo.tokens and traj.policy_mask == demo.policy_mask
        assert [t.tool for t in traj.turns] == ["calculator", None] and traj.total_reward == 1.0
        assert [t.reward for t in traj.turns] == [t.reward for t in demo.turns]
        tokens, rewards = replay(make("agentgym/MathCalc-v1"), traj)
        assert tokens == traj.tokens and rewards == [t.reward for t in traj.turns]
        # the record carries the server's behaviour log-probs: the trainer's for those tokens
        pos = [i for i, m in enumerate(traj.policy_mask) if m]
        with torch.no_grad():
            ref = policy_forward(model, torch.tensor([traj.tokens])).logprobs[0]
        assert max(abs(traj.logprobs[i] - ref[i].item()) for i in pos) < 1e-5  # type: ignore[operator]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_served_chat_model_plays_every_environment(env_id: str, served, make) -> None:
    """In every env the server conditions on exactly the env's token stream at every turn,
    a (forced) tool call goes through, and the episode replays token for token."""
    url, _, _ = served
    env = make(env_id, max_turns=2, reward_mode="shaped")
    env.reset(seed=0)
    tools = [t.name for t in env.unwrapped.episode_tools]
    with OpenAIChatPolicy(base_url=url, model="agentgym", temperature=1.0, seed=0, max_tokens=48,
                          token_ids=True, tool_choice=tools[0] if tools else "auto") as policy:
        traj = policy.play(env, seed=0)
        stats = dict(policy.stats)
    assert stats["turns"] == len(traj.turns) and stats["prompt_exact_turns"] == stats["turns"]
    assert traj.terminated or traj.truncated
    if tools:
        assert traj.turns[0].tool == tools[0]
    tokens, rewards = replay(make(env_id, max_turns=2, reward_mode="shaped"), traj)
    assert tokens == traj.tokens and rewards == [t.reward for t in traj.turns]


def test_episode_records_survive_serialisation(served, make) -> None:
    url, _, demo = served
    with OpenAIChatPolicy(base_url=url, model="agentgym", temperature=0, max_tokens=96, token_ids=True) as p:
        traj = p.play(make("agentgym/MathCalc-v1"), seed=0)
    assert Trajectory.from_json(traj.to_json()) == traj and traj.env_id == "agentgym/MathCalc-v1"
    assert traj.seed == 0 and traj.task_id == demo.task_id


def test_reasoning_effort_env_sends_the_envs_own(memorized, make) -> None:
    """A server whose default effort differs renders another system message unless the policy
    sends the env's (``reasoning_effort="env"``); the prompt check tells them apart."""
    model, demo = memorized
    with CompletionServer(HFEngine(model), reasoning_effort="high") as server:
        for effort, exact in ((None, 0), ("env", 2)):
            with OpenAIChatPolicy(base_url=f"{server.url}/v1", model="agentgym", temperature=0,
                                  max_tokens=96, token_ids=True, reasoning_effort=effort) as p:
                traj = p.play(make("agentgym/MathCalc-v1"), seed=0)
                assert p.stats["prompt_exact_turns"] == exact
    assert traj.tokens == demo.tokens
