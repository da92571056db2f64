"""Collecting episodes: engines, collectors, staleness, Ray workers, held-out problems, demonstrations.

``engines`` (the engine protocol, its factory and the ``hf``, ``openai-http`` and ``vllm``
engines), ``collector`` (episodes through an EnvPool with an engine), ``staleness`` (policy
versions of tokens, the asynchronous producer), ``ray_collector`` (environment workers on Ray),
``tp_collector`` (one collection per tensor-parallel group), ``heldout`` (the held-out problem
sets), ``demos`` (an env's teacher played through it). Imports ``model`` and ``algo``, never
the run.
"""
