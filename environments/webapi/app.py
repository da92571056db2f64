"""The store's ASGI application (Starlette). Server side only: the client never imports it.

Every operation of ``spec.OPERATIONS`` becomes a route: the handler finds the episode's
database from the ``X-Agentgym-Episode`` header, validates path, query and body fields
against the operation's JSON schema (422 with one readable problem per field), runs the
domain rule in one transaction (on the event loop for SQLite, whose queries are cheaper than
a thread hop; in a worker thread for PostgreSQL), and answers JSON. Refusals are
``{"detail": ...}`` with a fitting status (401, 403, 404, 409, 413, 422).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any

from jsonschema import Draft202012Validator
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentgym.environments.webapi.db import snapshot
from agentgym.environments.webapi.domain import OPERATIONS as RULES
from agentgym.environments.webapi.domain import DomainError
from agentgym.environments.webapi.spec import OPERATIONS, SLEEP_OPERATION, Operation, openapi_document
from agentgym.environments.webapi.storage import Store, StoreUnavailable, UnknownEpisode
from agentgym.environments.webapi.store_wire import (
    ADMIN_PREFIX,
    EPISODE_HEADER,
    KEY_PATTERN,
    MAX_BODY_BYTES,
    error_body,
)

__all__ = ["create_app"]

Handler = Callable[[Request], Awaitable[Response]]
_KEY = re.compile(KEY_PATTERN)


def _err(status: int, detail: Any) -> JSONResponse:
    return JSONResponse(error_body(detail), status_code=status)


def _coerce(value: str, schema: dict[str, Any]) -> Any:
    """Path and query values arrive as text; the schema says what they should be."""
    t = schema.get("type")
    try:
        if t == "integer":
            return int(value)
        if t == "number":
            return float(value)
    except ValueError:
        return value  # left as text: the schema check below reports the type error
    return value


async def _read_json(request: Request) -> tuple[dict[str, Any] | None, JSONResponse | None]:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        return None, _err(413, f"request body of {length} bytes is over the {MAX_BODY_BYTES}-byte limit")
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        return None, _err(413, f"request body of {len(raw)} bytes is over the {MAX_BODY_BYTES}-byte limit")
    if not raw:
        return {}, None
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, _err(422, f"the body is not valid JSON: {e}")
    if not isinstance(body, dict):
        return None, _err(422, f"the body must be a JSON object, got {type(body).__name__}")
    return body, None


async def _call(store: Store, fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args) if store.inline else await run_in_threadpool(fn, *args)


def _operation_handler(op: Operation, store: Store) -> Handler:
    validator = Draft202012Validator(op.param_schema())
    rule = RULES[op.operation_id]

    async def handle(request: Request) -> Response:
        key = request.headers.get(EPISODE_HEADER)
        if not key:
            return _err(400, f"missing the {EPISODE_HEADER} header that selects the episode")
        if not store.has(key):
            return _err(404, f"unknown episode {key!r}: create it with POST {ADMIN_PREFIX}/episodes")
        args: dict[str, Any] = {n: _coerce(v, op.path_params[n]) for n, v in request.path_params.items()}
        for name, value in request.query_params.items():
            if name in op.query:
                args[name] = _coerce(value, op.query[name])
            else:
                return _err(422, [{"loc": ["query", name], "msg": f"unknown query parameter; "
                                                                 f"known: {sorted(op.query)}"}])
        if op.body is not None:
            body, problem = await _read_json(request)
            if problem is not None:
                return problem
            assert body is not None
            clash = set(body) & set(args)
            if clash:
                return _err(422, f"fields {sorted(clash)} belong in the path or query, not the body")
            args.update(body)
        errors = sorted(validator.iter_errors(args), key=lambda e: list(e.path))
        if errors:
            return _err(422, [{"loc": [str(p) for p in e.path] or ["body"], "msg": e.message}
                              for e in errors[:8]])

        def run() -> Any:
            with store.transaction(key) as tx:
                return rule(tx, **args)

        try:
            return JSONResponse(await _call(store, run))
        except DomainError as e:
            return _err(e.status, e.detail)
        except UnknownEpisode:
            return _err(404, f"episode {key!r} was deleted")
    return handle


def create_app(store: Store, test_endpoints: bool = False) -> Starlette:
    ops = OPERATIONS + ([SLEEP_OPERATION] if test_endpoints else [])
    doc = openapi_document(ops)
    routes = [Route(op.path, _operation_handler(op, store), methods=[op.method])
              for op in OPERATIONS]

    async def sleep(request: Request) -> Response:
        try:
            seconds = float(request.query_params.get("seconds", "0"))
        except ValueError:
            return _err(422, [{"loc": ["query", "seconds"], "msg": "must be a number"}])
        await asyncio.sleep(min(max(seconds, 0.0), 60.0))
        return JSONResponse({"slept": seconds})

    if test_endpoints:
        routes.append(Route(SLEEP_OPERATION.path, sleep, methods=["GET"]))

    async def openapi(request: Request) -> Response:
        return JSONResponse(doc)

    async def health(request: Request) -> Response:
        # The database is part of the server's health: a server whose database is down cannot
        # run an episode, and its in-flight episodes are infrastructure faults.
        try:
            await _call(store, store.ping)
        except StoreUnavailable as e:
            return JSONResponse({"ok": False, "pid": os.getpid(), "detail": str(e)}, status_code=503)
        return JSONResponse({"ok": True, "pid": os.getpid(), "episodes": store.count(),
                             "storage": store.location})

    async def create_episode(request: Request) -> Response:
        body, problem = await _read_json(request)
        if problem is not None:
            return problem
        key = (body or {}).get("key")
        if not isinstance(key, str) or not _KEY.match(key):
            return _err(422, f"key must match {KEY_PATTERN}, got {key!r}")
        fixture = (body or {}).get("fixture", "train")
        if fixture not in store.fixtures:
            return _err(422, f"fixture must be one of {sorted(store.fixtures)}, got {fixture!r}")
        await _call(store, store.create, key, fixture)
        return JSONResponse({"key": key}, status_code=201)

    async def episode_snapshot(request: Request) -> Response:
        key = request.path_params["key"]

        def run() -> Any:
            with store.transaction(key) as tx:
                return snapshot(tx)
        try:
            return JSONResponse(await _call(store, run))
        except UnknownEpisode:
            return _err(404, f"unknown episode {key!r}")

    async def delete_episode(request: Request) -> Response:
        try:
            await _call(store, store.drop, request.path_params["key"])
        except UnknownEpisode:
            return _err(404, f"unknown episode {request.path_params['key']!r}")
        return Response(status_code=204)

    routes += [
        Route("/openapi.json", openapi, methods=["GET"]),
        Route(f"{ADMIN_PREFIX}/health", health, methods=["GET"]),
        Route(f"{ADMIN_PREFIX}/episodes", create_episode, methods=["POST"]),
        Route(f"{ADMIN_PREFIX}/episodes/{{key}}/snapshot", episode_snapshot, methods=["GET"]),
        Route(f"{ADMIN_PREFIX}/episodes/{{key}}", delete_episode, methods=["DELETE"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _err(404, f"no route {request.method} {request.url.path}; see /openapi.json")

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        return _err(405, f"{request.method} is not allowed on {request.url.path}; see /openapi.json")

    async def server_error(request: Request, exc: Exception) -> Response:
        return _err(500, f"internal error: {type(exc).__name__}: {exc}")

    async def storage_down(request: Request, exc: Exception) -> Response:
        return _err(503, f"storage unavailable: {exc}")

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: method_not_allowed,
                                                         StoreUnavailable: storage_down, Exception: server_error})
