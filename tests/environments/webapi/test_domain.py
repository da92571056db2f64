"""Unit tests of the rules, the canonical snapshot, the reward and the task set (no server)."""

from __future__ import annotations

import collections
import re
import sqlite3
from typing import Any

import pytest

from agentgym.environments.webapi.db import Tx, create_schema, snapshot
from agentgym.environments.webapi.domain import OPERATIONS, DomainError, cancellation_fee
from agentgym.environments.webapi.fixture import seed_fixture
from agentgym.environments.webapi.reward import (
    CallRecord,
    check_answer,
    check_refusal,
    evaluate,
    refusal_line,
    shown,
)
from agentgym.environments.webapi.spec import OPERATIONS as SPEC_OPS
from agentgym.environments.webapi.spec import openapi_document
from agentgym.environments.webapi.store_wire import FIXTURE_SEED
from agentgym.environments.webapi.tasks import (
    FACTS,
    POLICY,
    REFUSAL_RULES,
    Evidence,
    all_tasks,
    base_snapshot,
    goal_state,
    split_tasks,
)


@pytest.fixture()
def tx() -> Tx:
    conn = sqlite3.connect(":memory:")
    t = Tx(conn)
    create_schema(t)
    seed_fixture(t, FIXTURE_SEED)
    return t


def _customer(tx: Tx, tier: str) -> dict:
    return tx.one("SELECT * FROM customers WHERE tier = ? AND id IN "
                  "(SELECT customer_id FROM orders WHERE status = 'placed') ORDER BY id", [tier])


def test_fixture_is_deterministic_and_covers_every_status(tx: Tx) -> None:
    other = Tx(sqlite3.connect(":memory:"))
    create_schema(other)
    seed_fixture(other, FIXTURE_SEED)
    assert snapshot(tx) == snapshot(other)
    statuses = {r["status"] for r in tx.all("SELECT status FROM orders")}
    assert statuses == {"placed", "shipped", "delivered", "cancelled", "returned"}
    assert tx.one("SELECT COUNT(*) AS n FROM products WHERE stock <= 3")["n"] >= 2


def test_writes_need_verification_of_the_right_customer(tx: Tx) -> None:
    c = _customer(tx, "standard")
    order = tx.one("SELECT * FROM orders WHERE customer_id = ? AND status = 'placed'", [c["id"]])
    with pytest.raises(DomainError) as e:
        OPERATIONS["cancel_order"](tx, order_id=order["id"], reason="other")
    assert e.value.status == 403 and "verify_customer" in e.value.detail
    with pytest.raises(DomainError) as e:
        OPERATIONS["verify_customer"](tx, email=c["email"], card_last4="0000" if c["card_last4"] != "0000" else "1111")
    assert e.value.status == 401
    other = tx.one("SELECT * FROM customers WHERE id <> ? ORDER BY id", [c["id"]])
    OPERATIONS["verify_customer"](tx, email=other["email"], card_last4=other["card_last4"])
    with pytest.raises(DomainError) as e:
        OPERATIONS["cancel_order"](tx, order_id=order["id"], reason="other")
    assert e.value.status == 403 and "not" in e.value.detail


def test_cancel_applies_fee_restocks_and_refunds(tx: Tx) -> None:
    for tier in ("standard", "gold"):
        c = _customer(tx, tier)
        order = tx.one("SELECT * FROM orders WHERE customer_id = ? AND status = 'placed'", [c["id"]])
        stock_before = {r["product_id"]: r["stock"] for r in tx.all(
            "SELECT i.product_id, p.stock FROM order_items i JOIN products p ON p.id = i.product_id "
            "WHERE i.order_id = ?", [order["id"]])}
        OPERATIONS["verify_customer"](tx, email=c["email"], card_last4=c["card_last4"])
        out = OPERATIONS["cancel_order"](tx, order_id=order["id"], reason="changed_mind")
        fee = cancellation_fee(tier, order["total_cents"])
        assert out["status"] == "cancelled" and out["fee_cents"] == fee
        assert (fee > 0) == (tier == "standard")
        assert {"kind": "refund", "amount_cents": order["total_cents"] - fee} in out["payments"]
        for it in out["items"]:
            now = tx.one("SELECT stock FROM products WHERE id = ?", [it["product_id"]])["stock"]
            assert now == stock_before[it["product_id"]] + it["quantity"]
        with pytest.raises(DomainError) as e:  # cancelled orders stay cancelled
            OPERATIONS["cancel_order"](tx, order_id=order["id"], reason="other")
        assert e.value.status == 409


def test_order_stock_limits_and_validation(tx: Tx) -> None:
    c = tx.one("SELECT * FROM customers ORDER BY id")
    OPERATIONS["verify_customer"](tx, email=c["email"], card_last4=c["card_last4"])
    scarce = tx.one("SELECT * FROM products WHERE stock <= 3 ORDER BY id")
    with pytest.raises(DomainError) as e:
        OPERATIONS["create_order"](tx, customer_id=c["id"], items=[{"product_id": scarce["id"], "quantity": scarce["stock"] + 1}])
    assert e.value.status == 409 and f"available {scarce['stock']}" in e.value.detail
    with pytest.raises(DomainError) as e:
        OPERATIONS["create_order"](tx, customer_id=c["id"], items=[{"product_id": 1, "quantity": 1}, {"product_id": 1, "quantity": 2}])
    assert e.value.status == 422
    with pytest.raises(DomainError) as e:
        OPERATIONS["get_product"](tx, product_id=999)
    assert e.value.status == 404
    n_orders = tx.one("SELECT COUNT(*) AS n FROM orders")["n"]
    out = OPERATIONS["create_order"](tx, customer_id=c["id"], items=[{"product_id": 2, "quantity": 2}])
    assert out["id"] == n_orders + 1 and out["status"] == "placed" and out["shipping_address"] == c["address"]


def test_snapshot_hides_payment_ids_and_is_sorted(tx: Tx) -> None:
    snap = snapshot(tx)
    assert set(snap) == {"customers", "products", "orders", "order_items", "payments"}
    assert all(len(r) == 3 for r in snap["payments"])  # (order_id, kind, amount)
    for rows in snap.values():
        assert rows == sorted(rows, key=lambda r: ["" if v is None else v for v in r])


def test_openapi_document_names_every_rule() -> None:
    doc = openapi_document()
    ops = {op["operationId"] for item in doc["paths"].values() for op in item.values()}
    assert ops == set(OPERATIONS) and len(ops) >= 10
    assert {o.operation_id for o in SPEC_OPS} == set(OPERATIONS)
    assert any(op.method != "GET" for op in SPEC_OPS) and any(op.method == "GET" for op in SPEC_OPS)


@pytest.mark.parametrize(("spec", "text", "ok"), [
    ({"kind": "money", "value": 45.1}, "The refund is $45.10.\nANSWER: $45.10", True),
    ({"kind": "money", "value": 45.1}, "ANSWER: 1,045.10", False),
    ({"kind": "money", "value": 1045.1}, "ANSWER: 1,045.10", True),
    ({"kind": "number", "value": 7}, "ANSWER: 7 units", True),
    ({"kind": "number", "value": 7}, "7", False),  # no ANSWER line
    ({"kind": "text", "value": "shipped"}, "ANSWER: Shipped.", True),
    ({"kind": "text", "value": "shipped"}, "ANSWER: placed or shipped", False),
    ({"kind": "number", "value": 7}, "ANSWER: 7 or 8", False),  # several answers at once
    ({"kind": "money", "value": 45.1}, "ANSWER: 45.10\nANSWER: 50.00", False),
    (None, "whatever", True),
])
def test_check_answer(spec: dict | None, text: str, ok: bool) -> None:
    assert check_answer(spec, text) is ok


def test_evaluate_credits_goal_rows_and_counts_forbidden_writes() -> None:
    base = {"orders": [[1, "placed"], [2, "placed"]], "payments": [[1, "charge", 10]]}
    goal = {"orders": [[1, "cancelled"], [2, "placed"]], "payments": [[1, "charge", 10], [1, "refund", 9]]}
    assert evaluate(goal, goal, base, None, "") == (1.0, {"progress": 1.0, "forbidden_writes": 0.0})
    half = {"orders": [[1, "cancelled"], [2, "placed"]], "payments": [[1, "charge", 10]]}
    outcome, comps = evaluate(goal, half, base, None, "")
    assert outcome == 0.0 and comps["progress"] == 0.5 and comps["forbidden_writes"] == 0.0
    wrong = {"orders": [[1, "placed"], [2, "cancelled"]], "payments": [[1, "charge", 10]]}
    outcome, comps = evaluate(goal, wrong, base, None, "")
    assert outcome == 0.0 and comps == {"progress": 0.0, "forbidden_writes": 1.0}
    outcome, comps = evaluate(base, base, base, {"kind": "number", "value": 3}, "ANSWER: 4")
    assert outcome == 0.0 and comps["answer_correct"] == 0.0


@pytest.mark.parametrize("text, said", [
    ("no", None), ("Sorry.\nREFUSED: return_window", "return_window"), ("REFUSED: `Not_Placed`.", "not_placed"),
    ("REFUSED: identity\nthanks", "identity"), ("REFUSED: a\nREFUSED: b", ""), ("REFUSED:", ""),
])
def test_refusal_line(text: str, said: str | None) -> None:
    assert refusal_line(text) == said


def test_a_forbidden_task_is_won_by_the_named_rule_and_fact_after_the_look_up() -> None:
    base = {"orders": [[1, "shipped"]]}
    ok = evaluate(base, base, base, None, "It shipped.\nREFUSED: not_placed (status shipped)",
                  refusal="not_placed", fact="shipped", fact_kind="status", established=True)
    assert ok[0] == 1.0
    for text, rule, seen in [("Done.", "not_placed", True),
                             ("REFUSED: not_placed (status shipped)", "not_placed", False),  # no look-up
                             ("REFUSED: not_placed", "not_placed", True),  # no fact
                             ("REFUSED: not_placed (status delivered)", "not_placed", True),  # the wrong fact
                             ("REFUSED: not_placed (shipped or delivered)", "not_placed", True),  # several
                             ("REFUSED: identity (status shipped)", "not_placed", True),
                             ("Done. REFUSED: identity", None, True)]:
        assert evaluate(base, base, base, None, text, refusal=rule, fact="shipped", fact_kind="status",
                        established=seen)[0] == 0.0, text


@pytest.mark.parametrize(("kind", "fact", "text", "ok"), [
    ("date", "2025-04-02", "REFUSED: return_window (delivered 2025-04-02)", True),
    ("date", "2025-04-02", "REFUSED: return_window - delivered on 2025-04-02.", True),
    ("date", "2025-04-02", "REFUSED: return_window (delivered 2025-04-03)", False),
    ("date", "2025-04-02", "REFUSED: return_window (2025-04-02 or 2025-04-03)", False),
    ("number", "17", "REFUSED: not_owner (customer 17)", True),
    ("number", "17", "REFUSED: not_owner (customer_id: 17)", True),
    ("number", "17", "REFUSED: not_owner (customer 17 or 18)", False),
    ("number", "0", "REFUSED: out_of_stock (stock 0)", True),
    ("number", "2", "REFUSED: out_of_stock (stock 2, asked 3)", False),
    ("status", "returned", "REFUSED: not_placed (status Returned)", True),
])
def test_check_refusal_reads_exactly_one_fact(kind: str, fact: str, text: str, ok: bool) -> None:
    rule = text.split("REFUSED: ")[1].split()[0]
    assert check_refusal(rule, text, fact, kind) is ok


def test_evidence_is_a_fact_in_an_answer_or_the_api_answering_a_call() -> None:
    order = Evidence("fact", "delivered_on", 7, value="2025-01-01")
    card = Evidence("call", "verify_customer", "Ann@x.org", "email", 401)
    calls = [CallRecord("get_order", {"order_id": 8}, 200, {"id": 8, "delivered_on": "2025-01-01"}),
             CallRecord("list_products", {}, 200, [{"id": 7, "stock": 3}]),  # id 7, but a product
             CallRecord("get_order", {"order_id": 7}, 404, {"detail": "order 7 not found", "id": 7})]
    assert not shown([order], calls)
    assert shown([order], [CallRecord("list_customer_orders", {"customer_id": 2}, 200,
                                      [{"id": 6}, {"id": 7, "status": "delivered", "delivered_on": "2025-01-01"}])])
    assert not shown([order], [CallRecord("get_order", {"order_id": 7}, 200, {"id": 7, "delivered_on": "2025-01-02"})])
    assert not shown([card], [CallRecord("verify_customer", {"email": "ann@x.org"}, 200, {"verified": True})])
    assert shown([card], [CallRecord("verify_customer", {"email": "ann@x.org", "card_last4": "1"}, 401, None)])
    assert not shown([card], [CallRecord("verify_customer", {"email": "bob@x.org"}, 401, None)])


def test_forbidden_tasks_name_a_rule_a_fact_and_their_evidence() -> None:
    for t in all_tasks():
        if t.forbidden:
            assert t.refusal in REFUSAL_RULES and t.fact and t.evidence, t.id
            assert f"REFUSED: {t.refusal} (" in t.final_text and f"`{t.refusal}`" in POLICY
            assert check_refusal(t.refusal, t.final_text, t.fact, FACTS[t.refusal][0]), t.id
        else:
            assert t.refusal is None and "REFUSED" not in t.final_text
            assert bool(t.evidence) == (t.answer is not None), t.id  # every answer needs its look-up


def test_allowed_and_forbidden_requests_share_their_wording() -> None:
    """The request's words never tell a forbidden task from an allowed one: every template a
    forbidden task uses (its text with names, numbers and ids blanked) is used by allowed tasks too."""
    def template(t: Any) -> str:
        text = t.prompt.split(". ", 1)[1] if t.prompt.startswith(("I'm", "This is")) else t.prompt
        text = re.sub(r"^My email is \S+ and the last four digits of my card are \d+\. ", "", text)
        text = re.sub(r"\S+@\S+|\d+|[A-Z][\w-]*(?: [A-Z0-9][\w-]*)*", "#", text)
        return re.sub(r"\b(?:changed_mind|damaged|wrong_item|late|other)\b", "#", text)

    allowed = {template(t) for t in all_tasks() if not t.forbidden}
    forbidden = {t.id: template(t) for t in all_tasks() if t.forbidden}
    assert forbidden and all(v in allowed for v in forbidden.values()), \
        {k: v for k, v in forbidden.items() if v not in allowed}


def test_task_set_is_large_distinct_and_typed() -> None:
    tasks = all_tasks()
    assert len(tasks) >= 200 and len({t.id for t in tasks}) == len(tasks)
    assert len({t.prompt for t in tasks}) >= 200
    kinds = collections.Counter(t.kind for t in tasks)
    assert len(kinds) >= 10
    lookups = [t for t in tasks if t.answer is not None and all(op.startswith(("get", "list", "find")) for op, _ in t.plan)]
    forbidden = [t for t in tasks if t.forbidden]
    multi = [t for t in tasks if sum(op not in ("get_order", "list_products", "list_customer_orders", "find_customers",
                                                "get_cancellation_quote", "verify_customer") for op, _ in t.plan) >= 2]
    # multi-write tasks (move_and_cancel) depend on each store's customers with one latest placed order
    assert len(lookups) >= 50 and len(forbidden) >= 50 and len(multi) >= 15
    train, held_out = split_tasks("train"), split_tasks("eval")
    assert len(train) + len(held_out) == len(tasks) and not {t.prompt for t in train} & {t.prompt for t in held_out}
    assert len(held_out) >= 40


def test_goal_states_follow_the_rules() -> None:
    for t in all_tasks():
        base, goal = base_snapshot(t.split), goal_state(t)
        writes = any(op not in ("verify_customer",) and not op.startswith(("get", "list", "find")) for op, _ in t.plan)
        assert (goal != base) == writes, t.id
        if t.forbidden:
            assert goal == base, t.id
    t = next(t for t in all_tasks() if t.kind == "cancel")
    order_id = t.plan[-1][1]["order_id"]
    cancelled = [r for r in goal_state(t)["orders"] if r[0] == order_id][0]
    assert cancelled[2] == "cancelled"
