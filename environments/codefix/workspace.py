"""One CodeFix episode's sandbox and the tools the agent uses on it.

Tools (all return text the model reads; a bad call returns a readable error, never raises):

* ``list_files {path?}``, ``read_file {path}``, ``write_file {path, content}``;
* ``edit {path, old, new}``: replace exactly one occurrence of ``old``;
* ``apply_patch {patch}``: a unified diff;
* ``run_tests {}``: ``python3 test_visible.py``; ``run_python {code}``;
* ``submit {}``: run the hidden tests (see :mod:`.judge`) and end the episode.

A sandbox that dies under the episode (its container killed, its runner lost: the work dir is
then gone) is an infrastructure fault, not a result: the tool raises :class:`SandboxLost` and
the environment ends the episode with ``info["infra_error"]``.

Sandbox seconds: the durations of the agent's commands (``run_tests``, ``run_python``) are
summed; each command's timeout is cut to what is left, and when the budget is used up the tool
says so and the environment truncates the episode. The judge at submit runs the agent's code,
so it runs on the same budget: its timeout is cut to what is left, and a judge that runs out of
it (a ``solution.py`` that stops the judge with ``SIGSTOP`` at import, or never returns) uses
the budget up: it can stall an episode for what the episode had left, never more. (A judge
that finishes adds nothing to the count: submit ends the episode, so its time could change
nothing, and a measured duration in ``info`` would make two runs of one episode differ.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentgym.environments.codefix.judge import JudgeReport, judge_argv, judge_payload, parse_judge_output
from agentgym.environments.codefix.patch import PatchError, apply_unified_diff
from agentgym.environments.codefix.tasks import CodeFixTask
from agentgym.errors import ConfigError, SandboxError, SandboxLost
from agentgym.sandboxes.base import ExecResult, Sandbox, check_relpath
from agentgym.tools import Tool, ToolResult

__all__ = ["Limits", "Workspace", "describe_report"]


class Limits:
    """Per-episode limits of the tools (documented in the env's docstring)."""

    def __init__(self, *, sandbox_seconds: float = 60.0, command_timeout: float = 10.0,
                 max_output_chars: int = 4000, max_file_bytes: int = 100_000,
                 judge_deadline: float = 20.0) -> None:
        for name, v in (("sandbox_seconds", sandbox_seconds), ("command_timeout", command_timeout),
                        ("max_output_chars", max_output_chars), ("max_file_bytes", max_file_bytes),
                        ("judge_deadline", judge_deadline)):
            if not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"{name} must be a positive number, got {v!r}")
        self.sandbox_seconds = float(sandbox_seconds)
        self.command_timeout = float(command_timeout)
        self.max_output_chars = int(max_output_chars)
        self.max_file_bytes = int(max_file_bytes)
        self.judge_deadline = float(judge_deadline)


JUDGE_STARTUP = 15.0  # seconds past the judge's deadline before it is killed (start-up, import)
MIN_JUDGE_S = 1.0  # the judge's smallest timeout: a submit with less budget left still runs


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


_STR = {"type": "string"}


class Workspace:
    """The sandbox of one episode, its time budget, and the tool implementations."""

    def __init__(self, sandbox: Sandbox, task: CodeFixTask, limits: Limits) -> None:
        self.sandbox, self.task, self.limits = sandbox, task, limits
        self.used_s = 0.0
        self.exhausted = False
        self.report: JudgeReport | None = None
        self._losses = getattr(sandbox, "runner_losses", 0)
        sandbox.write_files({"solution.py": task.buggy_source, "test_visible.py": task.visible_tests})
        self.check_alive()

    def check_alive(self) -> None:
        """SandboxLost if the sandbox lost its runner (and with it the work dir) since the start."""
        if getattr(self.sandbox, "runner_losses", 0) != self._losses:
            raise SandboxLost("the episode's sandbox died (container killed or runner lost) and came back "
                              "with an empty work dir; the episode cannot go on")

    # ---------------------------------------------------------------- helpers
    def _path(self, path: str) -> str:
        return check_relpath(path)  # ConfigError on absolute paths and '..' escapes

    def _read_text(self, path: str) -> str | None:
        try:
            data = self.sandbox.read_file(self._path(path), max_bytes=self.limits.max_file_bytes + 1)
        except (FileNotFoundError, IsADirectoryError):
            return None
        return data.decode("utf-8", errors="replace")

    def _exec(self, argv: list[str], stdin: bytes = b"") -> tuple[ExecResult | None, str]:
        """Run an agent command under the remaining budget: (result, budget note)."""
        left = self.limits.sandbox_seconds - self.used_s
        if left <= 0:
            return None, self._exhaust()
        timeout = min(self.limits.command_timeout, left)
        res = self.sandbox.run(argv, stdin=stdin, timeout=timeout)
        self.used_s += res.duration_s
        # A command stopped by the budget-cut timeout used it all, whatever its clock says.
        if self.used_s >= self.limits.sandbox_seconds or (res.timed_out and timeout >= left):
            self.used_s = max(self.used_s, self.limits.sandbox_seconds)
            return res, self._exhaust()
        return res, ""

    def _exhaust(self) -> str:
        self.exhausted = True  # CodeFixEnv.budget_exhausted() truncates the episode this step
        return (f"\n[sandbox time budget used up: {self.used_s:.1f} s of "
                f"{self.limits.sandbox_seconds:.0f} s; the episode ends here]")

    def _format(self, res: ExecResult | None, note: str) -> ToolResult:
        if res is None:
            return ToolResult(note.strip(), ok=False, error="budget_exhausted")
        cap = self.limits.max_output_chars
        parts = [f"exit code: {res.exit_code}" + (" (timed out)" if res.timed_out else "")]
        if res.stdout:
            parts.append("stdout:\n" + _cut(res.stdout, cap) + (" [truncated]" if res.stdout_truncated else ""))
        if res.stderr:
            parts.append("stderr:\n" + _cut(res.stderr, cap) + (" [truncated]" if res.stderr_truncated else ""))
        return ToolResult("\n".join(parts) + note, ok=res.ok)

    # ---------------------------------------------------------------- tools
    def list_files(self, path: str = ".") -> ToolResult:
        files = self.sandbox.list_files(self._path(path))
        return ToolResult("\n".join(files) if files else f"(no files under {path!r})")

    def read_file(self, path: str) -> ToolResult:
        text = self._read_text(path)
        if text is None:
            return ToolResult.failure("not_found", f"no file {path!r} in the work dir; see list_files")
        if len(text) > self.limits.max_file_bytes:
            text = text[: self.limits.max_file_bytes] + "\n[... file cut ...]"
        return ToolResult(_cut(text, max(self.limits.max_output_chars * 4, 16000)))

    def write_file(self, path: str, content: str) -> ToolResult:
        size = len(content.encode("utf-8", errors="replace"))
        if size > self.limits.max_file_bytes:
            return ToolResult.failure(
                "too_large", f"{size} bytes is more than the {self.limits.max_file_bytes}-byte limit per file")
        p = self._path(path)
        self.sandbox.write_files({p: content})
        return ToolResult(f"wrote {size} bytes to {p}")

    def edit(self, path: str, old: str, new: str) -> ToolResult:
        text = self._read_text(path)
        if text is None:
            return ToolResult.failure("not_found", f"no file {path!r} in the work dir; see list_files")
        count = text.count(old) if old else 0
        if count != 1:
            why = "old is empty" if not old else f"old occurs {count} times"
            return ToolResult.failure("no_unique_match", f"{why} in {path}; expected exactly one "
                                      "occurrence: copy the text exactly, with more context if needed")
        return self.write_file(path, text.replace(old, new, 1))

    def apply_patch(self, patch: str) -> ToolResult:
        try:
            new = apply_unified_diff(patch, self._read_text)
        except PatchError as e:
            return ToolResult.failure("bad_patch", str(e))
        for p, content in new.items():
            res = self.write_file(p, content)
            if not res.ok:
                return res
        return ToolResult("patched " + ", ".join(self._path(p) for p in new))

    def run_tests(self) -> ToolResult:
        return self._format(*self._exec(["python3", "test_visible.py"]))

    def run_python(self, code: str) -> ToolResult:
        return self._format(*self._exec(["python3", "-c", code]))

    def _unchanged(self) -> bool:
        try:
            return self._read_text("solution.py") == self.task.buggy_source
        except (ConfigError, SandboxError):  # replaced by a link, or the runner is gone: changed
            return False

    def submit(self) -> ToolResult:
        t = self.task
        # The judge gets what is left of the budget (at most judge_deadline, plus JUDGE_STARTUP
        # for the interpreter and the candidate's import); running out of it uses the budget up.
        left = max(self.limits.sandbox_seconds - self.used_s, 0.0)
        timeout = max(min(self.limits.judge_deadline + JUDGE_STARTUP, left), MIN_JUDGE_S)
        deadline = max(min(self.limits.judge_deadline, timeout - min(JUDGE_STARTUP, timeout / 2)), MIN_JUDGE_S / 2)
        payload, nonce = judge_payload(t.judge_spec(), deadline=deadline)
        self.check_alive()
        try:
            res = self.sandbox.run(judge_argv(), stdin=payload, timeout=timeout)
        except SandboxError as e:  # no verdict can be had: a fault of the machine, not a failed submit
            raise SandboxLost(f"the sandbox failed while judging the submission: {e}") from e
        self.check_alive()  # the runner died under the judge: its output is no verdict
        if res.timed_out:
            self.used_s = max(self.used_s, self.limits.sandbox_seconds)
        rep = parse_judge_output(res.stdout, nonce, t.n_units)
        self.report = rep
        # The buggy file itself scores its start pass rate by definition: submitting it unchanged
        # gains exactly nothing, whatever a re-run of the judge would say (it measured the start
        # at build time, under other limits).
        delta = 0.0 if self._unchanged() else rep.pass_rate - t.start_pass_rate
        msg = (f"submitted: {rep.passed}/{rep.total} hidden tests passed" if rep.valid
               else f"submitted: {rep.problem}")
        return ToolResult(msg, terminal=True, outcome=1.0 if rep.all_passed else 0.0,
                          components={"pass_rate_delta": delta})

    # ---------------------------------------------------------------- tool list
    def tools(self) -> list[Tool]:
        def guard(fn: Callable[..., ToolResult]) -> Callable[..., ToolResult]:
            def wrapped(**kw: Any) -> ToolResult:
                try:
                    result = fn(**kw)
                    self.check_alive()
                    return result
                except ConfigError as e:  # bad paths: '..', absolute, NUL
                    return ToolResult.failure("bad_path", str(e))
                except (PermissionError, NotADirectoryError) as e:  # through a planted symlink, or a file
                    return ToolResult.failure("bad_path", str(e))
            return wrapped

        T = Tool
        return [
            T("list_files", "List the files under a directory of the work dir (default: all).",
              _schema({"path": _STR}, []), guard(self.list_files)),
            T("read_file", "Read a text file of the work dir.", _schema({"path": _STR}, ["path"]),
              guard(self.read_file)),
            T("write_file", "Create or overwrite a file of the work dir with the given content.",
              _schema({"path": _STR, "content": _STR}, ["path", "content"]), guard(self.write_file)),
            T("edit", "Replace the single exact occurrence of `old` with `new` in a file.",
              _schema({"path": _STR, "old": _STR, "new": _STR}, ["path", "old", "new"]), guard(self.edit)),
            T("apply_patch", "Apply a unified diff (--- a/FILE, +++ b/FILE, @@ hunks) to the work dir.",
              _schema({"patch": _STR}, ["patch"]), guard(self.apply_patch)),
            T("run_tests", "Run the visible tests (python3 test_visible.py); returns their output.",
              _schema({}, []), guard(self.run_tests)),
            T("run_python", "Run a Python 3 snippet in the work dir; returns stdout, stderr, exit code.",
              _schema({"code": _STR}, ["code"]), guard(self.run_python)),
            T("submit", "Submit solution.py: the hidden tests decide the result. Ends the episode.",
              _schema({}, []), guard(self.submit)),
        ]


def describe_report(rep: JudgeReport | None) -> dict[str, Any] | None:
    """A JSON-friendly summary of a judge report for ``info``."""
    if rep is None:
        return None
    return json.loads(json.dumps({"passed": rep.passed, "total": rep.total, "valid": rep.valid,
                                  "problem": rep.problem, "failures": rep.failures[:10]}))
