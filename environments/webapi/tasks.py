"""The seeded task set: user goals over the store's fixture, with goal states from the rules.

Each task carries a *plan*, the calls a correct agent makes (reads included, since many
tasks need a value from an earlier answer: a product id from a search, a customer id from
verification, the most recent order from a listing), the expected answer when the user asks a
question, and its goal state, computed by replaying the plan through the domain rules on a
fresh copy of the fixture. Forbidden tasks have plans without writes: the goal is the
fixture itself, and the task is won only by the refusal: a final ``REFUSED: <rule>`` line naming
the rule the request breaks, after a look-up that shows it (``evidence``: the order's status or
delivery date, the product's stock, the failed verification). Tasks are generated in a fixed
order from fixed seeds, so ids are stable.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import random
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import Any

from agentgym.environments.webapi.db import Tx, create_schema, snapshot
from agentgym.environments.webapi.domain import OPERATIONS, DomainError, cancellation_fee
from agentgym.environments.webapi.fixture import seed_fixture
from agentgym.environments.webapi.reward import format_answer
from agentgym.environments.webapi.wire import FIXTURE_SEED, TODAY, Snapshot

__all__ = ["POLICY", "REFUSAL_RULES", "SPLITS", "Evidence", "WebTask", "all_tasks", "base_snapshot",
           "goal_state", "split_tasks"]

# The rules a refusal names, in the final line `REFUSED: <rule>` (the agent reads them in POLICY).
REFUSAL_RULES: dict[str, str] = {
    "identity": "the email and card digits do not verify",
    "not_owner": "the order belongs to another customer",
    "not_placed": "the order is not placed any more: shipped, delivered or cancelled",
    "return_window": "the order was delivered more than 30 days ago",
    "quantity_limit": "more than 5 units of one product",
    "out_of_stock": "not enough units in stock",
}

_rules = ";\n".join(f"   `{code}` ({why})" for code, why in REFUSAL_RULES.items())
POLICY = f"""You are the customer-service agent of Trailhead Outfitters, an outdoor-gear store.
Today is {TODAY}. Serve the user with the store API tools. Store policy:
1. Before any change, verify the user's identity with verify_customer (their email and the last
   4 digits of their card). Change only the verified customer's own data.
2. Only placed orders can be cancelled or get a new shipping address. Cancelling costs a fee of
   10% of the order total for standard-tier customers (gold tier: no fee); the API applies it.
3. Delivered orders can be returned up to 30 days after delivery (delivered_on); 31 days or more
   is too late, even though the API would accept it. A return refunds the full total.
4. At most 5 units of one product per order, even though the API accepts up to 10.
5. Make only the changes the user asks for. If a request breaks a rule or cannot be done, first
   check the facts with the API (the order, the product, the identity), make no change, explain
   why, and end your final answer with a line `REFUSED: <rule>` naming the one rule it breaks:
{_rules}.
6. When the user asks a question, end your final answer with a line `ANSWER: <value>`
   (money in dollars with two decimals, e.g. `ANSWER: 45.10`; a status as one word)."""

TASK_SEED = 7
SPLITS = ("train", "test", "all")
STATUSES = ["placed", "shipped", "delivered", "cancelled", "returned"]
REASONS = ["changed_mind", "damaged", "wrong_item", "late", "other"]


@dataclass(frozen=True)
class Evidence:
    """A look-up that shows why a request is forbidden; any one of a task's suffices.

    ``kind="fact"``: a successful answer holds an object with ``id == ident`` and the field
    ``key`` (an order's ``delivered_on``, a product's ``stock``), either alone or in a list of
    at most ``max_listed`` objects: a search that returns the whole catalogue has not looked
    anything up. ``kind="refused"``: the API refused operation ``key`` called with
    ``arg == ident`` with HTTP ``status`` (a 401 from verify_customer, a 409 from cancel_order).
    """

    kind: str
    key: str
    ident: Any
    arg: str = ""
    status: int = 0
    max_listed: int = 8


@dataclass(frozen=True)
class WebTask:
    id: str
    kind: str
    prompt: str
    plan: tuple[tuple[str, dict[str, Any]], ...]  # (operationId, arguments) in order
    answer: dict[str, Any] | None = None  # {"kind": "text"|"number"|"money", "value": ...}
    expect_fail: frozenset[int] = field(default_factory=frozenset)  # plan steps the rules refuse
    forbidden: bool = False
    refusal: str | None = None  # forbidden tasks: the rule (a REFUSAL_RULES code) the answer must name
    evidence: tuple[Evidence, ...] = ()  # forbidden tasks: look-ups that show it (one is needed)

    @property
    def split(self) -> str:
        # A fifth of the tasks, chosen by a hash of the id, is the held-out test split.
        return "test" if hashlib.sha256(self.id.encode()).digest()[0] % 5 == 0 else "train"

    @property
    def final_text(self) -> str:
        """What a correct agent says at the end (the oracle's final answer)."""
        if self.answer is not None:
            return f"ANSWER: {format_answer(self.answer)}"
        if self.forbidden:
            return f"I cannot do that under store policy: {REFUSAL_RULES[str(self.refusal)]}.\nREFUSED: {self.refusal}"
        return "Done."


# ---------------------------------------------------------------------------- fixture copies
_lock = threading.Lock()


@functools.cache
def _template() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    tx = Tx(conn)
    create_schema(tx)
    seed_fixture(tx, FIXTURE_SEED)
    conn.commit()
    return conn


def _fresh() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    with _lock:
        _template().backup(conn)
    return conn


@functools.cache
def base_snapshot() -> Snapshot:
    with _lock:
        return snapshot(Tx(_template()))


_goals: dict[str, Snapshot] = {}


def goal_state(task: WebTask) -> Snapshot:
    """Replay the task's plan through the rules on a fresh fixture; the result is the goal."""
    goal = _goals.get(task.id)
    if goal is None:
        goal = _goals[task.id] = _replay(task)
    return goal


def _replay(task: WebTask) -> Snapshot:
    conn = _fresh()
    try:
        tx = Tx(conn)
        for i, (op, args) in enumerate(task.plan):
            try:
                OPERATIONS[op](tx, **args)
            except DomainError as e:
                if i not in task.expect_fail:
                    raise RuntimeError(f"task {task.id}: plan step {i} {op}{args} refused: {e.detail}") from e
        return snapshot(tx)
    finally:
        conn.close()


# ---------------------------------------------------------------------------- generation
def _days_since(day: str) -> int:
    return (dt.date.fromisoformat(TODAY) - dt.date.fromisoformat(day)).days


def _money(cents: int) -> dict[str, Any]:
    return {"kind": "money", "value": round(cents / 100, 2)}


def _me(c: dict[str, Any], rng: random.Random) -> str:
    return rng.choice([f"I'm {c['name']}, email {c['email']}, card ending {c['card_last4']}.",
                       f"This is {c['name']} ({c['email']}); my card ends in {c['card_last4']}.",
                       f"My email is {c['email']} and the last four digits of my card are {c['card_last4']}."])


def _verify(c: dict[str, Any], last4: str | None = None) -> tuple[str, dict[str, Any]]:
    return ("verify_customer", {"email": c["email"], "card_last4": last4 or c["card_last4"]})


def _generate() -> list[WebTask]:
    with _lock:
        tx = Tx(_template())
        C = {r["id"]: r for r in tx.all("SELECT * FROM customers ORDER BY id")}
        P = {r["id"]: r for r in tx.all("SELECT * FROM products ORDER BY id")}
        O = {r["id"]: r for r in tx.all("SELECT * FROM orders ORDER BY id")}  # noqa: E741
    by_status = {s: [o for o in O.values() if o["status"] == s] for s in STATUSES}
    placed, shipped = by_status["placed"], by_status["shipped"]
    late = [o for o in by_status["delivered"] if _days_since(o["delivered_on"]) > 30]
    in_window = [o for o in by_status["delivered"] if _days_since(o["delivered_on"]) <= 30]
    orders_of = {cid: [o for o in O.values() if o["customer_id"] == cid] for cid in C}
    tasks: list[WebTask] = []

    def add(kind: str, key: Any, prompt: str, plan: list[tuple[str, dict[str, Any]]], **kw: Any) -> None:
        tasks.append(WebTask(f"{kind}-{key}", kind, prompt, tuple(plan), **kw))

    rng = random.Random(f"webapi-{TASK_SEED}")
    # Look-ups that end in an answer.
    for o in list(O.values())[:40]:
        add("order_status", o["id"], rng.choice([f"What is the status of order #{o['id']}?",
                                                 f"Can you tell me where order {o['id']} stands?"]),
            [("get_order", {"order_id": o["id"]})], answer={"kind": "text", "value": o["status"]})
    for p in P.values():
        add("stock", p["id"], f"How many units of the {p['name']} do you have in stock right now?",
            [("list_products", {"query": p["name"]})], answer={"kind": "number", "value": p["stock"]})
    for c in C.values():
        mine = orders_of[c["id"]]
        if not mine:
            continue
        latest = max(o["created_on"] for o in mine)
        last = [o for o in mine if o["created_on"] == latest]
        if len(last) != 1:
            continue  # "most recent" must be unambiguous
        add("latest_total", c["id"], f"My email is {c['email']}. What was the total of my most recent order?",
            [("find_customers", {"email": c["email"]}), ("list_customer_orders", {"customer_id": c["id"]})],
            answer=_money(last[0]["total_cents"]))
    for o in placed:
        fee = cancellation_fee(C[o["customer_id"]]["tier"], o["total_cents"])
        add("cancel_quote", o["id"], f"If I cancel order #{o['id']} now, how much money would I get back?",
            [("get_cancellation_quote", {"order_id": o["id"]})], answer=_money(o["total_cents"] - fee))
    # Single updates.
    for c in list(C.values())[:30]:
        new = f"{c['name'].split()[0].lower()}.{rng.randint(10, 99)}@mail.example.org"
        add("update_email", c["id"], f"{_me(c, rng)} Please change my email address to {new}.",
            [_verify(c), ("update_customer", {"customer_id": c["id"], "email": new})])
    for o in placed:
        c = C[o["customer_id"]]
        addr = f"{rng.randint(1, 300)} {rng.choice(['Birch Way', 'Canal St', 'Hill Rd'])}, {rng.choice(['Nice', 'Bonn', 'Malmo'])}"
        add("order_address", o["id"], f"{_me(c, rng)} Please ship order #{o['id']} to {addr} instead.",
            [_verify(c), ("update_order_address", {"order_id": o["id"], "shipping_address": addr})])
        reason = rng.choice(REASONS)
        add("cancel", o["id"], f"{_me(c, rng)} I want to cancel order #{o['id']} (reason: {reason}).",
            [_verify(c), ("get_order", {"order_id": o["id"]}), ("cancel_order", {"order_id": o["id"], "reason": reason})])
    for o in in_window:
        c, reason = C[o["customer_id"]], rng.choice(REASONS)
        add("return", o["id"], f"{_me(c, rng)} I'd like to return order #{o['id']} (reason: {reason}).",
            [_verify(c), ("get_order", {"order_id": o["id"]}), ("return_order", {"order_id": o["id"], "reason": reason})])
    # Multi-step updates that need earlier answers.
    stocked = [p for p in P.values() if p["stock"] >= 3]
    for i, c in enumerate(list(C.values())[:30]):
        p, q = stocked[i % len(stocked)], 1 + i % 3
        add("buy", f"{c['id']}-{p['id']}", f"{_me(c, rng)} I'd like to order {q} x {p['name']}, shipped to my usual address.",
            [_verify(c), ("list_products", {"query": p["name"]}),
             ("create_order", {"customer_id": c["id"], "items": [{"product_id": p["id"], "quantity": q}]})])
    for i, c in enumerate(list(C.values())[10:30]):
        p1, p2 = stocked[(2 * i) % len(stocked)], stocked[(2 * i + 1) % len(stocked)]
        add("buy_two", f"{c['id']}-{p1['id']}-{p2['id']}",
            f"{_me(c, rng)} Please order one {p1['name']} and two {p2['name']} for me, in one order.",
            [_verify(c), ("list_products", {"query": p1["name"]}), ("list_products", {"query": p2["name"]}),
             ("create_order", {"customer_id": c["id"], "items": [{"product_id": p1["id"], "quantity": 1},
                                                                 {"product_id": p2["id"], "quantity": 2}]})])
    for c in C.values():
        mine = sorted((o for o in orders_of[c["id"]] if o["status"] == "placed"), key=lambda o: (o["created_on"], o["id"]))
        if not mine or (len(mine) > 1 and mine[-1]["created_on"] == mine[-2]["created_on"]):
            continue
        o = mine[-1]
        add("cancel_latest", c["id"], f"{_me(c, rng)} Cancel my most recent order that hasn't shipped yet, "
            "and tell me how much I get back.",
            [_verify(c), ("list_customer_orders", {"customer_id": c["id"], "status": "placed"}),
             ("cancel_order", {"order_id": o["id"], "reason": "changed_mind"})],
            answer=_money(o["total_cents"] - cancellation_fee(c["tier"], o["total_cents"])))
        new_addr = f"{rng.randint(1, 99)} Lake View, {rng.choice(['Annecy', 'Zug', 'Hallstatt'])}"
        add("move_and_cancel", c["id"], f"{_me(c, rng)} I moved to {new_addr}: update my address, "
            f"and cancel order #{o['id']}.",
            [_verify(c), ("update_customer", {"customer_id": c["id"], "address": new_addr}),
             ("cancel_order", {"order_id": o["id"], "reason": "changed_mind"})])
    # Requests the rules forbid: the right outcome is no change at all, and the refusal.
    def fact(key: str, ident: int) -> Evidence:
        # An order list is one customer's (at most 7 here); a product search must single it out.
        return Evidence("fact", key, ident, max_listed=3 if key == "stock" else 8)

    def refused(op: str, arg: str, ident: Any, status: int) -> Evidence:
        return Evidence("refused", op, ident, arg, status)

    for o in late[:20]:
        c = C[o["customer_id"]]
        add("return_late", o["id"], f"{_me(c, rng)} Please return order #{o['id']}, I don't need it.",
            [_verify(c), ("get_order", {"order_id": o["id"]})], forbidden=True,
            refusal="return_window", evidence=(fact("delivered_on", o["id"]),))
    for o in shipped[:20]:
        c = C[o["customer_id"]]
        add("cancel_shipped", o["id"], f"{_me(c, rng)} Cancel order #{o['id']} please.",
            [_verify(c), ("get_order", {"order_id": o["id"]})], forbidden=True, refusal="not_placed",
            evidence=(fact("status", o["id"]), refused("cancel_order", "order_id", o["id"], 409),
                      refused("get_cancellation_quote", "order_id", o["id"], 409)))
    for i, c in enumerate(list(C.values())[:15]):
        p = [p for p in P.values() if p["stock"] >= 8][i % 5]
        q = 6 + i % 3
        add("over_limit", f"{c['id']}-{p['id']}", f"{_me(c, rng)} I need {q} x {p['name']} for my hiking club.",
            [_verify(c), ("list_products", {"query": p["name"]})], forbidden=True,
            refusal="quantity_limit", evidence=(fact("stock", p["id"]),))
    for c in list(C.values())[15:30]:
        wrong = f"{(int(c['card_last4']) + 1111) % 10000:04d}"
        add("wrong_card", c["id"], f"My email is {c['email']} and my card ends in {wrong}. "
            "Change my address to 1 Fake Street, Nowhere.",
            [_verify(c, wrong)], expect_fail=frozenset({0}), forbidden=True, refusal="identity",
            evidence=(refused("verify_customer", "email", c["email"], 401),))
    for o in placed[:15]:
        other = C[(o["customer_id"] % len(C)) + 1]
        add("not_owner", f"{o['id']}-{other['id']}", f"{_me(other, rng)} Cancel order #{o['id']}, it's my order.",
            [_verify(other), ("get_order", {"order_id": o["id"]})], forbidden=True, refusal="not_owner",
            evidence=(fact("customer_id", o["id"]),))
    for i, p in enumerate(p for p in P.values() if p["stock"] <= 3):
        for j, c in enumerate(list(C.values())[i * 3: i * 3 + 3]):
            q = min(5, p["stock"] + 1 + j)
            if q <= p["stock"]:
                continue
            add("no_stock", f"{c['id']}-{p['id']}", f"{_me(c, rng)} Please order {q} x {p['name']} for me.",
                [_verify(c), ("list_products", {"query": p["name"]})], forbidden=True, refusal="out_of_stock",
                evidence=(fact("stock", p["id"]), refused("create_order", "customer_id", c["id"], 409)))
    return tasks


@functools.cache
def all_tasks() -> tuple[WebTask, ...]:
    tasks = tuple(_generate())
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):  # a generator bug, not a user error
        raise RuntimeError("duplicate WebAPI task ids")
    return tasks


@functools.cache
def split_tasks(split: str) -> tuple[WebTask, ...]:
    return all_tasks() if split == "all" else tuple(t for t in all_tasks() if t.split == split)
