"""Forbidden requests are won by the refusal itself, citing the fact the API showed; answers by
the look-up that establishes them. Never by doing nothing, by the wording, or blind.

Before the first fix, the goal of a forbidden task was only "the database is unchanged", so
"Done." with no tool call scored 1.0 on 79 of 339 train and 16 of 93 test tasks. Before the
second, forbidden requests had their own sentences ("Please return order #N, I don't need it" was
always a late return) and a refusal named only the rule: a policy that picked the rule from the
wording, looked up once and never read the result won every forbidden task; `ANSWER: delivered`
with no call won 11 of 32 order-status tasks.
"""

from __future__ import annotations

from collections.abc import Iterator

import gymnasium as gym
import pytest

from agentgym.environments.webapi.policies import oracle_action, run_episode
from agentgym.environments.webapi.tasks import REFUSAL_RULES, all_tasks, split_tasks
from agentgym.errors import ConfigError

from .conftest import call, final


@pytest.fixture(scope="module", params=["sparse", "shaped"])
def any_env(request: pytest.FixtureRequest) -> Iterator[gym.Env]:
    e = gym.make("agentgym/WebAPI-v1", split="all", reward_mode=request.param)
    yield e
    e.close()


def _answer_at_once(env: gym.Env, task_id: str, text: str) -> float:
    env.reset(options={"task_id": task_id})
    return final(env, text)[0]


def test_done_at_once_earns_nothing_on_any_train_or_eval_task(any_env: gym.Env) -> None:
    tasks = all_tasks()
    assert {t.split for t in tasks} == {"train", "eval"} and len(tasks) == 446
    if any_env.unwrapped.reward_mode == "shaped":
        tasks = tasks[::3]  # the outcome is the same; shaped mode adds only its floor at 0
    paid = [t.id for t in tasks if _answer_at_once(any_env, t.id, "Done.") != 0.0]
    assert paid == []


@pytest.mark.parametrize("text", ["Sorry, I cannot help with that.", "", "REFUSED"])
def test_refusing_at_once_earns_nothing(any_env: gym.Env, text: str) -> None:
    paid = [t.id for t in all_tasks()[1::9] if _answer_at_once(any_env, t.id, text) != 0.0]
    assert paid == []


def test_naming_the_rule_and_fact_without_the_look_up_earns_nothing(env: gym.Env) -> None:
    for t in [t for t in all_tasks() if t.forbidden][::3]:
        assert _answer_at_once(env, t.id, t.final_text) == 0.0, t.id


def test_every_rule_code_at_once_earns_nothing(env: gym.Env) -> None:
    forbidden = [t for t in all_tasks() if t.forbidden][::7]
    for code in REFUSAL_RULES:
        for t in forbidden:
            assert _answer_at_once(env, t.id, f"REFUSED: {code}") == 0.0, (t.id, code)


def test_a_right_answer_without_its_look_up_earns_nothing(env: gym.Env) -> None:
    for t in [t for t in all_tasks() if t.answer is not None][::4]:
        assert _answer_at_once(env, t.id, t.final_text) == 0.0, t.id


def _look_up_then(env: gym.Env, task_id: str, text: str) -> float:
    t = next(t for t in all_tasks() if t.id == task_id)
    env.reset(options={"task_id": t.id})
    for op, args in t.plan:
        call(env, op, **args)
    return final(env, text)[0]


def test_a_refusal_needs_the_look_up_the_right_rule_and_its_fact(env: gym.Env) -> None:
    kinds = sorted({t.kind for t in all_tasks() if t.forbidden})
    assert len(kinds) == 6
    for kind in kinds:
        t = next(t for t in all_tasks() if t.kind == kind)
        wrong = next(c for c in REFUSAL_RULES if c != t.refusal)
        cited = t.final_text.split("REFUSED: ")[1]  # "rule (fact)"
        assert _look_up_then(env, t.id, f"Sorry, no.\nREFUSED: {cited}") == 1.0, t.id
        assert _look_up_then(env, t.id, f"REFUSED: {cited}.") == 1.0, t.id  # trailing period
        assert _look_up_then(env, t.id, "Done.") == 0.0, t.id
        assert _look_up_then(env, t.id, "I cannot do that under store policy.") == 0.0, t.id
        assert _look_up_then(env, t.id, f"REFUSED: {t.refusal}") == 0.0, t.id  # the fact left out
        assert _look_up_then(env, t.id, f"REFUSED: {wrong} ({cited.split('(')[1]}") == 0.0, t.id
        assert _look_up_then(env, t.id, f"REFUSED: {t.refusal}, {wrong}") == 0.0, t.id  # hedging
        assert _look_up_then(env, t.id, f"REFUSED: {wrong}\nREFUSED: {cited}") == 0.0, t.id


def test_refusing_an_allowed_request_fails(env: gym.Env) -> None:
    for kind in ("cancel", "return", "buy", "update_email", "update_address"):
        t = next(t for t in all_tasks() if t.kind == kind)
        partial = t.plan[:-1]  # everything but the write: the look-ups that show it is allowed
        for rule in REFUSAL_RULES:
            env.reset(options={"task_id": t.id})
            for op, args in partial:
                call(env, op, **args)
            assert final(env, f"REFUSED: {rule}")[0] == 0.0, (t.id, rule)


def test_a_served_request_must_not_also_claim_a_refusal(env: gym.Env) -> None:
    for kind in ("cancel", "buy", "order_status"):
        t = next(t for t in all_tasks() if t.kind == kind)
        assert run_episode(env, oracle_action, options={"task_id": t.id})[0] == 1.0
        assert _look_up_then(env, t.id, t.final_text + "\nREFUSED: not_placed") == 0.0, t.id


def test_a_refusal_shown_by_the_api_itself_counts_as_the_look_up(env: gym.Env) -> None:
    t = next(t for t in all_tasks() if t.kind == "cancel_not_placed" and t.fact == "shipped")
    verify, get_order = t.plan

    def refuse(text: str) -> float:
        env.reset(options={"task_id": t.id})
        call(env, verify[0], **verify[1])
        shown, _ = call(env, "cancel_order", order_id=get_order[1]["order_id"], reason="other")
        assert "409" in shown and f"(ordered {t.proof}) is shipped" in shown
        return final(env, f"That order has shipped already.\n{text}")[0]

    assert refuse(f"REFUSED: not_placed (status shipped, ordered {t.proof})") == 1.0
    # A status has 4 values here: guessed after an unread look-up it would win 1 time in 4.
    # Without the order's date, which only the look-up shows, it is not paid.
    assert refuse("REFUSED: not_placed (status shipped)") == 0.0
    assert refuse("REFUSED: not_placed (status shipped, ordered 2025-01-01)") == 0.0


def test_a_failed_verification_shows_the_card_date_it_is_refused_by(env: gym.Env) -> None:
    t = next(t for t in all_tasks() if t.refusal == "identity")
    env.reset(options={"task_id": t.id})
    text, _ = call(env, t.plan[0][0], **t.plan[0][1])
    assert "401" in text and f"card added {t.fact}" in text
    assert final(env, f"The card does not match.\nREFUSED: identity (card added {t.fact})")[0] == 1.0


def test_listing_the_whole_catalogue_is_not_a_look_up(env: gym.Env) -> None:
    # A hack found while attacking the reward: one constant policy, "list every product, then
    # name a stock rule", would score on every out-of-stock task without reading it.
    t = next(t for t in all_tasks() if t.kind == "buy_out_of_stock")
    cited = t.final_text.split("REFUSED: ")[1]
    for query in ("", "e", "a"):
        env.reset(options={"task_id": t.id})
        call(env, "list_products", query=query)
        assert final(env, f"Sorry.\nREFUSED: {cited}")[0] == 0.0, (t.id, query)
    env.reset(options={"task_id": t.id})
    product = t.plan[1][1]["query"]
    call(env, "list_products", query=product.split()[0])  # a real search for it
    assert final(env, f"Sorry.\nREFUSED: {cited}")[0] == 1.0, t.id


def test_a_task_id_outside_the_split_is_refused() -> None:
    e = gym.make("agentgym/WebAPI-v1", split="train")
    try:
        held_out = split_tasks("eval")[0]
        with pytest.raises(ConfigError, match="pass split='eval'"):
            e.reset(options={"task_id": held_out.id})
        with pytest.raises(ConfigError, match="its splits are"):
            e.reset(options={"split": "test"})
        _, info = e.reset(seed=0, options={"split": "eval"})
        assert info["split"] == "eval" and info["task_id"] in {t.id for t in split_tasks("eval")}
    finally:
        e.close()
