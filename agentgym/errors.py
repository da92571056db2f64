"""The one exception hierarchy of agentgym.

Everything agentgym raises on purpose derives from ``AgentGymError``::

    AgentGymError
    ├── ConfigError             bad argument, config key or value (also a ValueError)
    ├── TokenizerError          tokenizer lacks the Harmony special tokens, or ids out of range
    ├── EnvStateError           step before reset, step after the episode ended, use after close
    ├── ActionTypeError         an action of the wrong Python type (text, a dict, None): a program's
    │                           mistake, never a policy's (also a TypeError)
    ├── PoolStepError           some environments of an EnvPool raised; the others' results kept
    ├── DatasetError            a user dataset (JSONL) that cannot be read
    ├── SandboxError            code execution backends
    │   ├── SandboxUnavailable  engine not reachable, image missing, backend not installed
    │   │   └── SandboxStartFailed  one container did not start (also an InfraError)
    │   ├── SandboxStateError   sandbox used after close
    │   └── SandboxLost         the sandbox died under an episode (also an InfraError)
    ├── ServiceError            a backing service (the WebAPI server) failed to start or died
    │   └── ServiceLost         a service stopped answering mid-episode (also an InfraError)
    │       └── SessionEnded    agentgym serve env ended the session (idle too long, restarted)
    ├── InfraError              an episode's infrastructure failed: not the policy's doing
    ├── TrainerError            the trainer
    │   ├── NonFiniteError      NaN/inf in rewards, advantages or losses
    │   ├── CheckpointError     a checkpoint that cannot be written, read or resumed
    │   ├── WarmStartFailed     the warm start's tool loop did not learn (a failed seed)
    │   └── Preempted           SIGTERM: the run checkpointed at a safe point and stopped
    └── SubmissionError         a leaderboard submission that is malformed or fails replay

Bad *actions* from a policy never raise: ``step`` turns them into an error observation and
counts them in ``info``. These exceptions are for mistakes of the programmer or the machine.
Messages say what was expected, what arrived, and how to fix it.

Infrastructure faults are neither: a sandbox that dies, a server that stops answering, an
engine that times out. Inside ``step`` an :class:`InfraError` ends the episode with
``info["infra_error"]`` (a short string) and ``trajectory.meta["infra_error"]``, never a 0
reward the policy earned; raised from ``reset`` (a container that cannot start) or from an
engine, the trainer and ``agentgym-eval`` record the episode as an infrastructure fault too.
The trainer leaves such episodes out of the update and counts them (``episodes_infra``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActionTypeError",
    "AgentGymError",
    "CheckpointError",
    "ConfigError",
    "DatasetError",
    "EnvStateError",
    "InfraError",
    "NonFiniteError",
    "PoolStepError",
    "Preempted",
    "SandboxError",
    "SandboxLost",
    "SandboxStartFailed",
    "SandboxStateError",
    "SandboxUnavailable",
    "ServiceError",
    "ServiceLost",
    "SessionEnded",
    "SubmissionError",
    "TokenizerError",
    "TrainerError",
    "WarmStartFailed",
    "infra_note",
]


class AgentGymError(Exception):
    """Base class of every exception agentgym raises on purpose."""


class ConfigError(AgentGymError, ValueError):
    """A constructor argument, config key or config value is not acceptable."""


class TokenizerError(AgentGymError):
    """The tokenizer cannot speak Harmony (missing special tokens) or got ids out of range."""


class EnvStateError(AgentGymError):
    """An environment method was called in the wrong state (step before reset, after close)."""


class ActionTypeError(AgentGymError, TypeError):
    """``step`` got something no policy samples: text, a chat message, None, floats, a 2-D array.

    Token ids a policy got wrong (out of the vocabulary, none at all) are not this: they are
    error observations. Text goes through :class:`agentgym.TextWrapper`, chat messages through
    :class:`agentgym.ChatWrapper`.
    """


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


class InfraError(AgentGymError):
    """The infrastructure under an episode failed (sandbox lost, service or engine not answering).

    Not the policy's doing: an episode that meets one is an infrastructure fault, reported as
    ``info["infra_error"]`` and left out of training and scores, never a reward of 0.
    """


class SandboxLost(SandboxError, InfraError):
    """The sandbox of a running episode died (container killed, runner gone, work dir lost)."""


class SandboxStartFailed(SandboxUnavailable, InfraError):
    """A sandbox container did not start (in time): the machine's fault, retried by a new episode."""


class ServiceLost(ServiceError, InfraError):
    """A service an episode depends on stopped answering mid-episode (server killed or hung)."""


class SessionEnded(ServiceLost):
    """``agentgym serve env`` ended a session its client still held: no request for the server's
    ``--idle-timeout``, or the server restarted. The episode in flight is lost; the next
    ``reset()`` of ``agentgym/Remote-v0`` opens a new session by itself."""


def infra_note(error: BaseException, limit: int = 200) -> str:
    """The short string an infrastructure fault is reported as (``info["infra_error"]``)."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TrainerError(AgentGymError):
    """Base class for trainer failures."""


class NonFiniteError(TrainerError):
    """NaN or inf appeared in rewards, advantages, log-probs or losses."""


class CheckpointError(TrainerError):
    """A checkpoint could not be written, read or resumed from."""


class WarmStartFailed(TrainerError):
    """The warm start did not learn the env's tool loop (``sft.min_wellformed``): the run (a
    seed of a comparison) stops and counts as failed; nothing is trained after it."""


class Preempted(TrainerError):
    """SIGTERM (a scheduler's preemption) stopped the run at its next safe point, after a
    checkpoint; ``agentgym-train`` exits with 143 and says how to ``--resume``."""


class SubmissionError(AgentGymError):
    """A leaderboard submission is malformed or does not survive replay."""
