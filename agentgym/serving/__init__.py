"""Serving: agentgym's servers, and the client of its environment server.

``agentgym serve env ENV_ID`` (an environment over the network) and ``agentgym serve model``
(a policy behind an OpenAI-compatible API); :mod:`agentgym.serving.cli` parses both.

* ``env_wire``: the messages and limits the env server and its client share (the only module
  both sides import);
* ``env_sessions`` / ``env_server``: the env server, never imported by the client;
* ``env_channels`` / ``env_client``: the client, ``gym.make("agentgym/Remote-v0", url=..., env_id=...)``;
* ``guard`` / ``transport``: what both servers share: who is let in (a bearer token off
  loopback, Host/Origin/content-type checks) and the transport's bounds (the port bound before
  anything loads, uvicorn's timeouts, bounded request bodies);
* ``env_launch``: start ``agentgym serve env`` as a child process (tests, benchmarks, scripts);
* ``chat_server``: chat completions with tool calling over any token engine (the format is
  :mod:`agentgym.chat.chat_wire`, shared with the client, :class:`agentgym.chat.OpenAIChatPolicy`);
* ``model_server``: token-id completions, chat completions and weight reload, backed by the
  trainer's ``hf`` engine (the format is :mod:`agentgym.trainer.rollout.engines.model_wire`, shared
  with the trainer's ``openai-http`` engine). The only module here that imports the trainer.

Layering: the core never imports this package (``gym.make`` reaches the client through the
registry's entry-point string, the ``agentgym`` command through a module name); this package
imports the core, and only ``model_server`` imports the trainer.
"""

from __future__ import annotations

__all__: list[str] = []
