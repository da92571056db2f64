"""A minimal ToolEnv used by the core tests: echo a word back through a tool."""

from __future__ import annotations

from typing import Any

import numpy as np

from agentgym import Task, Tool, ToolEnv, ToolResult

WORDS = ["apple", "river", "stone", "cloud", "ember", "frost"]


class EchoEnv(ToolEnv):
    default_id = "agentgym/Echo-v0"
    instructions = "Call the echo tool with the word, then give the tool's answer as your final answer."

    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        word = WORDS[int(rng.integers(len(WORDS)))]
        return Task(id=f"echo-{word}", prompt=f"Echo the word: {word}", answer=word.upper())

    def tools(self) -> list[Tool]:
        return [Tool("echo", "Returns the word in upper case.",
                     {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
                     lambda word: word.upper())]

    def score_final(self, answer: str) -> ToolResult:
        assert self.task is not None
        ok = answer.strip() == self.task.answer
        return ToolResult("", terminal=True, outcome=1.0 if ok else 0.0)
