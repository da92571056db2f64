"""Tools an agent can call: a name, a description, JSON-schema parameters and a function.

A tool never raises into the environment. Bad arguments (schema violations) and exceptions
inside the function come back as a :class:`ToolResult` with ``ok=False`` and a readable
``content`` that the model sees, plus a stable ``error`` code that ``info`` reports. The one
exception is :class:`~agentgym.errors.InfraError` (the sandbox or service behind the tool
failed): it passes through, and the environment ends the episode as an infrastructure fault.
A sandbox that cannot be had (:class:`~agentgym.errors.SandboxUnavailable`: no Docker engine)
or a service that failed (:class:`~agentgym.errors.ServiceError`) is one too: their text (a
socket path, a host name) is the machine's business and never reaches the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from agentgym.errors import InfraError, SandboxStartFailed, SandboxUnavailable, ServiceError, ServiceLost

__all__ = ["Tool", "ToolResult"]

# Checking a schema costs ~1 ms; environments often rebuild their tools every episode.
_VALIDATORS: dict[str, Draft202012Validator] = {}


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    key = json.dumps(schema, sort_keys=True, default=str)
    v = _VALIDATORS.get(key)
    if v is None:
        Draft202012Validator.check_schema(schema)
        v = _VALIDATORS[key] = Draft202012Validator(schema)
    return v


@dataclass(slots=True)
class ToolResult:
    content: str  # what the model reads
    ok: bool = True
    error: str | None = None  # stable code when not ok: "bad_arguments", "tool_exception", ...
    terminal: bool = False  # the call ends the episode (e.g. submit)
    outcome: float | None = None  # the task outcome (the sparse reward) when terminal
    components: dict[str, float] = field(default_factory=dict)  # extra shaped-reward terms

    @classmethod
    def failure(cls, error: str, message: str) -> ToolResult:
        return cls(json.dumps({"error": error, "message": message}), ok=False, error=error)


@dataclass
class Tool:
    """A callable tool. ``fn`` receives the validated JSON arguments as keyword arguments."""

    name: str
    description: str
    parameters: dict[str, Any]  # a JSON schema of type "object"
    fn: Callable[..., ToolResult | str | Any]  # str, ToolResult, or a JSON value (shown as JSON)
    max_output_chars: int = 16_000  # longer results are cut, with a note, before tokenizing

    def __post_init__(self) -> None:
        self.parameters.setdefault("type", "object")
        self.parameters.setdefault("properties", {})
        self._validator = _validator(self.parameters)

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema (for API models and docs)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        result = self._call(arguments)
        if len(result.content) > self.max_output_chars:  # errors too: they may quote the input
            cut = len(result.content) - self.max_output_chars
            result.content = result.content[: self.max_output_chars] + f"\n[... {cut} characters cut]"
        return result

    def _call(self, arguments: dict[str, Any]) -> ToolResult:
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            msgs = []
            for e in errors[:5]:
                where = ".".join(str(p) for p in e.path) or "arguments"
                msgs.append(f"{where}: {_clip(e.message, 300)}")
            return ToolResult.failure(
                "bad_arguments",
                f"{self.name} expects {json.dumps(self.parameters.get('properties'))}; "
                + "; ".join(msgs),
            )
        try:
            result = self.fn(**arguments)
        except InfraError:  # not the model's doing: the env ends the episode as a fault (env.py)
            raise
        except SandboxUnavailable as e:  # no engine, no image: as a fault, never as text for the model
            raise SandboxStartFailed(str(e)) from None
        except ServiceError as e:
            raise ServiceLost(str(e)) from None
        except Exception as e:  # the tool's own bug or a hostile input: report, don't crash
            return ToolResult.failure("tool_exception", f"{type(e).__name__}: {_clip(str(e), 2000)}")
        return _as_result(result)


def _as_result(value: Any) -> ToolResult:
    """What a tool function returned, as a ToolResult: JSON values are rendered as JSON text;
    anything else is the tool's bug, reported to the model rather than raised into ``step``."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(value)
    if value is None or isinstance(value, (dict, list, tuple, int, float, bool)):
        try:
            return ToolResult(json.dumps(value, ensure_ascii=False, allow_nan=False, default=_refuse))
        except (TypeError, ValueError, RecursionError) as e:
            why = f"{type(e).__name__}: {_clip(str(e), 300)}"
    else:
        why = f"got {type(value).__name__}"
    return ToolResult.failure("bad_tool_result",
                              f"the tool returned a value it cannot show ({why}); expected str or ToolResult "
                              "(or a JSON value). This is a bug in the tool, not in the call.")


def _refuse(obj: Any) -> Any:
    raise TypeError(f"{type(obj).__name__} is not JSON")


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + f"... ({len(text) - n} more characters)"
