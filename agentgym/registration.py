"""Versioned environment ids under the ``agentgym/`` namespace, on Gymnasium's registry.

Entry points are ``"module:Class"`` strings, so registering imports nothing heavy; the
module is imported by ``gym.make``. Any behaviour change of an environment bumps its version.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from agentgym.errors import ConfigError

__all__ = ["NAMESPACE", "register", "registered_ids"]

NAMESPACE = "agentgym"

# id -> entry point. The single list of built-in environments.
BUILTIN: dict[str, str] = {
    "agentgym/Math-v0": "agentgym.environments.math.env:MathEnv",
    "agentgym/MathCalc-v0": "agentgym.environments.math.calc:MathCalcEnv",
    "agentgym/MathTool-v0": "agentgym.environments.mathtool.env:MathToolEnv",
    "agentgym/CodeFix-v0": "agentgym.environments.codefix.env:CodeFixEnv",
    "agentgym/WebAPI-v0": "agentgym.environments.webapi.env:WebAPIEnv",
}
# Clients of the environments above rather than environments of their own: registered for
# gym.make, left out of registered_ids(). Remote-v0: an env served by `agentgym serve`.
ADAPTERS: dict[str, str] = {"agentgym/Remote-v0": "agentgym.remote.client:RemoteEnv"}


def register(id: str, entry_point: str, **kwargs: Any) -> None:
    """Register an environment under the agentgym namespace (``agentgym/Name-vN``)."""
    if not id.startswith(NAMESPACE + "/"):
        raise ConfigError(f"agentgym ids live in the {NAMESPACE!r} namespace: expected "
                          f"'{NAMESPACE}/Name-v0', got {id!r}")
    if id in gym.registry:
        return
    gym.register(id=id, entry_point=entry_point, disable_env_checker=True, **kwargs)


def registered_ids() -> list[str]:
    return sorted(k for k in gym.registry if k.startswith(NAMESPACE + "/") and k not in ADAPTERS)


def _register_builtin() -> None:
    for env_id, entry in {**BUILTIN, **ADAPTERS}.items():
        register(env_id, entry)
