"""Is an environment's infrastructure up? Asked before ``agentgym validate`` or ``agentgym-eval``
plays an episode of it.

An env whose sandbox engine or backing service is down cannot be scored: with no Docker engine,
MathTool-v1's ``python`` calls would all end as infrastructure faults (masked, never a score),
and the run would only say so at the end. So both commands first reset one env of each id (CodeFix
takes its sandbox there, WebAPI its database) and call its ``check_infrastructure()`` when it has
one (MathTool takes a sandbox and runs a command in it, as its first ``python`` call would), and
refuse with one line that says what is down and how to bring it up.
"""

from __future__ import annotations

from typing import Any

from agentgym.errors import InfraError, SandboxError, ServiceError

__all__ = ["check_infrastructure"]


def check_infrastructure(env: Any, *, seed: int = 0, options: dict[str, Any] | None = None) -> None:
    """Raise :class:`InfraError` (one line) when ``env``'s infrastructure is down; the caller closes ``env``."""
    inner = env.unwrapped
    try:
        env.reset(seed=seed, options=options)
        probe = getattr(inner, "check_infrastructure", None)
        if callable(probe):
            probe()
    except (SandboxError, ServiceError, InfraError) as e:
        raise InfraError(f"{inner.env_id} cannot be scored: its infrastructure is down ({type(e).__name__}: {e}). "
                         "Bring it up and run the same command again") from None
