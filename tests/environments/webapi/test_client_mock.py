"""Unit tests of the client side over ``httpx.MockTransport``: no server, no database.

The mock serves the real OpenAPI document and records requests, so these tests pin how
tools are generated from the document and how every kind of answer becomes an observation.
"""

from __future__ import annotations

import json

import gymnasium as gym
import httpx
import pytest

import agentgym  # noqa: F401
from agentgym.environments.webapi.spec import openapi_document
from agentgym.environments.webapi.store_client import StoreClient, tools_from_openapi
from agentgym.environments.webapi.store_wire import EPISODE_HEADER, MAX_BODY_BYTES
from agentgym.environments.webapi.tasks import all_tasks, base_snapshot
from agentgym.errors import ConfigError

from .conftest import call, final


class FakeStore:
    """A MockTransport handler: the served document, admin routes, canned operation answers."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.episodes: set[str] = set()
        self.fail_with: Exception | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path, method = request.url.path, request.method
        if self.fail_with is not None and not path.startswith("/_admin") and path != "/openapi.json":
            raise self.fail_with
        if path == "/openapi.json":
            return httpx.Response(200, json=openapi_document())
        if path == "/_admin/episodes" and method == "POST":
            self.episodes.add(json.loads(request.content)["key"])
            return httpx.Response(201, json={})
        if path.startswith("/_admin/episodes/"):
            key = path.split("/")[3]
            if path.endswith("/snapshot"):
                return httpx.Response(200, json=base_snapshot())
            self.episodes.discard(key)
            return httpx.Response(204)
        if path == "/orders/404":
            return httpx.Response(404, json={"detail": "order 404 not found"})
        if path == "/orders/7/cancel":
            return httpx.Response(409, json={"detail": "order 7 is shipped; only placed orders can be cancelled"})
        return httpx.Response(200, json={"echo": path, "query": dict(request.url.params),
                                         "body": json.loads(request.content) if request.content else None})


@pytest.fixture()
def fake() -> FakeStore:
    return FakeStore()


@pytest.fixture()
def tools(fake: FakeStore) -> dict:
    client = StoreClient("http://store.test", transport=httpx.MockTransport(fake), timeout_s=2.0)
    return {t.name: t for t in tools_from_openapi(client.openapi(), lambda: (client, "episode-key-1"))}


def test_one_tool_per_operation_with_path_query_and_body_fields(tools: dict) -> None:
    doc = openapi_document()
    assert set(tools) == {op["operationId"] for item in doc["paths"].values() for op in item.values()}
    cancel = tools["cancel_order"].parameters
    assert set(cancel["properties"]) == {"order_id", "reason"} and set(cancel["required"]) == {"order_id", "reason"}
    assert cancel["properties"]["order_id"]["type"] == "integer"
    orders = tools["list_customer_orders"].parameters
    assert orders["required"] == ["customer_id"] and "status" in orders["properties"]
    create = tools["create_order"].parameters
    assert create["properties"]["items"]["items"]["required"] == ["product_id", "quantity"]
    assert "POST /orders" in tools["create_order"].description


def test_tool_calls_become_requests(tools: dict, fake: FakeStore) -> None:
    out = tools["list_customer_orders"]({"customer_id": 3, "status": "placed"})
    assert out.ok and out.content.startswith("HTTP 200")
    req = fake.requests[-1]
    assert (req.method, req.url.path, dict(req.url.params)) == ("GET", "/customers/3/orders", {"status": "placed"})
    assert req.headers[EPISODE_HEADER] == "episode-key-1"
    tools["cancel_order"]({"order_id": 12, "reason": "late"})
    req = fake.requests[-1]
    assert (req.method, req.url.path, json.loads(req.content)) == ("POST", "/orders/12/cancel", {"reason": "late"})


def test_refusals_are_readable_observations(tools: dict) -> None:
    out = tools["get_order"]({"order_id": 404})
    assert not out.ok and out.error == "http_404"
    assert out.content.splitlines()[0] == "HTTP 404 Not Found" and "order 404 not found" in out.content
    out = tools["cancel_order"]({"order_id": 7, "reason": "other"})
    assert out.error == "http_409" and "only placed orders" in out.content


def test_wrong_argument_types_are_caught_before_sending(tools: dict, fake: FakeStore) -> None:
    n = len(fake.requests)
    out = tools["get_order"]({"order_id": "seven"})
    assert not out.ok and out.error == "bad_arguments" and "order_id" in out.content
    out = tools["cancel_order"]({"order_id": 1, "reason": "bored"})
    assert out.error == "bad_arguments" and "reason" in out.content
    out = tools["get_order"]({"order_id": 1, "extra": True})
    assert out.error == "bad_arguments"
    assert len(fake.requests) == n


def test_huge_payload_is_refused_client_side(tools: dict, fake: FakeStore) -> None:
    n = len(fake.requests)
    items = [{"product_id": i + 1, "quantity": 1} for i in range(10)]
    out = tools["create_order"]({"customer_id": 1, "items": items, "shipping_address": "x" * 200})
    assert out.ok  # a normal body goes out
    client = StoreClient("http://store.test", transport=httpx.MockTransport(fake))
    out = client.call("k" * 10, "POST", "/orders", body={"blob": "x" * (MAX_BODY_BYTES + 1)})
    assert out.error == "payload_too_large" and str(MAX_BODY_BYTES) in out.content
    assert len(fake.requests) == n + 1


@pytest.mark.parametrize(("exc", "code", "words"), [
    (httpx.ReadTimeout("timed out"), "timeout", "no answer within"),
    (httpx.ConnectError("connection refused"), "service_unavailable", "ConnectError"),
    (httpx.RemoteProtocolError("server disconnected"), "service_unavailable", "disconnected"),
])
def test_transport_failures_are_observations(tools: dict, fake: FakeStore, exc: Exception, code: str, words: str) -> None:
    fake.fail_with = exc
    out = tools["get_product"]({"product_id": 1})
    assert not out.ok and out.error == code and words in out.content


def test_env_over_mock_transport(fake: FakeStore) -> None:
    env = gym.make("agentgym/WebAPI-v1", transport=httpx.MockTransport(fake), split="all")
    try:
        forbidden = next(t for t in all_tasks() if t.forbidden)
        env.reset(seed=0, options={"task_id": forbidden.id})
        key = env.unwrapped.episode_key
        assert fake.episodes == {key}
        text, info = call(env, "get_order", order_id=404)
        assert "HTTP 404 Not Found" in text and info["tool_result"]["error"] == "http_404"
        text, info = call(env, "no_such_endpoint", x=1)
        assert "unknown_tool" in text and info["reward_components"].get("malformed") == 1.0
        # The mock's final state is the fixture, but a forbidden task is won only by naming the
        # rule after a look-up that shows it: a vague refusal earns nothing...
        reward, info = final(env, "I cannot do that.")
        assert reward == 0.0 and info["reward_components"]["forbidden_writes"] == 0.0
        # ...wrong for an update task, with no goal row reached.
        update = next(t for t in all_tasks() if t.kind == "cancel")
        env.reset(seed=0, options={"task_id": update.id})
        assert key not in fake.episodes  # the previous episode's database was dropped
        reward, info = final(env, "Done.")
        assert reward == 0.0 and info["reward_components"]["progress"] == 0.0
    finally:
        env.close()
    assert fake.episodes == set()


def test_bad_options_raise_config_errors(fake: FakeStore) -> None:
    with pytest.raises(ConfigError, match="split"):
        gym.make("agentgym/WebAPI-v1", split="dev", transport=httpx.MockTransport(fake))
    with pytest.raises(ConfigError, match="postgresql"):
        gym.make("agentgym/WebAPI-v1", database_url="mysql://x")
    env = gym.make("agentgym/WebAPI-v1", transport=httpx.MockTransport(fake))
    try:
        with pytest.raises(ConfigError, match="did you mean"):
            env.reset(options={"task_id": "cancel-9999"})
        with pytest.raises(ConfigError, match="index"):
            env.reset(options={"index": 10_000})
    finally:
        env.close()


def test_a_dropped_connection_is_retried_once_for_reads_never_for_writes() -> None:
    import httpx

    from agentgym.environments.webapi.store_client import StoreClient

    seen: list[str] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if len(seen) % 2 == 1:  # every other request finds the kept-alive connection reset
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx.Response(200, json={"ok": True})

    client = StoreClient("http://webapi.invalid", transport=httpx.MockTransport(flaky))
    got = client.call("k" * 16, "get", "/orders/1")
    assert got.ok and got.content.startswith("HTTP 200") and seen == ["GET", "GET"]
    seen.clear()
    got = client.call("k" * 16, "post", "/orders/1/cancel", body={"reason": "other"})
    assert not got.ok and got.error == "service_unavailable" and seen == ["POST"]  # a write may have happened
    assert "check with a read" in got.content
    seen.clear()
    assert client.snapshot("k" * 16) == {"ok": True} and seen == ["GET", "GET"]  # admin reads too
    client.close()
