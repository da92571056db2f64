"""agentgym.trainer: a compact PPO trainer for agents, token in / token out, built for GPT-OSS.

The package is in wings that import one way (an import inside a function counts):

    leaves  <  algo  <  model  <  rollout  <  the run

* leaves: ``metrics``, ``health``, ``plots``, ``stats``, ``curriculum``, ``distributed``,
  ``memtrack``, ``engine_names``: import nothing of the trainer but other leaves.
* ``algo/``: the pure math (``ppo``, ``correction``, ``correction_modes``, ``episode``, ``batch``,
  ``imitation``, ``optim``); ``episode`` is the record every collector returns.
* ``model/``: the policy (``gptoss``, ``attention``, ``logprobs``, ``mxfp4``, ``routing``,
  ``lora``, ``sharding``, ``weights``, ``files``).
* ``rollout/``: collection (``engines/``, ``collector``, ``staleness``, ``ray_collector``,
  ``tp_collector``, ``heldout``, ``demos``).
* the run, at the top: ``cli`` (``agentgym-train``), ``train`` (the PPO loop: collect -> score ->
  advantages -> update -> sync), ``episodes`` (one step's episodes from the engine and envs),
  ``update``, ``imitation``, ``learner``, ``sft``, ``checkpoint``, ``config`` (typed config, YAML
  recipes in ``recipes/``), ``evaluation``, ``controls``, ``plan``, ``doctor``, ``preflight``,
  ``preempt``.

A wing imports only the wings to its left; ``tests/test_import_rules.py`` checks every import.
Importing this package imports nothing heavy; import the submodule you need.
"""
