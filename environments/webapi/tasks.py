"""The seeded task set: user goals over the store's fixture, with goal states from the rules.

Each task carries a *plan*, the calls a correct agent makes (reads included, since many
tasks need a value from an earlier answer: a product id from a search, a customer id from
verification, the most recent order from a listing), the expected answer when the user asks a
question, and its goal state, computed by replaying the plan through the domain rules on a
fresh copy of the fixture. Tasks are generated in a fixed order from fixed seeds, so ids are
stable.

**What is forbidden depends on the database, never on the wording.** A request to cancel,
return, buy or change one's data is worded from the same templates whether the store's rules
allow it or not: only the state decides (the order's status, owner or delivery date, the
product's stock, the card on file). A forbidden task is won only by the refusal, a final line
``REFUSED: <rule> (<fact>)`` naming the rule and the *decisive fact as the API returned it*
(:data:`FACTS`: ``REFUSED: return_window (delivered 2025-04-02)``), after a look-up that
showed it (``evidence``). A question is answered ``ANSWER: <value>`` after the look-up that
establishes the value. A fact with few possible values (a status, a low stock) is cited with a
value of the same record that only the look-up shows (the order's date, the product's SKU):
guessing it, or computing it from the prompt, earns nothing.

**No rule of the prompt predicts a fact.** Owners of other customers' orders, statuses, stock
levels and dates are drawn, never derived from the asker or the quantity asked.

Splits: each split has its own store (``store_wire.FIXTURES``: different customers, orders,
products and SKUs), and its tasks are generated over it; of those, a split keeps the ones whose
prompt hashes to it (:func:`agentgym.splits.hash_split`, one in five for eval), so no eval prompt
is a train prompt either. Eval task ids start with ``eval-``. ``all`` is every task (for tests
and benchmarks).
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import sqlite3
import threading
from dataclasses import dataclass, field
from typing import Any

from agentgym.environments.webapi.db import Tx, create_schema, snapshot
from agentgym.environments.webapi.domain import OPERATIONS, DomainError, cancellation_fee
from agentgym.environments.webapi.fixture import seed_fixture
from agentgym.environments.webapi.reward import STATUSES, format_answer
from agentgym.environments.webapi.store_wire import FIXTURES, TODAY, Snapshot
from agentgym.splits import hash_split

__all__ = ["FACTS", "POLICY", "REFUSAL_RULES", "SPLITS", "Evidence", "WebTask", "all_tasks", "base_snapshot",
           "goal_state", "split_tasks"]

# The rules a refusal names, in the final line `REFUSED: <rule> (<fact>)` (the agent reads them in POLICY).
REFUSAL_RULES: dict[str, str] = {
    "identity": "the email and card digits do not verify",
    "not_owner": "the order belongs to another customer",
    "not_placed": "the order is not placed any more: shipped, delivered or cancelled",
    "return_window": "the order was delivered more than 30 days ago",
    "quantity_limit": "more than 5 units of one product",
    "out_of_stock": "not enough units in stock",
}
# rule -> (the decisive fact a refusal cites, as the API returned it; an example). The fact's
# kind is how reward.check_refusal reads it: a date, a status word, or a number.
FACTS: dict[str, tuple[str, str, str]] = {
    "identity": ("date", "the date of the card on file, from the failed verification", "card added 2024-03-11"),
    "not_owner": ("number", "the order's customer_id", "customer 17"),
    "not_placed": ("status", "the order's status and the date it was ordered (created_on)",
                   "status shipped, ordered 2025-06-10"),
    "return_window": ("date", "the order's delivered_on", "delivered 2025-04-02"),
    "quantity_limit": ("number", "the quantity asked for", "asked 7"),
    "out_of_stock": ("number", "the product's stock and its sku", "stock 2 of CAM-417"),
}

_rules = ";\n".join(f"   `{code}` ({why}): cite {FACTS[code][1]}, e.g. `REFUSED: {code} ({FACTS[code][2]})`"
                    for code, why in REFUSAL_RULES.items())
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
   why, and end your final answer with a line `REFUSED: <rule> (<fact>)` naming the one rule it
   breaks and the fact the API showed you that decides it, exactly as the API gave it:
{_rules}.
6. When the user asks a question, look the answer up with the API and end your final answer with
   a line `ANSWER: <value>` (one value: money in dollars with two decimals, e.g. `ANSWER: 45.10`;
   a status as one word with the date the order was placed, e.g. `ANSWER: shipped, ordered 2025-06-10`)."""

TASK_SEED = 7
SPLITS = ("train", "eval", "all")
REASONS = ["changed_mind", "damaged", "wrong_item", "late", "other"]


@dataclass(frozen=True)
class Evidence:
    """A look-up that establishes a task's decisive fact; any one of a task's suffices.

    ``kind="fact"``: a successful answer holds an object with ``id == ident`` whose field
    ``key`` equals ``value`` (an order's ``delivered_on``, a product's ``stock``), either alone
    or in a list of at most ``max_listed`` objects: a search that returns the whole catalogue
    has not looked anything up. ``kind="call"``: the API answered operation ``key`` called with
    ``arg == ident`` (and the arguments ``also``) with HTTP ``status`` (a 401 from
    verify_customer with the digits the user gave, a 409 from cancel_order, a 200 from
    get_cancellation_quote).
    """

    kind: str
    key: str
    ident: Any
    arg: str = ""
    status: int = 0
    max_listed: int = 8
    value: Any = None
    also: tuple[tuple[str, Any], ...] = ()  # "call": further arguments the call must have had


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
    fact: str | None = None  # forbidden tasks: the decisive fact's value ("2025-04-02", "shipped", "17")
    # A low-entropy fact's companion from the same record ("2025-06-10", "CAM-417"), cited with it
    proof: str | None = None
    evidence: tuple[Evidence, ...] = ()  # look-ups that establish the fact or the answer (one is needed)
    split: str = "train"  # the store it runs on (store_wire.FIXTURES) and the split it belongs to

    @property
    def final_text(self) -> str:
        """What a correct agent says at the end (the oracle's final answer)."""
        if self.answer is not None:
            return f"ANSWER: {format_answer(self.answer)}"
        if self.forbidden:
            rule = str(self.refusal)
            cite = {"not_placed": f"status {self.fact}, ordered {self.proof}",
                    "out_of_stock": f"stock {self.fact} of {self.proof}"}.get(
                rule, FACTS[rule][2].rsplit(" ", 1)[0] + f" {self.fact}")
            return f"I cannot do that under store policy: {REFUSAL_RULES[rule]}.\nREFUSED: {rule} ({cite})"
        return "Done."


# ---------------------------------------------------------------------------- fixture copies
_lock = threading.Lock()


@functools.cache
def _template(split: str) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    tx = Tx(conn)
    create_schema(tx)
    seed_fixture(tx, FIXTURES[split], list(FIXTURES).index(split))
    conn.commit()
    return conn


def _fresh(split: str) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    with _lock:
        _template(split).backup(conn)
    return conn


@functools.cache
def base_snapshot(split: str = "train") -> Snapshot:
    """The goal tables of the store a split's episodes start from."""
    with _lock:
        return snapshot(Tx(_template(split)))


_goals: dict[str, Snapshot] = {}


def goal_state(task: WebTask) -> Snapshot:
    """Replay the task's plan through the rules on a fresh fixture; the result is the goal."""
    goal = _goals.get(task.id)
    if goal is None:
        goal = _goals[task.id] = _replay(task)
    return goal


def _replay(task: WebTask) -> Snapshot:
    conn = _fresh(task.split)
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


def _me(c: dict[str, Any], rng: random.Random, last4: str | None = None) -> str:
    card = last4 or c["card_last4"]
    return rng.choice([f"I'm {c['name']}, email {c['email']}, card ending {card}.",
                       f"This is {c['name']} ({c['email']}); my card ends in {card}.",
                       f"My email is {c['email']} and the last four digits of my card are {card}."])


def _verify(c: dict[str, Any], last4: str | None = None) -> tuple[str, dict[str, Any]]:
    return ("verify_customer", {"email": c["email"], "card_last4": last4 or c["card_last4"]})


def _wrong_card(c: dict[str, Any]) -> str:
    return f"{(int(c['card_last4']) + 1111) % 10000:04d}"


# One template set per request: allowed and forbidden variants draw from the same one, so
# that the wording never tells them apart (only the database does).
def _cancel_text(me: str, oid: int, reason: str, rng: random.Random) -> str:
    return rng.choice([f"{me} I want to cancel order #{oid} (reason: {reason}).",
                       f"{me} Please cancel order #{oid}; the reason is {reason}."])


def _return_text(me: str, oid: int, reason: str, rng: random.Random) -> str:
    return rng.choice([f"{me} I'd like to return order #{oid} (reason: {reason}).",
                       f"{me} Please take back order #{oid}; the reason is {reason}."])


def _buy_text(me: str, q: int, name: str, rng: random.Random) -> str:
    return rng.choice([f"{me} I'd like to order {q} x {name}, shipped to my usual address.",
                       f"{me} Please order {q} x {name} for me."])


def _change_text(me: str, what: str, value: str, rng: random.Random) -> str:
    noun = "email address" if what == "email" else "address"
    return rng.choice([f"{me} Please change my {noun} to {value}.",
                       f"{me} My {noun} is now {value}; please update it."])


def _new_email(c: dict[str, Any], rng: random.Random) -> str:
    return f"{c['name'].split()[0].lower()}.{rng.randint(10, 99)}@mail.example.org"


def _new_address(rng: random.Random) -> str:
    return f"{rng.randint(1, 300)} {rng.choice(['Birch Way', 'Canal St', 'Hill Rd'])}, {rng.choice(['Nice', 'Bonn', 'Malmo'])}"


def _generate(split: str) -> list[WebTask]:
    """Every task over ``split``'s store; the caller keeps those whose prompt hashes to it."""
    with _lock:
        tx = Tx(_template(split))
        C = {r["id"]: r for r in tx.all("SELECT * FROM customers ORDER BY id")}
        P = {r["id"]: r for r in tx.all("SELECT * FROM products ORDER BY id")}
        O = {r["id"]: r for r in tx.all("SELECT * FROM orders ORDER BY id")}  # noqa: E741
    by_status = {s: [o for o in O.values() if o["status"] == s] for s in STATUSES}
    placed = by_status["placed"]
    late = [o for o in by_status["delivered"] if _days_since(o["delivered_on"]) > 30]
    in_window = [o for o in by_status["delivered"] if _days_since(o["delivered_on"]) <= 30]
    # Cancels of orders no longer placed: the same number of each status (the status is the fact).
    not_placed = [o for st in STATUSES[1:] for o in by_status[st][:10]]
    orders_of = {cid: [o for o in O.values() if o["customer_id"] == cid] for cid in C}
    tasks: list[WebTask] = []

    prefix = "" if split == "train" else f"{split}-"

    def add(kind: str, key: Any, prompt: str, plan: list[tuple[str, dict[str, Any]]], **kw: Any) -> None:
        tasks.append(WebTask(f"{prefix}{kind}-{key}", kind, prompt, tuple(plan), split=split, **kw))

    def fact(key: str, ident: int, value: Any, max_listed: int = 8) -> Evidence:
        return Evidence("fact", key, ident, max_listed=max_listed, value=value)

    def called(op: str, arg: str, ident: Any, status: int, **also: Any) -> Evidence:
        return Evidence("call", op, ident, arg, status, also=tuple(also.items()))

    rng = random.Random(f"webapi-{TASK_SEED}-{split}")
    # Look-ups that end in an answer, credited only after the look-up that establishes it.
    # Status questions: 8 orders of each status, drawn (a constant guess is right 1 time in 5,
    # and is paid never: the answer carries the order's date too).
    asked = sorted(o["id"] for st in STATUSES for o in rng.sample(by_status[st], min(8, len(by_status[st]))))
    for o in (O[i] for i in asked):
        add("order_status", o["id"], rng.choice([f"What is the status of order #{o['id']}, and when was it placed?",
                                                 f"Can you tell me where order {o['id']} stands and when I ordered it?"]),
            [("get_order", {"order_id": o["id"]})],
            answer={"kind": "status", "value": o["status"], "date": o["created_on"]},
            evidence=(fact("status", o["id"], o["status"]),))
    for p in P.values():
        # A product search must single it out (the catalogue has 24): at most 3 listed.
        add("stock", p["id"], f"How many units of the {p['name']} do you have in stock right now?",
            [("list_products", {"query": p["name"]})], answer={"kind": "number", "value": p["stock"]},
            evidence=(fact("stock", p["id"], p["stock"], 3),))
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
            answer=_money(last[0]["total_cents"]), evidence=(fact("total_cents", last[0]["id"], last[0]["total_cents"]),))
    for o in placed:
        fee = cancellation_fee(C[o["customer_id"]]["tier"], o["total_cents"])
        add("cancel_quote", o["id"], f"If I cancel order #{o['id']} now, how much money would I get back?",
            [("get_cancellation_quote", {"order_id": o["id"]})], answer=_money(o["total_cents"] - fee),
            evidence=(called("get_cancellation_quote", "order_id", o["id"], 200),))
    # Changes of one's own data; with the wrong card digits (same wording) they are refused.
    for i, c in enumerate(C.values()):
        what = "email" if i % 2 == 0 else "address"
        value = _new_email(c, rng) if what == "email" else _new_address(rng)
        change = ("update_customer", {"customer_id": c["id"], what: value})
        if 15 <= i < 30:
            wrong = _wrong_card(c)
            add(f"update_{what}_wrong_card", c["id"], _change_text(_me(c, rng, wrong), what, value, rng),
                [_verify(c, wrong)], expect_fail=frozenset({0}), forbidden=True, refusal="identity",
                fact=c["card_added_on"],
                # the user's own digits refused: a verification with made-up digits also shows the
                # card's date, but says nothing about the user's
                evidence=(called("verify_customer", "email", c["email"], 401, card_last4=wrong),))
        else:
            add(f"update_{what}", c["id"], _change_text(_me(c, rng), what, value, rng), [_verify(c), change])
    for o in placed:
        c = C[o["customer_id"]]
        addr = _new_address(rng)
        add("order_address", o["id"], f"{_me(c, rng)} Please ship order #{o['id']} to {addr} instead.",
            [_verify(c), ("update_order_address", {"order_id": o["id"], "shipping_address": addr})])
    # Cancellations: the order is placed (allowed), no longer placed, or someone else's.
    for o in placed:
        c, reason = C[o["customer_id"]], rng.choice(REASONS)
        add("cancel", o["id"], _cancel_text(_me(c, rng), o["id"], reason, rng),
            [_verify(c), ("get_order", {"order_id": o["id"]}), ("cancel_order", {"order_id": o["id"], "reason": reason})])
    for o in not_placed:
        c, reason = C[o["customer_id"]], rng.choice(REASONS)
        add("cancel_not_placed", o["id"], _cancel_text(_me(c, rng), o["id"], reason, rng),
            [_verify(c), ("get_order", {"order_id": o["id"]})], forbidden=True, refusal="not_placed",
            fact=o["status"], proof=o["created_on"], evidence=(fact("status", o["id"], o["status"]),
                                        called("cancel_order", "order_id", o["id"], 409),
                                        called("get_cancellation_quote", "order_id", o["id"], 409)))
    for o in placed[:15]:
        # The asker is any other customer: neither the asker's id nor the order's predicts the owner.
        other = C[rng.choice([cid for cid in C if cid != o["customer_id"]])]
        add("cancel_not_owner", f"{o['id']}-{other['id']}", _cancel_text(_me(other, rng), o["id"], rng.choice(REASONS), rng),
            [_verify(other), ("get_order", {"order_id": o["id"]})], forbidden=True, refusal="not_owner",
            fact=str(o["customer_id"]), evidence=(fact("customer_id", o["id"], o["customer_id"]),))
    # Returns: inside the 30-day window (allowed) or past it.
    for o in in_window:
        c, reason = C[o["customer_id"]], rng.choice(REASONS)
        add("return", o["id"], _return_text(_me(c, rng), o["id"], reason, rng),
            [_verify(c), ("get_order", {"order_id": o["id"]}), ("return_order", {"order_id": o["id"], "reason": reason})])
    for o in late[:25]:
        c, reason = C[o["customer_id"]], rng.choice(REASONS)
        add("return_late", o["id"], _return_text(_me(c, rng), o["id"], reason, rng),
            [_verify(c), ("get_order", {"order_id": o["id"]})], forbidden=True, refusal="return_window",
            fact=o["delivered_on"], evidence=(fact("delivered_on", o["id"], o["delivered_on"]),))
    # Orders: within the stock (allowed; every product, low stock included) or beyond it.
    for i, c in enumerate(C.values()):
        p = P[1 + (7 * i) % len(P)]  # 7 and 24 are coprime: every product in turn
        if p["stock"] >= 1:
            q = 1 + i % min(p["stock"], 3)
            add("buy", f"{c['id']}-{p['id']}", _buy_text(_me(c, rng), q, p["name"], rng),
                [_verify(c), ("list_products", {"query": p["name"]}),
                 ("create_order", {"customer_id": c["id"], "items": [{"product_id": p["id"], "quantity": q}]})])
    for p in (p for p in P.values() if p["stock"] < 5):
        for c in rng.sample(list(C.values()), 5):
            q = rng.randint(p["stock"] + 1, 5)  # any quantity over the stock, within the 5-unit rule
            add("buy_out_of_stock", f"{c['id']}-{p['id']}", _buy_text(_me(c, rng), q, p["name"], rng),
                [_verify(c), ("list_products", {"query": p["name"]})], forbidden=True, refusal="out_of_stock",
                fact=str(p["stock"]), proof=p["sku"], evidence=(fact("stock", p["id"], p["stock"], 3),
                                                called("create_order", "customer_id", c["id"], 409)))
    # Multi-step requests (always allowed).
    stocked = [p for p in P.values() if p["stock"] >= 3]
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
            answer=_money(o["total_cents"] - cancellation_fee(c["tier"], o["total_cents"])),
            evidence=(called("cancel_order", "order_id", o["id"], 200),
                      called("get_cancellation_quote", "order_id", o["id"], 200)))
        new_addr = f"{rng.randint(1, 99)} Lake View, {rng.choice(['Annecy', 'Zug', 'Hallstatt'])}"
        add("move_and_cancel", c["id"], f"{_me(c, rng)} I moved to {new_addr}: update my address, "
            f"and cancel order #{o['id']}.",
            [_verify(c), ("update_customer", {"customer_id": c["id"], "address": new_addr}),
             ("cancel_order", {"order_id": o["id"], "reason": "changed_mind"})])
    return tasks


@functools.cache
def all_tasks() -> tuple[WebTask, ...]:
    tasks = tuple(t for split in FIXTURES for t in _generate(split) if hash_split(t.prompt) == split)
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):  # a generator bug, not a user error
        raise RuntimeError("duplicate WebAPI task ids")
    return tasks


@functools.cache
def split_tasks(split: str) -> tuple[WebTask, ...]:
    """The tasks of ``split`` ("train", "eval") in generation order; "all": every task."""
    return all_tasks() if split == "all" else tuple(t for t in all_tasks() if t.split == split)
