"""Wire types shared by the WebAPI server and its client: headers, admin paths, constants.

This is the only module both sides of the process boundary import (besides the domain rules
in ``domain`` that the task generator replays). The server app (``app``) is never imported
by the client: the environment launches it by module path (``python -m ...webapi.serve``)
and reads its OpenAPI document over HTTP.
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = [
    "ADMIN_PREFIX",
    "EPISODE_HEADER",
    "FIXTURES",
    "FIXTURE_SEED",
    "GOAL_TABLES",
    "KEY_PATTERN",
    "MAX_BODY_BYTES",
    "READY_PREFIX",
    "SERVE_MODULE",
    "TODAY",
    "Snapshot",
    "error_body",
]

# Every request of an episode carries its key in this header; the key selects the
# episode's own database (a SQLite file, or a PostgreSQL schema).
EPISODE_HEADER = "X-Agentgym-Episode"
KEY_PATTERN = r"^[A-Za-z0-9_-]{8,64}$"

# Admin routes (not in the OpenAPI document, so never a tool):
#   GET  /_admin/health                      -> {"ok": true, "pid": int, "episodes": int, "storage": str}
#   POST /_admin/episodes        {"key": k, "fixture": "train"|"eval"}
#                                            -> 201 {"key": k}   (fresh copy of that fixture)
#   GET  /_admin/episodes/{key}/snapshot     -> Snapshot
#   DELETE /_admin/episodes/{key}            -> 204
ADMIN_PREFIX = "/_admin"

# The module the environment launches the server from. A string, never an import.
SERVE_MODULE = "agentgym.environments.webapi.serve"
# The line the server prints on stdout once it accepts connections: "<prefix> port=N pid=P".
READY_PREFIX = "AGENTGYM_WEBAPI_READY"

# The seeded fixtures episodes start from: one database per split (different customers,
# orders and products), so what a policy memorised of the train store says nothing about the
# eval store. Each split's tasks are generated over its own fixture.
FIXTURES: dict[str, int] = {"train": 20250615, "eval": 20251130}
FIXTURE_SEED = FIXTURES["train"]  # the default fixture of a server asked for one database
# The store's calendar is frozen: rules that depend on time (refund windows) use this date,
# so tasks and their goal states never drift with the wall clock.
TODAY = "2025-06-15"

# Requests larger than this are refused (client side before sending, server side with 413).
MAX_BODY_BYTES = 64 * 1024

# The tables a goal state is compared on (the session table is bookkeeping, not state).
GOAL_TABLES = ("customers", "products", "orders", "order_items", "payments")

# table -> canonical rows (lists of JSON scalars, sorted). See domain.snapshot.
Snapshot = dict[str, list[list[Any]]]


class ErrorBody(TypedDict):
    detail: Any


def error_body(detail: Any) -> ErrorBody:
    """The JSON body of every non-2xx answer: ``{"detail": ...}`` (string or list of problems)."""
    return {"detail": detail}
