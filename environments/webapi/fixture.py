"""The seeded fixture every episode starts from: a small outdoor-gear store.

40 customers, 24 products (drawn from a catalogue of 36, with their SKUs and stock), ~110
orders in every state (placed, shipped, delivered inside and outside the 30-day return window,
cancelled, returned) with their items and payments. ``random.Random(seed)`` keeps it identical
across platforms and Python versions; each split has its own seed (``store_wire.FIXTURES``),
so the train and eval stores share no customer, order or stock level by design.
"""

from __future__ import annotations

import datetime as dt
import random

from agentgym.environments.webapi.db import Tx
from agentgym.environments.webapi.store_wire import TODAY

__all__ = ["seed_fixture"]

FIRST = ["Ada", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jade",
         "Kofi", "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara"]
LAST = ["Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad", "Kowalski",
        "Reyes", "Mbeki", "Fischer", "Costa", "Ivanova", "Nakamura", "Olsen", "Duarte"]
CITIES = ["Lyon", "Porto", "Oslo", "Kyoto", "Austin", "Leeds", "Graz", "Cork", "Turin", "Bergen"]
STREETS = ["Elm St", "Harbour Rd", "Mill Lane", "Station Ave", "Park Row", "Quay St"]
PRODUCTS = [  # (name, category, price in cents)
    ("Trail Runner Shoes", "footwear", 8999), ("Alpine Hiking Boots", "footwear", 15950),
    ("Camp Sandals", "footwear", 3495), ("Wool Hiking Socks", "apparel", 1599),
    ("Rain Shell Jacket", "apparel", 12900), ("Fleece Pullover", "apparel", 5900),
    ("Down Vest", "apparel", 9450), ("Merino Base Layer", "apparel", 6475),
    ("Sun Hat", "apparel", 2450), ("Daypack 20L", "packs", 6999), ("Trekking Pack 55L", "packs", 18900),
    ("Hydration Bladder 2L", "packs", 2995), ("Dome Tent 2P", "camping", 24900),
    ("Sleeping Bag -5C", "camping", 17500), ("Sleeping Pad", "camping", 7950),
    ("Camp Stove", "camping", 5499), ("Titanium Mug", "camping", 2899),
    ("Headlamp 400lm", "electronics", 3999), ("Solar Charger", "electronics", 6950),
    ("GPS Watch", "electronics", 29900), ("Trekking Poles", "accessories", 8900),
    ("Water Filter", "accessories", 4450), ("First Aid Kit", "accessories", 2799),
    ("Compass", "accessories", 1999), ("Gaiters", "apparel", 3950), ("Softshell Pants", "apparel", 8450),
    ("Bivy Sack", "camping", 15900), ("Camp Chair", "camping", 5950), ("Dry Bag 10L", "packs", 2199),
    ("Running Vest", "packs", 9900), ("Approach Shoes", "footwear", 13900), ("Camp Lantern", "electronics", 3450),
    ("Bear Canister", "accessories", 7995), ("Insulated Bottle", "accessories", 3299),
    ("Trail Gloves", "apparel", 2950), ("Emergency Blanket", "accessories", 899),
]
N_PRODUCTS = 24
N_CUSTOMERS, N_ORDERS = 40, 110


def _day(offset: int) -> str:
    return (dt.date.fromisoformat(TODAY) - dt.timedelta(days=offset)).isoformat()


def seed_fixture(tx: Tx, seed: int, part: int = 0) -> None:
    """Fill an empty schema with the store's data for ``seed``; its customers come from ``part``
    (0 or 1) of the names, so two stores seeded with different parts share no customer."""
    rng = random.Random(seed)
    cards = random.Random(seed + 1)  # its own stream: the rest of the fixture is as it was
    pool = [(f, s) for f in FIRST for s in LAST]
    random.Random(0).shuffle(pool)
    half = len(pool) // 2
    names = rng.sample(pool[part * half:(part + 1) * half], N_CUSTOMERS)
    customers = []
    for i, (first, last) in enumerate(names, start=1):
        addr = f"{rng.randint(1, 199)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"
        row = {"id": i, "name": f"{first} {last}", "email": f"{first}.{last}@example.com".lower(),
               "card_last4": f"{rng.randint(0, 9999):04d}", "tier": "gold" if rng.random() < 0.3 else "standard",
               "address": addr, "card_added_on": _day(cards.randint(40, 1500))}
        customers.append(row)
        tx.insert("customers", row)
    catalogue = rng.sample(PRODUCTS, N_PRODUCTS)
    skus = rng.sample(range(100, 1000), N_PRODUCTS)  # drawn: a SKU says nothing about its product
    for i, (name, cat, price) in enumerate(catalogue, start=1):
        # A few items are sold out or nearly so: stock limits bite in tasks.
        stock = rng.choice([0, 1, 2, 3, 4]) if i % 6 == 0 else rng.randint(5, 40)
        tx.insert("products", {"id": i, "sku": f"{cat[:3].upper()}-{skus[i - 1]}", "name": name,
                               "category": cat, "price_cents": price, "stock": stock})
    pay_id = 1
    # Every status with both sides of the return window represented.
    statuses = ["placed"] * 3 + ["shipped"] * 2 + ["delivered"] * 4 + ["cancelled", "returned"]
    for oid in range(1, N_ORDERS + 1):
        cust = customers[rng.randrange(N_CUSTOMERS)]
        status = rng.choice(statuses)
        if status == "placed":
            created, delivered = rng.randint(0, 3), None
        elif status == "shipped":
            created, delivered = rng.randint(2, 8), None
        else:
            created = rng.randint(8, 80)
            delivered = max(0, created - rng.randint(3, 7)) if status != "cancelled" else None
        lines = rng.sample(range(1, N_PRODUCTS + 1), rng.randint(1, 3))
        total = 0
        for pid in lines:
            qty = rng.randint(1, 3)
            price = catalogue[pid - 1][2]
            total += qty * price
            tx.insert("order_items", {"order_id": oid, "product_id": pid, "quantity": qty,
                                      "unit_price_cents": price})
        tx.insert("orders", {"id": oid, "customer_id": cust["id"], "status": status,
                             "created_on": _day(created),
                             "delivered_on": _day(delivered) if delivered is not None else None,
                             "shipping_address": cust["address"], "total_cents": total})
        tx.insert("payments", {"id": pay_id, "order_id": oid, "kind": "charge", "amount_cents": total})
        pay_id += 1
        if status in ("cancelled", "returned"):
            tx.insert("payments", {"id": pay_id, "order_id": oid, "kind": "refund", "amount_cents": total})
            pay_id += 1
