"""agentgym.environments.webapi: ``agentgym/WebAPI-v1``, tool calls against a real HTTP store API.

Layout (server, client and wire types kept apart):

* ``store_wire``: constants both sides share (episode header, admin paths, limits, fixture seed);
* server side: ``app`` (Starlette routes), ``serve`` (the uvicorn process), ``storage``
  (per-episode SQLite files or PostgreSQL schemas), ``spec`` (operations -> OpenAPI);
* shared rules: ``db`` (schema, transactions, canonical snapshots), ``fixture`` (seeded data),
  ``domain`` (business rules, replayed offline to compute goal states);
* client side: ``launcher`` (shared, refcounted server process), ``store_client`` (httpx tools from
  the served OpenAPI document), ``tasks``, ``reward``, ``env``, ``policies``.
"""


from __future__ import annotations

from typing import Any

__all__ = ["WebAPIEnv", "noop_action", "oracle_action", "run_episode"]


def __getattr__(name: str) -> Any:
    # Lazy: the server process imports this package too and must not pull in the client side.
    if name == "WebAPIEnv":
        from agentgym.environments.webapi.env import WebAPIEnv
        return WebAPIEnv
    if name in ("noop_action", "oracle_action", "run_episode"):
        from agentgym.environments.webapi import policies
        return getattr(policies, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
