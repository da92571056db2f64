"""Integration tests against the real uvicorn server and real per-episode SQLite databases."""

from __future__ import annotations

import gymnasium as gym
import httpx
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.environments.webapi.launcher import ServerConfig, ServerProcess
from agentgym.environments.webapi.policies import noop_action, oracle_action, run_episode
from agentgym.environments.webapi.store_wire import EPISODE_HEADER, MAX_BODY_BYTES
from agentgym.environments.webapi.tasks import all_tasks

from .conftest import call, final


def _task(kind: str, i: int = 0):
    return [t for t in all_tasks() if t.kind == kind][i]


def test_check_env() -> None:
    env = gym.make("agentgym/WebAPI-v1")
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_oracle_scores_one_on_a_sample_of_every_kind(env: gym.Env) -> None:
    tasks = all_tasks()
    kinds = {t.kind for t in tasks}
    sample = [t for k in sorted(kinds) for t in [t for t in tasks if t.kind == k][:4]]
    for t in sample:
        reward, info = run_episode(env, oracle_action, options={"task_id": t.id})
        assert reward == 1.0, (t.id, info)


@pytest.mark.slow
def test_oracle_scores_one_on_every_task(env: gym.Env) -> None:
    failed = [t.id for t in all_tasks() if run_episode(env, oracle_action, options={"task_id": t.id})[0] != 1.0]
    assert failed == []


def test_doing_nothing_never_wins(env: gym.Env) -> None:
    for t in all_tasks()[::6]:
        reward, _ = run_episode(env, noop_action, options={"task_id": t.id})
        assert reward == 0.0, t.id


def test_same_seed_same_task_and_prompt(env: gym.Env) -> None:
    a, ia = env.reset(seed=123)
    b, ib = env.reset(seed=123)
    assert ia["task_id"] == ib["task_id"] and np.array_equal(a, b)


def test_refusals_and_bad_calls_are_observations_and_the_episode_continues(env: gym.Env) -> None:
    t = next(t for t in all_tasks() if t.kind == "cancel_not_placed" and t.fact == "shipped")
    env.reset(options={"task_id": t.id})
    email, last4 = t.plan[0][1]["email"], t.plan[0][1]["card_last4"]
    order_id = t.plan[1][1]["order_id"]
    text, _ = call(env, "get_order", order_id=99999)
    assert "HTTP 404 Not Found" in text and "order 99999 not found" in text
    text, _ = call(env, "cancel_order", order_id=order_id, reason="other")
    assert "HTTP 403" in text and "verify_customer" in text
    text, _ = call(env, "verify_customer", email=email, card_last4="12345")
    assert "bad_arguments" in text and "card_last4" in text
    text, _ = call(env, "verify_customer", email=email, card_last4=last4)
    assert "HTTP 200" in text and '"verified": true' in text
    text, _ = call(env, "cancel_order", order_id=order_id, reason="other")
    assert "HTTP 409 Conflict" in text and "only placed orders can be cancelled" in text
    text, info = call(env, "get_order", order_id="seven")
    assert "bad_arguments" in text and info["reward_components"]["malformed"] == 1.0
    text, info = call(env, "delete_everything")
    assert "unknown_tool" in text and "get_order" in text
    # A call whose JSON does not parse, and plain garbage tokens.
    u = env.unwrapped
    bad = u.codec.tool_call_ids("get_order", {"order_id": 1})
    cut = bad.index(u.codec.MESSAGE) + 1
    obs, _, term, trunc, info = env.step(np.asarray(bad[:cut] + u.tokenizer.encode("{order_id: 1") + [u.codec.CALL]))
    assert not term and not trunc and "bad_json" in u.tokenizer.decode(obs.tolist())
    obs, _, term, trunc, info = env.step(np.asarray(u.tokenizer.encode("lorem ipsum")))
    assert not term and not trunc and info["reward_components"]["malformed"] == 1.0
    reward, info = final(env, f"Order already shipped: it cannot be cancelled.\nREFUSED: not_placed (shipped, ordered {t.proof})")
    assert reward == 1.0  # nothing changed; the refusal names the rule, status and date the 409 showed
    assert info["counts"]["malformed"] >= 4


def test_raw_http_validation_errors_are_readable(env: gym.Env) -> None:
    env.reset(seed=0)
    u = env.unwrapped
    http, key = u.client.http, u.episode_key
    h = {EPISODE_HEADER: key}
    r = http.get("/orders/seven", headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["order_id"]
    r = http.post("/orders/1/cancel", headers=h, json={"reason": 5})
    assert r.status_code == 422 and "reason" in r.json()["detail"][0]["loc"]
    r = http.post("/orders/1/cancel", headers={**h, "content-type": "application/json"}, content=b"{nope")
    assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]
    r = http.post("/orders", headers=h, content=b"x" * (MAX_BODY_BYTES + 10))
    assert r.status_code == 413
    r = http.get("/orders/1")
    assert r.status_code == 400 and EPISODE_HEADER in r.json()["detail"]
    r = http.get("/orders/1", headers={EPISODE_HEADER: "no-such-episode"})
    assert r.status_code == 404 and "unknown episode" in r.json()["detail"]
    r = http.get("/nowhere", headers=h)
    assert r.status_code == 404 and "openapi" in r.json()["detail"]
    r = http.get("/products", headers=h, params={"colour": "red"})
    assert r.status_code == 422


def test_huge_tool_arguments_are_refused() -> None:
    env = gym.make("agentgym/WebAPI-v1", split="all", max_action_tokens=300_000, max_tokens=400_000)
    try:
        env.reset(options={"task_id": _task("order_address").id})
        text, _ = call(env, "update_order_address", order_id=1, shipping_address="x" * 200_000)
        assert "bad_arguments" in text and "shipping_address" in text
        text, _ = call(env, "list_products", query="y" * 100_000)
        assert "bad_arguments" in text
        text, _ = call(env, "get_order", order_id=1)
        assert "HTTP 200" in text
    finally:
        env.close()


def test_two_envs_share_one_server_but_never_a_database(env: gym.Env) -> None:
    t = _task("cancel")
    other = gym.make("agentgym/WebAPI-v1", split="all")
    try:
        env.reset(options={"task_id": t.id})
        other.reset(options={"task_id": t.id})
        assert env.unwrapped.server is other.unwrapped.server
        assert env.unwrapped.episode_key != other.unwrapped.episode_key
        for op, args in t.plan:
            call(env, op, **args)
        order_id = t.plan[-1][1]["order_id"]
        text, _ = call(other, "get_order", order_id=order_id)
        assert '"status": "placed"' in text
        assert final(env, "Done.")[0] == 1.0
        assert final(other, "Done.")[0] == 0.0  # nothing was cancelled in this episode
    finally:
        other.close()


def test_shaped_reward_pays_progress_and_charges_forbidden_writes() -> None:
    env = gym.make("agentgym/WebAPI-v1", split="all", reward_mode="shaped")
    try:
        t = _task("move_and_cancel")
        env.reset(options={"task_id": t.id})
        for op, args in t.plan[:2]:  # verify + address change, but no cancellation
            call(env, op, **args)
        reward, info = final(env, "Done.")
        comps = info["reward_components"]
        assert comps["outcome"] == 0.0 and 0.0 < comps["progress"] < 1.0 and comps["forbidden_writes"] == 0.0
        # a failed episode earns its progress only: format and turn terms pay on success alone
        assert reward == pytest.approx(0.5 * comps["progress"])
        late = _task("return_late")
        env.reset(options={"task_id": late.id})
        for op, args in late.plan:
            call(env, op, **args)
        call(env, "return_order", order_id=late.plan[1][1]["order_id"], reason="other")  # breaks policy
        reward, info = final(env, "Returned.")
        comps = info["reward_components"]
        # the forbidden write is reported, and the episode's shaped total is floored at 0: it never
        # earns less than doing nothing would
        assert comps["outcome"] == 0.0 and comps["forbidden_writes"] >= 1.0 and reward == 0.0
    finally:
        env.close()


def test_server_url_joins_a_running_server() -> None:
    server = ServerProcess(ServerConfig())
    url = server.ensure()
    try:
        env = gym.make("agentgym/WebAPI-v1", server_url=url, split="all")
        try:
            reward, _ = run_episode(env, oracle_action, options={"task_id": _task("buy").id})
            assert reward == 1.0 and env.unwrapped.server is None
            assert httpx.get(f"{url}/_admin/health").json()["episodes"] == 1
        finally:
            env.close()
        assert httpx.get(f"{url}/_admin/health").json()["episodes"] == 0
        assert server.alive()  # not ours to stop
    finally:
        server.stop()


def test_ids_beyond_the_database_range_are_refused_readably_and_the_next_call_works(env: gym.Env) -> None:
    env.reset(options={"task_id": _task("cancel").id})
    text, _ = call(env, "get_order", order_id=10**30)
    assert "bad_arguments" in text and "order_id" in text, text  # refused before sending
    u = env.unwrapped
    http, h = u.client.http, {EPISODE_HEADER: u.episode_key}
    for path in (f"/orders/{10**30}", f"/customers/{2**63}/orders", f"/products/{2**31}",
                 f"/orders/{10**30}/cancellation-quote"):
        r = http.get(path, headers=h)
        assert r.status_code == 422 and "maximum" in str(r.json()["detail"]), (path, r.text)
    r = http.post("/orders", headers=h, json={"customer_id": 1, "items": [{"product_id": 10**30, "quantity": 1}]})
    assert r.status_code == 422, r.text
    for _ in range(3):  # the connection is intact: no reset on the calls that follow
        text, _ = call(env, "get_order", order_id=1)
        assert text.split("<|message|>")[1].startswith("HTTP 200"), text
