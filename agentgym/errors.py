"""The one exception hierarchy of agentgym.

Everything agentgym raises on purpose derives from ``AgentGymError``::

    AgentGymError
    ├── ConfigError             bad argument, config key or value (also a ValueError)
    ├── TokenizerError          tokenizer lacks the Harmony special tokens, or ids out of range
    ├── EnvStateError           step before reset, step after the episode ended, use after close
    ├── PoolStepError           some environments of an EnvPool raised; the others' results kept
    ├── DatasetError            a user dataset (JSONL) that cannot be read
    ├── SandboxError            code execution backends
    │   ├── SandboxUnavailable  engine not reachable, image missing, backend not installed
    │   └── SandboxStateError   sandbox used after close
    ├── ServiceError            a backing service (the WebAPI server) failed to start or died
    ├── TrainerError            the trainer
    │   ├── NonFiniteError      NaN/inf in rewards, advantages or losses
    │   ├── CheckpointError     a checkpoint that cannot be written, read or resumed
    │   └── WarmStartFailed     the warm start's tool loop did not learn (a failed seed)
    └── SubmissionError         a leaderboard submission that is malformed or fails replay

Bad *actions* from a policy never raise: ``step`` turns them into an error observation and
counts them in ``info``. These exceptions are for mistakes of the programmer or the machine.
Messages say what was expected, what arrived, and how to fix it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentGymError",
    "CheckpointError",
    "ConfigError",
    "DatasetError",
    "EnvStateError",
    "NonFiniteError",
    "PoolStepError",
    "SandboxError",
    "SandboxStateError",
    "SandboxUnavailable",
    "ServiceError",
    "SubmissionError",
    "TokenizerError",
    "TrainerError",
    "WarmStartFailed",
]


class AgentGymError(Exception):
    """Base class of every exception agentgym raises on purpose."""


class ConfigError(AgentGymError, ValueError):
    """A constructor argument, config key or config value is not acceptable."""


class TokenizerError(AgentGymError):
    """The tokenizer cannot speak Harmony (missing special tokens) or got ids out of range."""


class EnvStateError(AgentGymError):
    """An environment method was called in the wrong state (step before reset, after close)."""


class PoolStepError(AgentGymError):
    """Some environments of an :class:`~agentgym.EnvPool` raised during ``step`` or ``reset``.

    ``results`` maps the index of every environment that succeeded to its result (their turns
    are recorded and must not be lost); ``errors`` maps each failed index to its exception (a
    failed ``step`` records nothing of its turn, so that env can be stepped again).
    """

    def __init__(self, results: dict[int, Any], errors: dict[int, BaseException], total: int) -> None:
        first = next(iter(errors.items()))
        super().__init__(
            f"{len(errors)} of {total} environments raised (first: env {first[0]}: "
            f"{type(first[1]).__name__}: {first[1]}); the {len(results)} others' results are in "
            ".results, the exceptions in .errors")
        self.results, self.errors, self.total = results, errors, total

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle as cls(*args); this one is rebuilt from its parts (Ray ships it
        # from a worker process to the driver).
        return (type(self), (self.results, self.errors, self.total))


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


class WarmStartFailed(TrainerError):
    """The warm start did not learn the env's tool loop (``sft.min_wellformed``): the run (a
    seed of a comparison) stops and counts as failed; nothing is trained after it."""


class SubmissionError(AgentGymError):
    """A leaderboard submission is malformed or does not survive replay."""
