"""The store's schema and a tiny transaction helper that speaks SQLite and PostgreSQL alike.

Domain rules (``domain``), the seeded fixture (``fixture``) and the server's storage backends
(``storage``) all talk to the database through :class:`Tx`, so the same rule code runs in
the server and in the task generator that computes goal states. Ids of new rows are
assigned as ``max(id) + 1`` inside the transaction: portable across both databases and
deterministic, so a goal state computed offline matches the one the agent produces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentgym.environments.webapi.store_wire import GOAL_TABLES, Snapshot

__all__ = ["SCHEMA", "TABLES", "Tx", "create_schema", "snapshot"]

# Table -> column DDL. Column order is the canonical order of snapshot rows.
TABLES: dict[str, list[tuple[str, str]]] = {
    "customers": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT NOT NULL"),
                  ("email", "TEXT NOT NULL UNIQUE"), ("card_last4", "TEXT NOT NULL"),
                  ("tier", "TEXT NOT NULL"), ("address", "TEXT NOT NULL"),
                  ("card_added_on", "TEXT NOT NULL")],
    "products": [("id", "INTEGER PRIMARY KEY"), ("sku", "TEXT NOT NULL UNIQUE"),
                 ("name", "TEXT NOT NULL"), ("category", "TEXT NOT NULL"),
                 ("price_cents", "INTEGER NOT NULL"), ("stock", "INTEGER NOT NULL")],
    "orders": [("id", "INTEGER PRIMARY KEY"), ("customer_id", "INTEGER NOT NULL"),
               ("status", "TEXT NOT NULL"), ("created_on", "TEXT NOT NULL"),
               ("delivered_on", "TEXT"), ("shipping_address", "TEXT NOT NULL"),
               ("total_cents", "INTEGER NOT NULL")],
    "order_items": [("order_id", "INTEGER NOT NULL"), ("product_id", "INTEGER NOT NULL"),
                    ("quantity", "INTEGER NOT NULL"), ("unit_price_cents", "INTEGER NOT NULL")],
    "payments": [("id", "INTEGER PRIMARY KEY"), ("order_id", "INTEGER NOT NULL"),
                 ("kind", "TEXT NOT NULL"), ("amount_cents", "INTEGER NOT NULL")],
    # Who verified their identity in this episode (at most one row). Not goal state.
    "session": [("customer_id", "INTEGER NOT NULL")],
}
SCHEMA: list[str] = [
    f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in cols)}"
    + (", PRIMARY KEY (order_id, product_id))" if name == "order_items" else ")")
    for name, cols in TABLES.items()
]
# Payment ids depend on the order in which refunds were made, which the rules do not fix:
# the canonical form drops them (a payment is its order, kind and amount).
_DROP_ID = {"payments"}


class Tx:
    """One open transaction. ``sql`` uses ``?`` placeholders on every backend."""

    def __init__(self, conn: Any, paramstyle: str = "qmark") -> None:
        self.conn = conn
        self._pg = paramstyle != "qmark"

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._pg else sql

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(self._sql(sql), tuple(params))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.conn.execute(self._sql(sql), tuple(params))

    def next_id(self, table: str) -> int:
        row = self.one(f"SELECT COALESCE(MAX(id), 0) + 1 AS n FROM {table}")
        assert row is not None
        return int(row["n"])

    def insert(self, table: str, row: dict[str, Any]) -> None:
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.run(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(row.values()))


def create_schema(tx: Tx) -> None:
    for ddl in SCHEMA:
        tx.run(ddl)


def snapshot(tx: Tx) -> Snapshot:
    """The goal tables as canonical, sorted rows of JSON scalars (what rewards compare)."""
    out: Snapshot = {}
    for table in GOAL_TABLES:
        cols = [c for c, _ in TABLES[table] if not (table in _DROP_ID and c == "id")]
        rows = tx.all(f"SELECT {', '.join(cols)} FROM {table}")
        canon = [[r[c] for c in cols] for r in rows]
        # The only nullable column is text (orders.delivered_on): None sorts as "".
        out[table] = sorted(canon, key=lambda row: ["" if v is None else v for v in row])
    return out
