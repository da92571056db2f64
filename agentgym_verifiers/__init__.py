"""verifiers' name for agentgym's environments: ``vf-eval agentgym-verifiers --env.taskset.env agentgym/Math-v1``.

verifiers resolves a taskset id to a top-level module exporting its ``Taskset`` (and ``Env``)
through ``__all__`` (``agentgym-verifiers`` -> ``agentgym_verifiers``); a dotted module path is
not accepted as an id. The implementation is :mod:`agentgym.environments.interop.verifiers_export`.
"""

from agentgym.environments.interop.verifiers_export import AgentGymEnv, AgentGymTaskset

__all__ = ["AgentGymEnv", "AgentGymTaskset"]
