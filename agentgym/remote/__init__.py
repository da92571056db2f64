"""Environments over the network: ``agentgym serve`` (server) and ``agentgym/Remote-v0`` (client).

* ``wire``: the messages and limits both sides share (the only module they both import);
* ``sessions`` / ``server``: the server (``agentgym serve ENV_ID``), never imported by the client;
* ``channels`` / ``client``: the client, ``gym.make("agentgym/Remote-v0", url=..., env_id=...)``.

Nothing here is imported by ``import agentgym``; ``gym.make`` imports the client when asked.
"""

from __future__ import annotations

__all__: list[str] = []
