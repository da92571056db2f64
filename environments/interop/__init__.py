"""Environments from other hubs as agentgym envs, and agentgym's envs for other hubs' code.

Import (each a registered id; the hub's package is imported only when the env is made):

* ``agentgym/ReasoningGym-v0``: any reasoning-gym dataset (:mod:`.reasoning_gym`);
* ``agentgym/Verifiers-v0``: a verifiers taskset or multi-turn ``vf.Env``, object or installed package
  (:mod:`.verifiers_import`; an env's episode is driven by :mod:`.verifiers_episode`);
* ``agentgym/OpenEnv-v0``: an OpenEnv environment server, through OpenEnv's client (:mod:`.openenv_import`);
* ``agentgym/SkyRL-v0``: a SkyRL-gym text env (:mod:`.skyrl`).

Export: :mod:`.verifiers_export` (any registered agentgym env as a verifiers taskset and env, ``vf-eval
agentgym-verifiers``; its tools served by :mod:`.verifiers_tools`) and :mod:`.openenv_export` (an
agentgym env as an OpenEnv environment server).

Every adapter states its :class:`~.base.Provenance` (replayable or not, oracle or not, and why);
``agentgym validate`` and replay verification read it. Install the hubs with
``pip install 'agentgym-suite[interop]'``.
"""

from __future__ import annotations

__all__: list[str] = []
