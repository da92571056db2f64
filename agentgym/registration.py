"""Versioned environment ids (``namespace/Name-vN``) on Gymnasium's registry.

The built-ins live under ``agentgym/``; users register their own under their own namespace
(``myorg/Echo-v0``), as Gymnasium allows. Entry points are ``"module:Class"`` strings, so
registering imports nothing heavy; the module is imported by ``gym.make``. Any behaviour
change of an environment bumps its version, and only the new version stays registered: the
old id then fails in ``gym.make`` with gymnasium's ``DeprecatedEnv``, which names the new one
(``agentgym/Math-v0`` -> "Please use `agentgym/Math-v1` instead"). Registering an id again
with the same entry point is a no-op; with another entry point it is an error (it would
silently keep the first).

What an environment can do besides being played is declared here too, once, as its
:class:`Capabilities` (an oracle, replayable episodes, warm-start teachers, splits, a sandbox, the
cheating policies it must pay nothing):
the trainer, the leaderboards and the CLI read :func:`capabilities` instead of keeping tables
keyed by env id.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator, parse_env_id

from agentgym.env import ToolEnv, _constructor_args
from agentgym.errors import ConfigError

__all__ = ["ADAPTERS", "NAMESPACE", "Capabilities", "capabilities", "check_env_id", "constructor_kwargs", "ids_with",
           "register", "registered_ids"]

NAMESPACE = "agentgym"


@dataclass(frozen=True)
class Capabilities:
    """What an environment offers besides ``reset`` / ``step``; strings name ``"module:function"``
    (imported only when used, so declaring them costs nothing)."""

    oracle: str | None = None
    """``env -> next action token ids``: the scripted policy that solves every task
    (:mod:`agentgym.oracles`: tests, ``agentgym demo``, warm-start demonstrations)."""
    replayable: bool = False
    """A lost episode may be run again: episodes share no state that outlives them (a fresh
    sandbox, database or generator each), so a second run cannot double an effect."""
    external_state: tuple[str, ...] = ()
    """Constructor kwargs that point the env at a store outliving the episode (an external
    server or database): any of them set makes it not replayable."""
    teachers: Mapping[str, str] = field(default_factory=dict)
    """Warm-start teacher name -> ``factory(oracle, **sft_params) -> policy`` (``sft.teacher``)."""
    splits: tuple[str, ...] = ()
    """The task splits ``split=`` accepts (as the env class's ``splits``)."""
    sandbox: bool = False
    """Episodes run code in a sandbox (Docker by default: ``sandbox=`` picks the backend)."""
    reset_options: tuple[str, ...] | None = None
    """The ``reset(options=...)`` keys the env reads (``split`` included where it has splits); the
    trainer refuses others in its reset-option keys. None: not declared, any key is passed on."""
    hacks: str | None = None
    """``() -> list[Hack]``: scripted cheating policies that must earn 0 on it
    (:mod:`agentgym.environments.hacks`; every built-in declares one, and
    ``tests/environments/test_reward_hacks.py`` plays them all)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "teachers", dict(self.teachers))  # a copy: the caller's dict may change

    def replayable_with(self, kwargs: Mapping[str, Any]) -> bool:
        """``replayable`` for an env built with ``kwargs``."""
        return self.replayable and not any(kwargs.get(k) for k in self.external_state)

# id -> entry point. The single list of built-in environments. v1 (from v0): math answers must
# be in the task's form (no echoed question), refusals cite the decisive fact, splits everywhere,
# CodeFix's judge charged to the sandbox budget.
BUILTIN: dict[str, str] = {
    "agentgym/Math-v1": "agentgym.environments.math.env:MathEnv",
    "agentgym/MathCalc-v1": "agentgym.environments.math.calc:MathCalcEnv",
    "agentgym/MathTool-v1": "agentgym.environments.mathtool.env:MathToolEnv",
    "agentgym/CodeFix-v1": "agentgym.environments.codefix.env:CodeFixEnv",
    "agentgym/WebAPI-v1": "agentgym.environments.webapi.env:WebAPIEnv",
    "agentgym/Lookup-v1": "agentgym.environments.lookup.env:LookupEnv",
}
# Clients of the environments above rather than environments of their own: registered for
# gym.make, left out of registered_ids(). Remote-v0: an env served by `agentgym serve env`.
ADAPTERS: dict[str, str] = {"agentgym/Remote-v0": "agentgym.serving.env_client:RemoteEnv"}
# Environments of other hubs (agentgym.environments.interop; `pip install 'agentgym-suite[interop]'`):
# registered for gym.make, left out of registered_ids() (they need a source: a dataset name, a
# taskset, a server), like the adapters above.
INTEROP: dict[str, str] = {
    "agentgym/ReasoningGym-v0": "agentgym.environments.interop.reasoning_gym:ReasoningGymEnv",
    "agentgym/Verifiers-v0": "agentgym.environments.interop.verifiers_import:VerifiersEnv",
    "agentgym/OpenEnv-v0": "agentgym.environments.interop.openenv_import:OpenEnvEnv",
    "agentgym/SkyRL-v0": "agentgym.environments.interop.skyrl:SkyRLEnv",
}

_MATH = "agentgym.environments.math"
_MATH_TEACHERS = {"oracle": f"{_MATH}.teachers:oracle_teacher"}
_INTEROP_ORACLE = "agentgym.environments.interop.oracle:oracle_action"
_MATH_OPTIONS = ("split", "family", "level", "index")  # MathEnv.pick (OPTION_KEYS there)
_HACKS = "agentgym.environments.hacks"
# id -> what it can do besides being played (ids left out can do none of it).
BUILTIN_CAPABILITIES: dict[str, Capabilities] = {
    "agentgym/Math-v1": Capabilities(oracle=f"{_MATH}.oracle:oracle_action", replayable=True,
                                     teachers=_MATH_TEACHERS, splits=("train", "eval"), reset_options=_MATH_OPTIONS,
                                     hacks=f"{_HACKS}:math_hacks"),
    "agentgym/MathCalc-v1": Capabilities(oracle=f"{_MATH}.oracle:oracle_actions", replayable=True,
                                         teachers=_MATH_TEACHERS, splits=("train", "eval"),
                                         reset_options=_MATH_OPTIONS, hacks=f"{_HACKS}:mathcalc_hacks"),
    "agentgym/MathTool-v1": Capabilities(oracle="agentgym.environments.mathtool.oracle:oracle_policy",
                                         replayable=True, splits=("train", "eval"), sandbox=True,
                                         reset_options=_MATH_OPTIONS, hacks=f"{_HACKS}:math_hacks"),
    "agentgym/CodeFix-v1": Capabilities(oracle="agentgym.environments.codefix.oracle:oracle_policy",
                                        replayable=True, splits=("train", "eval"), sandbox=True,
                                        reset_options=("split", "task_id", "index", "level"),
                                        hacks=f"{_HACKS}:codefix_hacks"),
    "agentgym/WebAPI-v1": Capabilities(oracle="agentgym.environments.webapi.policies:oracle_action",
                                       replayable=True, external_state=("server_url", "database_url"),
                                       splits=("train", "eval", "all"), reset_options=("split", "task_id", "index"),
                                       hacks=f"{_HACKS}:webapi_hacks"),
    "agentgym/Lookup-v1": Capabilities(oracle="agentgym.environments.lookup.oracle:oracle_policy",
                                       replayable=True, teachers=_MATH_TEACHERS, splits=("train", "eval"),
                                       reset_options=("split", "depth", "fail_rate", "index", "fault_seed"),
                                       hacks=f"{_HACKS}:lookup_hacks"),
    # Imported envs: the adapter's own oracle where its source has one (it says why not otherwise).
    # OpenEnv-v0 passes its reset options to the server's reset: not declared.
    "agentgym/OpenEnv-v0": Capabilities(oracle=_INTEROP_ORACLE),
    "agentgym/Verifiers-v0": Capabilities(oracle=_INTEROP_ORACLE, reset_options=("index",)),
    "agentgym/SkyRL-v0": Capabilities(oracle=_INTEROP_ORACLE, reset_options=("index",)),
    "agentgym/ReasoningGym-v0": Capabilities(oracle=_INTEROP_ORACLE, splits=("train", "eval", "test"),
                                             reset_options=("split", "index")),
}

_REGISTERED: dict[str, str] = {}  # every id registered through agentgym.register, in order
_CAPABILITIES: dict[str, Capabilities] = {}


def register(id: str, entry_point: str, *, capabilities: Capabilities | None = None, **kwargs: Any) -> None:
    """Register an environment as ``namespace/Name-vN`` (``agentgym/...`` or your own namespace),
    with what it can do besides being played (``capabilities``; none by default)."""
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
    if capabilities is not None and not isinstance(capabilities, Capabilities):
        raise ConfigError(f"capabilities must be agentgym.Capabilities(...), got {type(capabilities).__name__}")
    existing = gym.registry.get(id)
    if existing is not None:
        if existing.entry_point == entry_point:
            _REGISTERED.setdefault(id, entry_point)
            if capabilities is not None:
                _CAPABILITIES[id] = capabilities
            return
        raise ConfigError(f"{id!r} is already registered with entry point {existing.entry_point!r}, not "
                          f"{entry_point!r}; pick another id (or bump the version: a different "
                          "environment is a new version)")
    gym.register(id=id, entry_point=entry_point, disable_env_checker=True, **kwargs)
    _REGISTERED[id] = entry_point
    if capabilities is not None:
        _CAPABILITIES[id] = capabilities


def capabilities(env_id: str) -> Capabilities:
    """What ``env_id`` declared at registration (nothing, for an id registered without any)."""
    return _CAPABILITIES.get(env_id, Capabilities())


def constructor_kwargs(env_id: str) -> list[str] | None:
    """The keyword arguments ``gym.make(env_id, ...)`` passes on to a registered env's constructor,
    by name (imports the env's module, builds nothing); None where it takes any (``**kwargs`` that
    do not end in :class:`~agentgym.env.ToolEnv`, which refuses unknown ones itself)."""
    spec = gym.registry[env_id]
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    if isinstance(creator, type) and issubclass(creator, ToolEnv):
        return _constructor_args(creator)
    try:
        params = inspect.signature(creator).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):  # no entry point, or one without a signature: nothing to check against
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]


def ids_with(capability: str) -> list[str]:
    """Every registered id whose ``capability`` (a :class:`Capabilities` field) is set, sorted."""
    return sorted(i for i, c in _CAPABILITIES.items() if getattr(c, capability))


def registered_ids() -> list[str]:
    """Every environment id registered through agentgym (the built-ins and your own), sorted;
    adapters such as Remote-v0 and the interop ids (ReasoningGym-v0, ...) are left out."""
    return sorted(k for k in _REGISTERED if k not in ADAPTERS and k not in INTEROP)


def check_env_id(env_id: str, known: Iterable[str] | None = None, what: str = "a registered environment") -> str:
    """``env_id`` if it is in ``known`` (default: every id gym.make knows), else a ConfigError
    with the closest id (``Math-v1`` -> ``agentgym/Math-v1``, ``agentgym/Maths-v0`` -> ...)."""
    pool = sorted(known) if known is not None else sorted(k for k in gym.registry if "/" in k)
    if env_id in pool:
        return env_id
    bare = {k.split("/", 1)[-1]: k for k in pool}
    guess = bare.get(env_id) or next(iter(difflib.get_close_matches(env_id, pool, n=1, cutoff=0.6)), None) \
        or bare.get(next(iter(difflib.get_close_matches(env_id, bare, n=1, cutoff=0.6)), ""))
    hint = f"; did you mean {guess!r}?" if guess else "."
    mine = [k for k in pool if k.startswith(NAMESPACE + "/")] or pool
    raise ConfigError(f"{env_id!r} is not {what}{hint} Known: {', '.join(mine)}")


def _register_builtin() -> None:
    # order_enforce=False: these envs check their own state and raise EnvStateError (part of
    # agentgym's error tree) for a step before reset; Gymnasium's wrapper would raise its own.
    for env_id, entry in {**BUILTIN, **ADAPTERS, **INTEROP}.items():
        register(env_id, entry, capabilities=BUILTIN_CAPABILITIES.get(env_id), order_enforce=False)
