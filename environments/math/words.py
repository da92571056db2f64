"""Templated word problems (the ``word_problem`` family): names, objects, numbers, one story each."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentgym.environments.math.generators import Draw

__all__ = ["word_problem"]

NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jon", "Kemi", "Liam")
ITEMS = ("apples", "marbles", "stickers", "books", "pencils", "cards", "shells", "coins")


def word_problem(d: Draw, lvl: int) -> tuple[str, str, str | None]:
    who, other = d.choice(NAMES), d.choice(NAMES)
    if other == who:
        other = NAMES[(NAMES.index(who) + 1) % len(NAMES)]
    item = d.choice(ITEMS)
    story = d.between(0, 1)
    if lvl == 0:
        a, b = d.between(5, 40), d.between(2, 20)
        if story:
            return (f"{who} has {a} {item} and gets {b} more. How many {item} does {who} have now?",
                    str(a + b), f"{a} + {b}")
        a += b
        return (f"{who} has {a} {item} and gives {b} to {other}. How many {item} does {who} have left?",
                str(a - b), f"{a} - {b}")
    if lvl == 1:
        n, k = d.between(3, 12), d.between(2, 15)
        if story:
            return (f"{who} buys {n} boxes with {k} {item} in each box. How many {item} is that in total?",
                    str(n * k), f"{n} * {k}")
        return (f"{who} shares {n * k} {item} equally among {n} friends. How many {item} does each friend get?",
                str(k), f"{n * k} / {n}")
    price, n, paid = d.between(2, 9), d.between(3, 9), 0
    if story:
        paid = price * n + d.between(1, 20)
        return (f"{who} buys {n} notebooks at {price} dollars each and pays with {paid} dollars. "
                f"How much change, in dollars, does {who} get?", str(paid - price * n),
                f"{paid} - {n} * {price}")
    speed, hours, extra = d.between(30, 70), d.between(2, 5), d.between(10, 60)
    return (f"A train travels at {speed} km per hour for {hours} hours, then {extra} km more. "
            f"How many km does it travel in total?", str(speed * hours + extra),
            f"{speed} * {hours} + {extra}")
