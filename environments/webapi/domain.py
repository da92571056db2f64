"""The store's business rules, as functions over one transaction.

The server calls these for every request, and the task generator replays them on a fresh
fixture to compute each task's goal state, so the goal is what the rules produce, never a
hand-written table. Every function takes a :class:`~agentgym.environments.webapi.db.Tx`
and keyword arguments (path, query and body fields merged) and returns JSON data, or
raises :class:`DomainError` with an HTTP status and a readable detail.

Rules the API enforces: identity (a write needs ``verify_customer`` first and may only
touch that customer's data), stock limits, at most 10 units per line, the order state
machine (placed -> shipped -> delivered; only placed orders can be cancelled or
re-addressed, only delivered ones returned) and the cancellation fee (10 % for standard
tier, none for gold). Rules the API does *not* enforce are store policy the agent must
apply itself (see ``POLICY`` in ``tasks``): the 30-day return window and 5 units per product.
"""

from __future__ import annotations

from typing import Any

from agentgym.environments.webapi.db import Tx
from agentgym.environments.webapi.store_wire import TODAY

__all__ = ["MAX_LINE_QTY", "OPERATIONS", "DomainError", "cancellation_fee"]

FEE_RATE = {"standard": 0.10, "gold": 0.0}  # cancellation fee as a share of the order total
MAX_LINE_QTY = 10


class DomainError(Exception):
    """A request the rules refuse: ``status`` is the HTTP status, ``detail`` what the client reads."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def cancellation_fee(tier: str, total_cents: int) -> int:
    return int(total_cents * FEE_RATE.get(tier, 0.10))


def _customer(tx: Tx, customer_id: int) -> dict[str, Any]:
    row = tx.one("SELECT * FROM customers WHERE id = ?", [customer_id])
    if row is None:
        raise DomainError(404, f"customer {customer_id} not found")
    return row


def _order(tx: Tx, order_id: int) -> dict[str, Any]:
    row = tx.one("SELECT * FROM orders WHERE id = ?", [order_id])
    if row is None:
        raise DomainError(404, f"order {order_id} not found")
    return row


def _verified(tx: Tx, customer_id: int) -> None:
    row = tx.one("SELECT customer_id FROM session")
    if row is None:
        raise DomainError(403, "no customer is verified in this session: call verify_customer "
                               "with the customer's email and the last 4 digits of their card first")
    if row["customer_id"] != customer_id:
        raise DomainError(403, f"the verified customer is {row['customer_id']}, not {customer_id}: "
                               "changes may only touch the verified customer's own data")


_PRIVATE = ("card_last4", "card_added_on")  # never in an answer (the date only in a failed verification)


def _public(c: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in c.items() if k not in _PRIVATE}


def _restock(tx: Tx, order_id: int) -> None:
    for it in tx.all("SELECT product_id, quantity FROM order_items WHERE order_id = ?", [order_id]):
        tx.run("UPDATE products SET stock = stock + ? WHERE id = ?", [it["quantity"], it["product_id"]])


def _refund(tx: Tx, order_id: int, amount: int) -> None:
    if amount > 0:
        tx.insert("payments", {"id": tx.next_id("payments"), "order_id": order_id, "kind": "refund",
                               "amount_cents": amount})


# ---------------------------------------------------------------------------- reads
def list_products(tx: Tx, query: str | None = None, category: str | None = None) -> list[dict[str, Any]]:
    sql, args = "SELECT * FROM products WHERE 1 = 1", []
    if query:
        sql += " AND LOWER(name) LIKE ?"
        args.append(f"%{query.lower()}%")
    if category:
        sql += " AND category = ?"
        args.append(category)
    return tx.all(sql + " ORDER BY id", args)


def get_product(tx: Tx, product_id: int) -> dict[str, Any]:
    row = tx.one("SELECT * FROM products WHERE id = ?", [product_id])
    if row is None:
        raise DomainError(404, f"product {product_id} not found")
    return row


def find_customers(tx: Tx, email: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
    if not email and not name:
        raise DomainError(422, "give email or name to search customers")
    sql, args = "SELECT id, name FROM customers WHERE 1 = 1", []
    if email:
        sql += " AND LOWER(email) = ?"
        args.append(email.lower())
    if name:
        sql += " AND LOWER(name) LIKE ?"
        args.append(f"%{name.lower()}%")
    return tx.all(sql + " ORDER BY id", args)


def get_customer(tx: Tx, customer_id: int) -> dict[str, Any]:
    return _public(_customer(tx, customer_id))


def list_customer_orders(tx: Tx, customer_id: int, status: str | None = None) -> list[dict[str, Any]]:
    _customer(tx, customer_id)
    sql = "SELECT * FROM orders WHERE customer_id = ?"
    args: list[Any] = [customer_id]
    if status:
        sql += " AND status = ?"
        args.append(status)
    return tx.all(sql + " ORDER BY id", args)


def get_order(tx: Tx, order_id: int) -> dict[str, Any]:
    order = _order(tx, order_id)
    order["items"] = tx.all("SELECT i.product_id, p.name, i.quantity, i.unit_price_cents FROM order_items i "
                            "JOIN products p ON p.id = i.product_id WHERE i.order_id = ? ORDER BY i.product_id",
                            [order_id])
    order["payments"] = tx.all("SELECT kind, amount_cents FROM payments WHERE order_id = ? ORDER BY id",
                               [order_id])
    return order


def get_cancellation_quote(tx: Tx, order_id: int) -> dict[str, Any]:
    order = _order(tx, order_id)
    if order["status"] != "placed":
        raise DomainError(409, f"order {order_id} (ordered {order['created_on']}) is {order['status']}; "
                               "only placed orders can be cancelled")
    fee = cancellation_fee(_customer(tx, order["customer_id"])["tier"], order["total_cents"])
    return {"order_id": order_id, "fee_cents": fee, "refund_cents": order["total_cents"] - fee}


# ---------------------------------------------------------------------------- writes
def verify_customer(tx: Tx, email: str, card_last4: str) -> dict[str, Any]:
    row = tx.one("SELECT id, card_last4, card_added_on FROM customers WHERE LOWER(email) = ?", [email.lower()])
    if row is None:
        raise DomainError(401, "verification failed: no customer has this email")
    if row["card_last4"] != card_last4:
        # What a support agent can tell the caller: which card the account holds, by its date.
        raise DomainError(401, "verification failed: the card digits do not match the card on file "
                               f"(card added {row['card_added_on']})")
    tx.run("DELETE FROM session")
    tx.insert("session", {"customer_id": row["id"]})
    return {"customer_id": row["id"], "verified": True}


def update_customer(tx: Tx, customer_id: int, email: str | None = None,
                    address: str | None = None) -> dict[str, Any]:
    _customer(tx, customer_id)
    _verified(tx, customer_id)
    if email is None and address is None:
        raise DomainError(422, "nothing to update: give email and/or address")
    if email is not None:
        clash = tx.one("SELECT id FROM customers WHERE LOWER(email) = ? AND id <> ?", [email.lower(), customer_id])
        if clash is not None:
            raise DomainError(409, f"email {email} is already used by another customer")
        tx.run("UPDATE customers SET email = ? WHERE id = ?", [email, customer_id])
    if address is not None:
        tx.run("UPDATE customers SET address = ? WHERE id = ?", [address, customer_id])
    return get_customer(tx, customer_id)


def create_order(tx: Tx, customer_id: int, items: list[dict[str, Any]],
                 shipping_address: str | None = None) -> dict[str, Any]:
    cust = _customer(tx, customer_id)
    _verified(tx, customer_id)
    seen: set[int] = set()
    lines = []
    for it in items:
        pid, qty = it["product_id"], it["quantity"]
        if pid in seen:
            raise DomainError(422, f"product {pid} appears twice: use one line with the total quantity")
        seen.add(pid)
        if not 1 <= qty <= MAX_LINE_QTY:
            raise DomainError(422, f"quantity must be 1..{MAX_LINE_QTY}, got {qty} for product {pid}")
        prod = get_product(tx, pid)
        if prod["stock"] < qty:
            raise DomainError(409, f"insufficient stock for product {pid} ({prod['name']}, sku {prod['sku']}): "
                                   f"requested {qty}, available {prod['stock']}")
        lines.append((prod, qty))
    oid = tx.next_id("orders")
    total = sum(p["price_cents"] * q for p, q in lines)
    tx.insert("orders", {"id": oid, "customer_id": customer_id, "status": "placed", "created_on": TODAY,
                         "delivered_on": None, "shipping_address": shipping_address or cust["address"],
                         "total_cents": total})
    for prod, qty in lines:
        tx.insert("order_items", {"order_id": oid, "product_id": prod["id"], "quantity": qty,
                                  "unit_price_cents": prod["price_cents"]})
        tx.run("UPDATE products SET stock = stock - ? WHERE id = ?", [qty, prod["id"]])
    tx.insert("payments", {"id": tx.next_id("payments"), "order_id": oid, "kind": "charge", "amount_cents": total})
    return get_order(tx, oid)


def _owned(tx: Tx, order_id: int) -> dict[str, Any]:
    order = _order(tx, order_id)
    _verified(tx, order["customer_id"])
    return order


def update_order_address(tx: Tx, order_id: int, shipping_address: str) -> dict[str, Any]:
    order = _owned(tx, order_id)
    if order["status"] != "placed":
        raise DomainError(409, f"order {order_id} (ordered {order['created_on']}) is {order['status']}; "
                               "the address can only change "
                               "while the order is placed")
    tx.run("UPDATE orders SET shipping_address = ? WHERE id = ?", [shipping_address, order_id])
    return get_order(tx, order_id)


def cancel_order(tx: Tx, order_id: int, reason: str) -> dict[str, Any]:
    order = _owned(tx, order_id)
    if order["status"] != "placed":
        raise DomainError(409, f"order {order_id} (ordered {order['created_on']}) is {order['status']}; "
                               "only placed orders can be cancelled")
    fee = cancellation_fee(_customer(tx, order["customer_id"])["tier"], order["total_cents"])
    tx.run("UPDATE orders SET status = 'cancelled' WHERE id = ?", [order_id])
    _restock(tx, order_id)
    _refund(tx, order_id, order["total_cents"] - fee)
    return {**get_order(tx, order_id), "fee_cents": fee}


def return_order(tx: Tx, order_id: int, reason: str) -> dict[str, Any]:
    order = _owned(tx, order_id)
    if order["status"] != "delivered":
        raise DomainError(409, f"order {order_id} (ordered {order['created_on']}) is {order['status']}; "
                               "only delivered orders can be returned")
    tx.run("UPDATE orders SET status = 'returned' WHERE id = ?", [order_id])
    _restock(tx, order_id)
    _refund(tx, order_id, order["total_cents"])
    return get_order(tx, order_id)


# operationId -> rule. The OpenAPI document (``spec``) names the same operations.
OPERATIONS = {f.__name__: f for f in (
    list_products, get_product, find_customers, get_customer, list_customer_orders, get_order,
    get_cancellation_quote, verify_customer, update_customer, create_order, update_order_address,
    cancel_order, return_order)}
