"""agentgym.trainer: a compact PPO trainer for agents, token in / token out, built for GPT-OSS.

Loop side: ``train`` (the PPO loop: collect -> score -> advantages -> update -> sync),
``learner`` (policy, optimizer, reference, forward), ``rollouts`` (engine, envs, one step's
episodes), ``update`` (scoring, advantages, the PPO update), ``config`` (typed config, YAML
recipes in ``recipes/``), ``rollout`` (collection through an EnvPool with an engine), ``batch``
(trajectories -> tensors), ``sft`` (warm start on oracle demos), ``evaluation``,
``checkpoint``, ``metrics``, ``plots``, ``cli`` (``agentgym-train``). Model side: ``model``, ``attention``,
``logprobs``, ``ppo``, ``correction``, ``engines``, ``doctor``. Importing this package
imports nothing heavy; import the submodule you need.
"""
