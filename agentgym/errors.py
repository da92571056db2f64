"""The one exception hierarchy of agentgym.

Everything agentgym raises on purpose derives from ``AgentGymError``::

    AgentGymError
    ├── ConfigError             bad argument, config key or value (also a ValueError)
    ├── TokenizerError          tokenizer lacks the Harmony special tokens, or ids out of range
    ├── EnvStateError           step before reset, step after the episode ended, use after close
    ├── DatasetError            a user dataset (JSONL) that cannot be read
    ├── SandboxError            code execution backends
    │   ├── SandboxUnavailable  engine not reachable, image missing, backend not installed
    │   └── SandboxStateError   sandbox used after close
    ├── ServiceError            a backing service (the WebAPI server) failed to start or died
    ├── TrainerError            the trainer
    │   ├── NonFiniteError      NaN/inf in rewards, advantages or losses
    │   └── CheckpointError     a checkpoint that cannot be written, read or resumed
    └── SubmissionError         a leaderboard submission that is malformed or fails replay

Bad *actions* from a policy never raise: ``step`` turns them into an error observation and
counts them in ``info``. These exceptions are for mistakes of the programmer or the machine.
Messages say what was expected, what arrived, and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "AgentGymError",
    "CheckpointError",
    "ConfigError",
    "DatasetError",
    "EnvStateError",
    "NonFiniteError",
    "SandboxError",
    "SandboxStateError",
    "SandboxUnavailable",
    "ServiceError",
    "SubmissionError",
    "TokenizerError",
    "TrainerError",
]


class AgentGymError(Exception):
    """Base class of every exception agentgym raises on purpose."""


class ConfigError(AgentGymError, ValueError):
    """A constructor argument, config key or config value is not acceptable."""


class TokenizerError(AgentGymError):
    """The tokenizer cannot speak Harmony (missing special tokens) or got ids out of range."""


class EnvStateError(AgentGymError):
    """An environment method was called in the wrong state (step before reset, after close)."""


class DatasetError(AgentGymError):
    """A user-supplied dataset file is missing or malformed."""


class SandboxError(AgentGymError):
    """Base class for code-execution sandbox failures (not for failures of the code inside)."""


class SandboxUnavailable(SandboxError):
    """No usable backend: engine unreachable, image missing or backend not installed."""


class SandboxStateError(SandboxError):
    """A sandbox was used after close or before it was started."""


class ServiceError(AgentGymError):
    """A backing service (for example the WebAPI server process) failed to start or died."""


class TrainerError(AgentGymError):
    """Base class for trainer failures."""


class NonFiniteError(TrainerError):
    """NaN or inf appeared in rewards, advantages, log-probs or losses."""


class CheckpointError(TrainerError):
    """A checkpoint could not be written, read or resumed from."""


class SubmissionError(AgentGymError):
    """A leaderboard submission is malformed or does not survive replay."""
