"""Credit only for what the policy read, and an eval store of its own.

Before: every not_owner task's owner was the asker's id + 1 (``REFUSED: not_owner (customer k+1)``
after an unread look-up won 15 of 15); ``ANSWER: delivered`` after an unread ``get_order`` won 15
of 40 status questions; a guessed status won 10 of 38 not_placed tasks; ``stock = asked - 1`` won 5
of 12 out_of_stock; and with one database for both splits, a policy that memorised the oracle's
train answers won 25 of 52 eval refusals and questions without reading an eval tool result.
"""

from __future__ import annotations

import gymnasium as gym

from agentgym.environments.hacks import hacks_for, play
from agentgym.environments.webapi.reward import check_answer, check_refusal
from agentgym.environments.webapi.tasks import FACTS, base_snapshot, split_tasks

# The guessing, computing and memorising policies of the hack table (environments/hacks.py).
READERS_THAT_DO_NOT_READ = ("unread ", "memorised ")


def test_guessed_computed_and_memorised_facts_earn_nothing_on_eval(env: gym.Env) -> None:
    hacks = [h for h in hacks_for("agentgym/WebAPI-v1") if h.name.startswith(READERS_THAT_DO_NOT_READ)]
    assert len(hacks) == 13
    played: dict[str, int] = {}
    paid: list[tuple[str, str]] = []
    for t in split_tasks("eval"):
        for h in hacks:
            r = play(env, h, {"task_id": t.id})
            if r is None:
                continue
            played[h.name] = played.get(h.name, 0) + 1
            if r != 0.0:
                paid.append((h.name, t.id))
    assert paid == []
    assert set(played) == {h.name for h in hacks}, "every one of them must apply to some eval task"


def test_the_eval_store_shares_no_customer_and_no_order_facts_with_train() -> None:
    train, held_out = base_snapshot("train"), base_snapshot("eval")
    emails = lambda snap: {row[2] for row in snap["customers"]}  # noqa: E731
    assert not emails(train) & emails(held_out)
    skus = lambda snap: {row[1] for row in snap["products"]}  # noqa: E731
    assert not skus(train) & skus(held_out)
    # Order ids overlap (1..110), their facts do not: status, owner and date agree on few of them.
    same = [a for a, b in zip(train["orders"], held_out["orders"]) if a[1:4] == b[1:4]]
    assert len(same) == 0
    assert all(t.id.startswith("eval-") for t in split_tasks("eval"))


def test_a_low_entropy_fact_is_cited_with_its_record() -> None:
    # The documented rejected example: the status alone, as a policy that guessed it would say.
    assert FACTS["not_placed"][2] == "status shipped, ordered 2025-06-10"
    rule, fact, proof = "not_placed", "shipped", "2025-06-10"
    assert check_refusal(rule, "REFUSED: not_placed (status shipped, ordered 2025-06-10)", fact, "status", proof)
    assert not check_refusal(rule, "REFUSED: not_placed (status shipped)", fact, "status", proof)
    assert not check_refusal(rule, "REFUSED: not_placed (status shipped, ordered 2025-06-11)", fact, "status", proof)
    assert not check_refusal(rule, "REFUSED: not_placed (status shipped, ordered 2025-06-10 or 2025-06-11)",
                             fact, "status", proof)
    sku = "CAM-417"
    assert check_refusal("out_of_stock", "REFUSED: out_of_stock (stock 2 of CAM-417)", "2", "number", sku)
    assert check_refusal("out_of_stock", "REFUSED: out_of_stock (stock 2 of cam-417)", "2", "number", sku)
    assert not check_refusal("out_of_stock", "REFUSED: out_of_stock (stock 2)", "2", "number", sku)
    assert not check_refusal("out_of_stock", "REFUSED: out_of_stock (stock 2 of CAM-418)", "2", "number", sku)
    status = {"kind": "status", "value": "delivered", "date": "2025-05-01"}
    assert check_answer(status, "It arrived.\nANSWER: delivered, ordered 2025-05-01")
    assert not check_answer(status, "ANSWER: delivered")
    assert not check_answer(status, "ANSWER: delivered or shipped, ordered 2025-05-01")
