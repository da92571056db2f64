"""The HTTP client side: episode admin calls and tools generated from the OpenAPI document.

:func:`tools_from_openapi` turns every operation of the served document into a
:class:`~agentgym.tools.Tool` whose parameters are the operation's path, query and body
fields; calling it sends one HTTP request through a shared ``httpx.Client`` (connection
reuse, per-call timeout). Whatever happens on the wire, the agent gets a readable string:
``HTTP 409 Conflict`` plus the JSON ``detail`` for refusals, a timeout or connection notice
for transport failures. Nothing raises into the environment.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from agentgym.environments.webapi.reward import CallRecord
from agentgym.environments.webapi.store_wire import ADMIN_PREFIX, EPISODE_HEADER, MAX_BODY_BYTES, Snapshot
from agentgym.errors import ServiceError
from agentgym.tools import Tool, ToolResult

__all__ = ["StoreClient", "tools_from_openapi"]

_METHODS = ("get", "post", "put", "patch", "delete")
_IDEMPOTENT = frozenset({"GET", "HEAD", "DELETE"})  # safe to send twice (RFC 9110, 9.2.2)
MAX_OBSERVATION_CHARS = 8000  # longer answers are cut with a note: a tool result is context, not a dump


class StoreClient:
    """One ``httpx.Client`` per environment; ``transport`` is injectable (``httpx.MockTransport``)."""

    def __init__(self, base_url: str, *, transport: httpx.BaseTransport | None = None,
                 timeout_s: float = 10.0) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.http = httpx.Client(base_url=base_url, transport=transport,
                                 timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)),
                                 limits=httpx.Limits(max_connections=4, max_keepalive_connections=4))

    def close(self) -> None:
        self.http.close()

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One request; a read whose kept-alive connection turns out dead is sent once more.

        Uvicorn may close an idle or failed connection between two calls; the next request on
        it then fails before any answer. A read (GET/HEAD/DELETE: idempotent) is safe to send
        again on a fresh connection; a write is not: the caller is told to check with a read.
        Timeouts are not retried (the request may still be running).
        """
        try:
            return self.http.request(method, path, **kw)
        except httpx.TimeoutException:
            raise
        except httpx.TransportError:
            if method.upper() not in _IDEMPOTENT:
                raise
        return self.http.request(method, path, **kw)

    # ------------------------------------------------------------------ admin (raise ServiceError)
    def _admin(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            r = self._send(method, path, **kw)
        except httpx.HTTPError as e:
            raise ServiceError(f"the WebAPI server at {self.base_url} did not answer {method} {path}: "
                               f"{type(e).__name__}: {e}") from e
        if r.status_code >= 400:
            raise ServiceError(f"the WebAPI server refused {method} {path}: HTTP {r.status_code} {r.text[:500]}")
        return r

    def openapi(self) -> dict[str, Any]:
        return self._admin("GET", "/openapi.json").json()

    def health(self, timeout: float | None = None) -> dict[str, Any]:
        kw = {} if timeout is None else {"timeout": timeout}
        return self._admin("GET", f"{ADMIN_PREFIX}/health", **kw).json()

    def database_down(self, timeout: float | None = None) -> bool:
        """True when the server answers that its database does not (health: HTTP 503)."""
        try:
            r = self._send("GET", f"{ADMIN_PREFIX}/health", **({} if timeout is None else {"timeout": timeout}))
        except httpx.HTTPError:
            return False  # the server itself does not answer: that is another fault
        return r.status_code == 503

    def create_episode(self, key: str, fixture: str = "train") -> None:
        """A fresh copy of ``fixture``'s store (a split: store_wire.FIXTURES) under ``key``."""
        self._admin("POST", f"{ADMIN_PREFIX}/episodes", json={"key": key, "fixture": fixture})

    def delete_episode(self, key: str) -> None:
        self._admin("DELETE", f"{ADMIN_PREFIX}/episodes/{key}")

    def snapshot(self, key: str) -> Snapshot:
        return self._admin("GET", f"{ADMIN_PREFIX}/episodes/{key}/snapshot").json()

    # ------------------------------------------------------------------ operations (never raise)
    def call(self, key: str, method: str, path: str, query: dict[str, Any] | None = None,
             body: dict[str, Any] | None = None) -> ToolResult:
        where = f"{method.upper()} {path}"
        content: bytes | None = None
        if body is not None:
            content = json.dumps(body).encode()
            if len(content) > MAX_BODY_BYTES:
                return ToolResult.failure("payload_too_large", f"{where}: the request body is {len(content)} "
                                          f"bytes; the limit is {MAX_BODY_BYTES}. Send less data.")
        headers = {EPISODE_HEADER: key}
        if content is not None:
            headers["content-type"] = "application/json"
        try:
            r = self._send(method.upper(), path, params=query or None, content=content, headers=headers)
        except httpx.TimeoutException:
            return ToolResult.failure("timeout", f"{where} got no answer within {self.timeout_s:g} s. "
                                      "A write may or may not have happened: check with a read before retrying.")
        except httpx.HTTPError as e:
            note = "" if method.upper() in _IDEMPOTENT else \
                " A write may or may not have happened: check with a read before retrying."
            return ToolResult.failure("service_unavailable", f"{where} failed: {type(e).__name__}: {e}.{note}")
        try:
            data: Any = r.json()
            text = json.dumps(data, ensure_ascii=False)
        except ValueError:
            text = r.text
        if r.status_code >= 400:
            try:
                phrase = HTTPStatus(r.status_code).phrase
            except ValueError:
                phrase = ""
            return ToolResult(f"HTTP {r.status_code} {phrase}\n{text}", ok=False, error=f"http_{r.status_code}")
        return ToolResult(f"HTTP {r.status_code}\n{text}")


class _HttpTool(Tool):
    """A Tool whose every answer is capped, refusals included.

    ``Tool`` caps what its function returns, but a schema refusal quotes the offending value
    in full (a 200 kB string comes back as a 200 kB observation); this caps that too.
    """

    def __call__(self, arguments: dict[str, Any]) -> ToolResult:
        result = super().__call__(arguments)
        if len(result.content) > self.max_output_chars:
            cut = len(result.content) - self.max_output_chars
            result.content = result.content[: self.max_output_chars] + f"\n[... {cut} characters cut]"
        return result


def _record(on_call: Callable[[CallRecord], None], op: str, args: dict[str, Any], result: ToolResult) -> None:
    """Hand the call and the API's answer (status, decoded JSON) to the episode's log."""
    head, _, body = result.content.partition("\n")
    status = int(head.split()[1]) if head.startswith("HTTP ") and head.split()[1].isdigit() else None
    try:
        data = json.loads(body) if status is not None else None
    except ValueError:
        data = None
    on_call(CallRecord(op, dict(args), status, data))


def _operation_tool(client_ref: Callable[[], tuple[StoreClient, str]], method: str, path: str,
                    op: dict[str, Any], on_call: Callable[[CallRecord], None] | None = None) -> Tool:
    props: dict[str, Any] = {}
    required: list[str] = []
    where: dict[str, str] = {}  # field -> "path" | "query" | "body"
    for p in op.get("parameters", []):
        schema = dict(p.get("schema", {}))
        if p.get("description"):
            schema["description"] = p["description"]
        props[p["name"]] = schema
        where[p["name"]] = p["in"]
        if p.get("required"):
            required.append(p["name"])
    body = (op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema"))
    if body:
        for name, schema in body.get("properties", {}).items():
            props[name] = schema
            where[name] = "body"
        required += [r for r in body.get("required", []) if r not in required]
    params = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    has_body = body is not None

    def call(**args: Any) -> ToolResult:
        client, key = client_ref()
        url = path
        for name, value in args.items():
            if where[name] == "path":
                url = url.replace("{" + name + "}", quote(str(value), safe=""))
        query = {n: v for n, v in args.items() if where[n] == "query"}
        payload = {n: v for n, v in args.items() if where[n] == "body"} if has_body else None
        result = client.call(key, method, url, query, payload)
        if on_call is not None:
            _record(on_call, op["operationId"], args, result)
        return result

    desc = op.get("summary") or op.get("description") or f"{method.upper()} {path}"
    return _HttpTool(op["operationId"], f"{desc} ({method.upper()} {path})", params, call,
                     max_output_chars=MAX_OBSERVATION_CHARS)


def tools_from_openapi(doc: dict[str, Any], client_ref: Callable[[], tuple[StoreClient, str]],
                       on_call: Callable[[CallRecord], None] | None = None) -> list[Tool]:
    """One tool per operation of an OpenAPI 3 document, in document order.

    ``client_ref`` returns the client and the episode key at call time, so one set of tools
    serves every episode of an environment; ``on_call`` receives every call that reached the
    API (what a refusal's evidence is looked for in).
    """
    tools = []
    for path, item in doc.get("paths", {}).items():
        for method in _METHODS:
            if method in item:
                tools.append(_operation_tool(client_ref, method, path, item[method], on_call))
    return tools
