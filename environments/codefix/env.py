"""CodeFix-v1: fix an injected bug in a HumanEval function, in a sandbox, then submit.

    env = gym.make("agentgym/CodeFix-v1", split="train", level=1)   # sandbox="docker"
    obs, info = env.reset(seed=0)                 # or options={"task_id": ...} / {"index": n} / {"level": 2}
    env.reset(seed=0, options={"split": "eval"})  # a held-out problem (HumanEval/N, N % 5 == 0)

Each episode gets a fresh sandbox (from the shared warm pool for Docker) holding
``solution.py`` (the buggy module) and ``test_visible.py`` (a few tests). The agent reads,
edits (``write_file``, ``edit``, ``apply_patch``), runs (``run_tests``, ``run_python``) and
calls ``submit``; a final-channel answer submits too. The hidden tests, which never enter
the sandbox's disk, decide the outcome (see :mod:`.judge`).

Rewards: sparse = 1 if every hidden test passes at submit, else 0. Shaped adds, on a correct
outcome only, ToolEnv's ``format``, ``malformed`` and ``turn`` terms. ``pass_rate_delta``
(hidden-test pass rate at submit minus that of the buggy start, exactly 0 when solution.py is
submitted unchanged) is always reported but has weight 0 by default: a constant-return program
earns it (docs/environments/codefix.md, "Rewards and budgets"); with a weight, a negative total
is floored at 0. Budgets: ``max_turns`` (16), ``max_tokens`` (16384), and ``sandbox_seconds`` (60) of sandbox time per
episode; when any is used up the episode is truncated. The judge at submit runs on what is
left of that budget, and a judge stalled by the agent's code uses it up (see :mod:`.workspace`). Splits: ``train`` and ``eval`` (by
HumanEval problem; ``split=`` or ``options={"split": ...}``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from agentgym.env import Task, ToolEnv
from agentgym.environments.codefix.tasks import SPLITS, TASKS_PATH, CodeFixTask, select_tasks
from agentgym.environments.codefix.workspace import Limits, Workspace, describe_report
from agentgym.errors import ConfigError
from agentgym.sandboxes.base import Sandbox
from agentgym.tools import Tool, ToolResult

__all__ = ["CodeFixEnv", "SandboxSpec", "sandbox_factory"]

# What `sandbox=` accepts: a backend name, a pool (anything with .acquire()), or a factory.
SandboxSpec = str | Callable[[], Sandbox] | Any

_BUGS = {1: "a bug", 2: "two bugs", 3: "a bug"}


def sandbox_factory(spec: SandboxSpec) -> Callable[[], Sandbox]:
    """A zero-argument callable giving a fresh Sandbox per episode, from ``sandbox=``."""
    if isinstance(spec, str):
        from agentgym.sandboxes import make_sandbox

        name = spec
        return lambda: make_sandbox(name)
    if hasattr(spec, "acquire"):
        return spec.acquire  # a SandboxPool
    if callable(spec):
        return spec
    raise ConfigError(f"sandbox must be a backend name ('docker', 'bwrap', 'unsafe-local'), a "
                      f"SandboxPool or a callable returning a Sandbox; got {type(spec).__name__}")


class CodeFixEnv(ToolEnv):
    default_id = "agentgym/CodeFix-v1"
    # Reported, paid only if you opt in (shaping={"pass_rate_delta": 1.0}): partial credit by
    # hidden-test counts pays degenerate programs (`return True` gains up to 0.8 on a task whose
    # bug fails every unit; the best constant gains on 28% of sampled tasks), which is a hack.
    extra_shaping = {"pass_rate_delta": 0.0}
    instructions = (
        "You fix bugs in Python code inside a sandbox. The work dir holds solution.py (the "
        "module to fix) and test_visible.py (a few of the tests). Read the code, find the bug, "
        "change solution.py with edit, apply_patch or write_file, check your fix with run_tests "
        "or run_python, then call submit. Hidden tests that include the visible ones decide "
        "the result; a final answer also submits. Commands share a time budget."
    )

    splits = SPLITS  # ("train", "eval")

    def __init__(self, *, split: str = "train", level: int | None = None,
                 sandbox: SandboxSpec = "docker", sandbox_seconds: float = 60.0,
                 command_timeout: float = 10.0, max_output_chars: int = 4000,
                 max_file_bytes: int = 100_000, tasks_path: str | Path | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("max_turns", 16)
        kwargs.setdefault("max_tokens", 16384)
        super().__init__(split=split, **kwargs)
        self.level = level
        path = Path(tasks_path) if tasks_path is not None else TASKS_PATH
        self._by_split = {s: select_tasks(s, level, path) for s in self.splits}
        self.tasks: tuple[CodeFixTask, ...] = self._by_split[split]  # the constructor's split
        self.limits = Limits(sandbox_seconds=sandbox_seconds, command_timeout=command_timeout,
                             max_output_chars=max_output_chars, max_file_bytes=max_file_bytes)
        self._make_sandbox = sandbox_factory(sandbox)
        self.sandbox: Sandbox | None = None
        self.workspace: Workspace | None = None

    # ---------------------------------------------------------------- ToolEnv hooks
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        split = str(options.get("split", self.split))  # ToolEnv.reset set and checked it (CodeFix has splits)
        tasks = self._by_split[split]
        if "task_id" in options:
            by_id = {t.id: t for t in tasks}
            if options["task_id"] not in by_id:
                raise ConfigError(
                    f"task_id {options['task_id']!r} is not in split={split!r} "
                    f"level={self.level!r}; ids look like {tasks[0].id!r} (see env.unwrapped.tasks)")
            t = by_id[options["task_id"]]
        elif "index" in options:
            i = options["index"]
            if not isinstance(i, int) or not 0 <= i < len(tasks):
                raise ConfigError(f"index must be an int in [0, {len(tasks)}) for split {split!r}, got {i!r}")
            t = tasks[i]
        else:
            pool = tasks
            if options.get("level") is not None:  # a curriculum's level (trainer/curriculum.py)
                pool = tuple(t for t in tasks if t.level == options["level"])
                if not pool:
                    raise ConfigError(f"reset option level={options['level']!r}: no task of "
                                      f"split={split!r} at that level; levels here: "
                                      f"{sorted({t.level for t in tasks})}")
            t = pool[int(rng.integers(len(pool)))]
        return Task(id=t.id, prompt=self._prompt(t), answer=t,
                    meta={"level": t.level, "problem": t.problem, "split": t.split})

    def _prompt(self, t: CodeFixTask) -> str:
        return (f"solution.py has {_BUGS[t.level]}: `{t.entry_point}` does not do what its "
                f"docstring says. Fix solution.py, then submit.\n\nsolution.py:\n```python\n"
                f"{t.buggy_source.rstrip()}\n```\n\ntest_visible.py runs {t.n_visible} of the "
                f"{t.n_units} hidden tests. Sandbox time budget: "
                f"{self.limits.sandbox_seconds:.0f} s.")

    def on_reset(self) -> None:
        self._release()
        assert self.task is not None
        self.sandbox = self._make_sandbox()
        self.workspace = Workspace(self.sandbox, self.task.answer, self.limits)

    def tools(self) -> list[Tool]:
        return self.workspace.tools() if self.workspace is not None else []

    def score_final(self, answer: str) -> ToolResult:
        """A final answer submits the current solution.py."""
        assert self.workspace is not None
        return self.workspace.submit()

    def on_close(self) -> None:
        self._release()

    # ---------------------------------------------------------------- budget
    def budget_exhausted(self) -> bool:
        return self.workspace is not None and self.workspace.exhausted

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        ws = self.workspace
        if ws is not None:
            info["sandbox_seconds"] = round(ws.used_s, 3)
            if ws.exhausted and truncated and not terminated:
                info["truncated_by"] = "sandbox_seconds"
            if terminated:
                info["judge"] = describe_report(ws.report)
        return obs, reward, terminated, truncated, info

    def _release(self) -> None:
        sb, self.sandbox, self.workspace = self.sandbox, None, None
        if sb is not None:
            sb.close()
