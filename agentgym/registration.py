"""Versioned environment ids (``namespace/Name-vN``) on Gymnasium's registry.

The built-ins live under ``agentgym/``; users register their own under their own namespace
(``myorg/Echo-v0``), as Gymnasium allows. Entry points are ``"module:Class"`` strings, so
registering imports nothing heavy; the module is imported by ``gym.make``. Any behaviour
change of an environment bumps its version, and only the new version stays registered: the
old id then fails in ``gym.make`` with gymnasium's ``DeprecatedEnv``, which names the new one
(``agentgym/Math-v0`` -> "Please use `agentgym/Math-v1` instead"). Registering an id again
with the same entry point is a no-op; with another entry point it is an error (it would
silently keep the first).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import parse_env_id

from agentgym.errors import ConfigError

__all__ = ["NAMESPACE", "register", "registered_ids"]

NAMESPACE = "agentgym"

# id -> entry point. The single list of built-in environments. v1 (from v0): math answers must
# be in the task's form (no echoed question), refusals cite the decisive fact, splits everywhere,
# CodeFix's judge charged to the sandbox budget.
BUILTIN: dict[str, str] = {
    "agentgym/Math-v1": "agentgym.environments.math.env:MathEnv",
    "agentgym/MathCalc-v1": "agentgym.environments.math.calc:MathCalcEnv",
    "agentgym/MathTool-v1": "agentgym.environments.mathtool.env:MathToolEnv",
    "agentgym/CodeFix-v1": "agentgym.environments.codefix.env:CodeFixEnv",
    "agentgym/WebAPI-v1": "agentgym.environments.webapi.env:WebAPIEnv",
}
# Clients of the environments above rather than environments of their own: registered for
# gym.make, left out of registered_ids(). Remote-v0: an env served by `agentgym serve`.
ADAPTERS: dict[str, str] = {"agentgym/Remote-v0": "agentgym.remote.client:RemoteEnv"}

_REGISTERED: dict[str, str] = {}  # every id registered through agentgym.register, in order


def register(id: str, entry_point: str, **kwargs: Any) -> None:
    """Register an environment as ``namespace/Name-vN`` (``agentgym/...`` or your own namespace)."""
    expected = "'namespace/Name-v0', e.g. 'myorg/Echo-v0'"
    try:
        namespace, _name, version = parse_env_id(id)
    except gym.error.Error:
        raise ConfigError(f"expected an environment id like {expected}, got {id!r}") from None
    if namespace is None:
        raise ConfigError(f"environment ids live in a namespace (agentgym's are '{NAMESPACE}/...', "
                          f"yours can be your own): expected {expected}, got {id!r}")
    if version is None:
        raise ConfigError(f"environment ids carry a version: expected {expected}, got {id!r}; "
                          "add '-v0' and bump it whenever the environment's behaviour changes")
    if not isinstance(entry_point, str) or ":" not in entry_point:
        raise ConfigError(f"entry_point must be 'module:Class', got {entry_point!r}")
    existing = gym.registry.get(id)
    if existing is not None:
        if existing.entry_point == entry_point:
            _REGISTERED.setdefault(id, entry_point)
            return
        raise ConfigError(f"{id!r} is already registered with entry point {existing.entry_point!r}, not "
                          f"{entry_point!r}; pick another id (or bump the version: a different "
                          "environment is a new version)")
    gym.register(id=id, entry_point=entry_point, disable_env_checker=True, **kwargs)
    _REGISTERED[id] = entry_point


def registered_ids() -> list[str]:
    """Every environment id registered through agentgym (the built-ins and your own), sorted;
    adapters such as Remote-v0 are left out."""
    return sorted(k for k in _REGISTERED if k not in ADAPTERS)


def _register_builtin() -> None:
    for env_id, entry in {**BUILTIN, **ADAPTERS}.items():
        register(env_id, entry)
