"""``agentgym/MathTool-v1``: Math-v1 plus a ``python`` tool that runs in a sandbox (ReTool-style).

    env = gym.make("agentgym/MathTool-v1")          # sandbox="docker" by default

The agent may call ``python {code}`` any number of times (each call is ``python3 -c code``
in the episode's sandbox, with the work dir kept between calls) and answers in the final
channel; Math-v1's verifier decides. Each call returns the exit code and the stdout and
stderr, each cut to ``max_output_chars``. Budgets: ToolEnv's turns and tokens, a
per-command timeout (``command_timeout``, 10 s) and ``sandbox_seconds`` (30 s) of command
time per episode; when that is used up the tool says so and the episode is truncated.
Rewards are Math-v1's (sparse outcome; shaped adds the format, malformed and turn terms as a
bonus on a correct answer only).

One sandbox per episode, acquired at the episode's first ``python`` call (from the shared
warm pool for Docker; episodes that never run code take none), released at the next reset
and on ``close()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentgym.environments.codefix.env import SandboxSpec, sandbox_factory
from agentgym.environments.math.env import MathEnv
from agentgym.errors import ConfigError
from agentgym.sandboxes.base import Sandbox
from agentgym.tools import Tool, ToolResult

__all__ = ["MathToolEnv", "format_exec"]


def format_exec(res: Any, limit: int) -> str:
    """An ExecResult as the model reads it: exit code, then stdout and stderr, each cut."""
    def cut(s: str, truncated: bool) -> str:
        if len(s) > limit:
            s, truncated = s[:limit], True
        return s + ("\n[... output cut ...]" if truncated else "")

    head = f"exit code: {res.exit_code}" + (" (timed out)" if res.timed_out else "")
    out = [head]
    if res.stdout:
        out.append("stdout:\n" + cut(res.stdout, res.stdout_truncated))
    if res.stderr:
        out.append("stderr:\n" + cut(res.stderr, res.stderr_truncated))
    return "\n".join(out)


class MathToolEnv(MathEnv):
    default_id = "agentgym/MathTool-v1"
    instructions = ("Solve the math problem. You may run Python 3 code with the python tool "
                    "(print what you need to see). Answer in the final channel with only the "
                    "final answer (plain text or LaTeX; \\boxed{} is fine).")

    def __init__(self, *, sandbox: SandboxSpec = "docker", command_timeout: float = 10.0,
                 sandbox_seconds: float = 30.0, max_output_chars: int = 2000, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name, v in (("command_timeout", command_timeout), ("sandbox_seconds", sandbox_seconds),
                        ("max_output_chars", max_output_chars)):
            if not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"{name} must be a positive number, got {v!r}")
        self.command_timeout, self.sandbox_seconds = float(command_timeout), float(sandbox_seconds)
        self.max_output_chars = int(max_output_chars)
        self._make_sandbox = sandbox_factory(sandbox)
        self.sandbox: Sandbox | None = None
        self.used_s = 0.0
        self.last_output: str | None = None  # stdout of the latest python call (for oracles)
        self._tool = Tool(
            "python", "Runs Python 3 code (python3 -c) in a sandbox; returns exit code, stdout, stderr.",
            {"type": "object", "properties": {"code": {"type": "string", "maxLength": 20_000}},
             "required": ["code"], "additionalProperties": False},
            self._python)

    def on_reset(self) -> None:
        # The sandbox is taken on the first python call: most math episodes never run code,
        # and each sandbox is a container the warm pool must replace.
        self._release()
        self.used_s, self.last_output = 0.0, None

    def tools(self) -> list[Tool]:
        return [self._tool]

    def on_close(self) -> None:
        self._release()

    def _python(self, code: str) -> ToolResult:
        if self.sandbox is None:
            self.sandbox = self._make_sandbox()
        left = self.sandbox_seconds - self.used_s
        timeout = min(self.command_timeout, left)
        res = self.sandbox.run(["python3", "-c", code], timeout=timeout)
        self.used_s += res.duration_s
        self.last_output = res.stdout
        text = format_exec(res, self.max_output_chars)
        # A command stopped by the budget-cut timeout used it all, whatever its clock says.
        if self.used_s >= self.sandbox_seconds or (res.timed_out and timeout >= left):
            self.used_s = max(self.used_s, self.sandbox_seconds)
            text += (f"\n[sandbox time budget used up: {self.used_s:.1f} s of "
                     f"{self.sandbox_seconds:.0f} s; the episode ends here]")
        return ToolResult(text, ok=res.ok)

    def check_infrastructure(self) -> None:
        """Take a sandbox and run a command in it, as the first ``python`` call would; raises
        :class:`~agentgym.errors.SandboxUnavailable` (or an InfraError) when none can be had.
        ``agentgym validate`` and ``agentgym-eval`` ask before playing: with no Docker engine every
        call would end its episode as an infrastructure fault."""
        sb = self._make_sandbox()
        try:
            sb.run(["python3", "-c", "pass"], timeout=self.command_timeout)
        finally:
            sb.close()

    def budget_exhausted(self) -> bool:
        return self.used_s >= self.sandbox_seconds

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        info["sandbox_seconds"] = round(self.used_s, 3)
        if truncated and not terminated and self.used_s >= self.sandbox_seconds:
            info["truncated_by"] = "sandbox_seconds"
        return obs, reward, terminated, truncated, info

    def _release(self) -> None:
        sb, self.sandbox = self.sandbox, None
        if sb is not None:
            sb.close()
