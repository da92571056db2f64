"""``agentgym validate``: passes on every registered environment, and fails, naming the task, on
environments broken in each of the ways it checks for."""

from __future__ import annotations

import random
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym
from agentgym.env import Task, ToolEnv
from agentgym.leaderboards.cli import validate_main
from agentgym.leaderboards.validate import VARIANTS, validate_env
from agentgym.tools import Tool, ToolResult

NEEDS_DOCKER = {"agentgym/CodeFix-v1", "agentgym/MathTool-v1"}


@pytest.mark.parametrize("env_id", [
    pytest.param(i, marks=[pytest.mark.docker] if i in NEEDS_DOCKER else []) for i in agentgym.registered_ids()
    if not i.endswith(("Remote-v0",))  # a client of another env: validated through the env it serves
])
def test_every_registered_env_passes(env_id: str, request: pytest.FixtureRequest) -> None:
    if env_id in NEEDS_DOCKER:
        request.getfixturevalue("docker_ready")
    for kwargs in VARIANTS.get(env_id, [{}]):
        report = validate_env(env_id, kwargs, max_tasks=4 if env_id in NEEDS_DOCKER else 12, workers=2)
        assert report.ok, report.format()


# ------------------------------------------------------------------ broken environments

class _Add(ToolEnv):
    """Six tasks "What is i+1?"; answer in the final channel."""

    instructions = "Answer with the number only."
    tasks = list(range(6))

    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        i = int(options["index"]) if "index" in options else int(rng.integers(6))
        return Task(id=f"add-{i}", prompt=f"What is {i}+1?", answer=str(i + 1))

    def score_final(self, answer: str) -> ToolResult:
        assert self.task is not None
        return ToolResult("", terminal=True, outcome=1.0 if answer.strip() == self.task.answer else 0.0)


def _answer(env: Any) -> np.ndarray:
    u = env.unwrapped
    return np.asarray(u.codec.final_ids(u.task.answer), dtype=np.int64)


class Generous(_Add):
    """Pays for any answer that says it is done."""

    def score_final(self, answer: str) -> ToolResult:
        ok = answer.strip() in (self.task.answer, "Done.")  # type: ignore[union-attr]
        return ToolResult("", terminal=True, outcome=1.0 if ok else 0.0)


class Unsolvable(_Add):
    """Task 3 cannot be solved, not even by the oracle."""

    def score_final(self, answer: str) -> ToolResult:
        if self.task is not None and self.task.id == "add-3":
            return ToolResult("", terminal=True, outcome=0.0)
        return super().score_final(answer)


class Leaky(_Add):
    """A ``recall`` tool shows answers given in *earlier episodes* of this env instance."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.memo: list[str] = []

    def tools(self) -> list[Tool]:
        return [Tool("recall", "Earlier answers.", {"type": "object", "properties": {}},
                     lambda: ToolResult(", ".join(self.memo) or "nothing yet"))]

    def score_final(self, answer: str) -> ToolResult:
        self.memo.append(answer)
        return super().score_final(answer)


def _recall_then_answer(env: Any) -> np.ndarray:
    u = env.unwrapped
    if not u.trajectory.turns:
        return np.asarray(u.codec.tool_call_ids("recall", {}), dtype=np.int64)
    return _answer(env)


class Unseeded(_Add):
    """Draws its task from the global ``random`` module instead of the seeded generator."""

    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        t = super().sample_task(rng, options)
        t.prompt += f" (ticket {random.randint(0, 10**6)})"
        return t


def _register(cls: type) -> str:
    env_id = f"agentgymtest/{cls.__name__}-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=cls)  # type: ignore[arg-type]  # a class is a valid creator
    return env_id


def test_a_sound_env_passes() -> None:
    report = validate_env(_register(_Add), oracle=_answer, workers=2)
    assert report.ok, report.format()
    assert report.tasks == 6 and len(report.checks) == 6


@pytest.mark.parametrize("cls, oracle, failing, needle", [
    (Generous, _answer, "just-answer scores 0", "expected 0, got otherwise on 6 of 6 tasks: task add-0 (index=0)"),
    (Unsolvable, _answer, "oracle scores 1", "expected 1, got otherwise on 1 of 6 tasks: task add-3 (index=3) seed 3: 0"),
    (Leaky, _recall_then_answer, "no shared state", "differs from a fresh env"),
    (Unseeded, _answer, "same seed, same tokens", "on two fresh envs"),
])
def test_broken_envs_fail_the_check_that_targets_them(cls: type, oracle: Any, failing: str, needle: str) -> None:
    report = validate_env(_register(cls), oracle=oracle, workers=2)
    assert not report.ok
    bad = {c.name: c.detail for c in report.checks if not c.ok}
    assert failing in bad, report.format()
    assert needle in bad[failing], report.format()
    assert "FAIL" in report.format()


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert validate_main(["agentgym/Math-v1", "--max-tasks", "6", "--workers", "1"]) == 0
    assert "agentgym/Math-v1(): PASS on 6 tasks" in capsys.readouterr().out
    assert validate_main(["agentgym/Mathh-v0"]) == 2
    assert "Math" in capsys.readouterr().err
