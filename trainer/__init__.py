"""agentgym.trainer: a compact PPO trainer for agents, token in / token out, built for GPT-OSS.

Loop side: ``config`` (typed config, YAML recipes in ``recipes/``), ``rollout`` (collection
through an EnvPool with an engine), ``batch`` (trajectories -> tensors, shared-prefix
forward), ``sft`` (warm start on oracle demos), ``train`` (the PPO loop), ``checkpoint``,
``metrics``, ``plots``, ``cli`` (``agentgym-train``). Model side: ``model``, ``attention``,
``logprobs``, ``ppo``, ``correction``, ``engines``, ``doctor``. Importing this package
imports nothing heavy; import the submodule you need.
"""
