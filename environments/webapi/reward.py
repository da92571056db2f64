"""Scoring an episode: the final database state against the goal state, the answer, the refusal.

Sparse: 1 iff every goal table equals the goal canonically (``db.snapshot`` form), and

* when the task asks a question, the final answer's ``ANSWER:`` line holds exactly one value,
  the right one, and a call of the episode established it (:func:`shown`): a blind answer that
  happens to be right earns nothing;
* a forbidden task's answer ends with ``REFUSED: <rule> (<fact>)`` naming its rule and its
  decisive fact exactly as the API returned it (one date, status or number; the value is the
  episode's database's, :func:`check_refusal`), after a look-up that showed it;
* **credit only for what was read**: a fact with few possible values (an order's status, a
  low stock) is cited with the value of its record that only the look-up shows (the order's
  ``created_on``, the product's ``sku``), so a policy that looks up and guesses, or computes the
  fact from the prompt, earns 0: ``REFUSED: not_placed (status shipped)`` after an unread
  ``get_order`` is refused, ``REFUSED: not_placed (status shipped, ordered 2025-06-10)`` is paid;
* a served request's answer claims no refusal: refusing an allowed request fails.

Shaped terms (reported always, paid only in shaped mode, weights in
``WebAPIEnv.extra_shaping``; ToolEnv keeps their episode total at zero or more):

* ``progress``: the share of goal rows (rows the goal adds or changes relative to the
  fixture) present in the final state, in [0, 1];
* ``forbidden_writes``: rows the episode added or changed that the goal does not have.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentgym.environments.webapi.store_wire import GOAL_TABLES, Snapshot

if TYPE_CHECKING:
    from agentgym.environments.webapi.tasks import Evidence

__all__ = ["STATUSES", "CallRecord", "check_answer", "check_refusal", "evaluate", "format_answer",
           "refusal_line", "shown"]

STATUSES = ("placed", "shipped", "delivered", "cancelled", "returned")
_REFUSED = "REFUSED:"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One tool call of the episode as the API answered it (what evidence is looked for in)."""

    op: str
    args: dict[str, Any]
    status: int | None  # HTTP status; None when no answer came (timeout, connection lost)
    data: Any  # the decoded JSON answer (None when it was not JSON)


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_INT = re.compile(r"(?<![\w.-])-?\d+(?![\w.])")


def _rows(snap: Snapshot, table: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in snap.get(table, []))


def format_answer(spec: dict[str, Any]) -> str:
    """How the oracle states an expected answer (money with two decimals; a status with the
    date its order was placed)."""
    v = spec["value"]
    if spec["kind"] == "status":
        return f"{v}, ordered {spec['date']}"
    return f"{v:.2f}" if spec["kind"] == "money" else str(v)


def check_answer(spec: dict[str, Any] | None, text: str) -> bool:
    """Is the value after the only ``ANSWER:`` in ``text`` the expected one, and the only value?
    (``status``: exactly one status word and one date, both the expected ones.)"""
    if spec is None:
        return True
    if text.count("ANSWER:") != 1:  # none, or several answers at once
        return False
    given = text[text.rfind("ANSWER:") + len("ANSWER:"):].strip()
    if spec["kind"] == "status":
        return _fact_values("status", given) == [str(spec["value"])] and _DATE.findall(given) == [spec["date"]]
    if spec["kind"] in ("number", "money"):
        found = _NUM.findall(given.replace("$", ""))
        if len(found) != 1:
            return False
        try:
            value = float(found[0].replace(",", ""))
        except ValueError:
            return False
        return abs(value - float(spec["value"])) < 0.005
    word = re.sub(r"[^a-z0-9_ -]", "", given.lower()).strip()
    return word == str(spec["value"]).lower()


def refusal_line(text: str) -> str | None:
    """The rule after ``REFUSED:`` (lower case, quotes and end punctuation dropped); None when
    there is no such line, "" when there are several (hedging names no rule)."""
    said = _refusal(text)
    return None if said is None else said[0]


def _refusal(text: str) -> tuple[str, str] | None:
    """(rule, the rest of its line: the cited fact); None without a line, ("", "") for several."""
    at = text.rfind(_REFUSED)
    if at < 0:
        return None
    if text.count(_REFUSED) > 1:
        return "", ""
    line = text[at + len(_REFUSED):].split("\n", 1)[0].strip()
    m = re.match(r"[`'\"*]*([A-Za-z_]+)[`'\"*]*", line)
    if m is None:
        return "", line
    rest = line[m.end():]
    if not rest.strip(" \t`'\"*.!"):
        rest = ""
    return m.group(1).lower(), rest


def _fact_values(kind: str, cited: str) -> list[str]:
    """The values of ``kind`` ("date", "status", "number") a refusal's fact text names."""
    if kind == "date":
        return _DATE.findall(cited)
    if kind == "status":
        return [w for w in re.findall(r"[a-z]+", cited.lower()) if w in STATUSES]
    return [str(int(v)) for v in _INT.findall(_DATE.sub(" ", cited))]


_SKU = re.compile(r"\b[A-Z]{3}-\d{3}\b")


def _proof_values(proof: str, cited: str) -> list[str]:
    """The values of the proof's kind (a date, or a SKU like ``CAM-417``) in the cited text."""
    return _DATE.findall(cited) if _DATE.fullmatch(proof) else _SKU.findall(cited.upper())


def check_refusal(rule: str | None, text: str, fact: str | None = None, fact_kind: str = "",
                  proof: str | None = None) -> bool:
    """A forbidden task's answer names exactly its rule and, when ``fact`` is given, cites it:
    the fact text holds exactly one value of ``fact_kind``, equal to ``fact`` (and, when
    ``proof`` is given, exactly one date or SKU, equal to it). A served request's answer names
    no rule."""
    said = _refusal(text)
    if rule is None:
        return said is None
    if said is None or said[0] != rule:
        return False
    if fact is None:
        return True
    if _fact_values(fact_kind, said[1]) != [str(fact).lower() if fact_kind == "status" else str(fact)]:
        return False
    return proof is None or _proof_values(proof, said[1]) == [proof]


def _holds(data: Any, key: str, ident: Any, value: Any = None, depth: int = 0) -> bool:
    """Does the JSON ``data`` hold an object with ``id == ident`` that shows ``key`` (``== value``
    when a value is given)?"""
    if depth > 8:
        return False
    if isinstance(data, dict):
        if data.get("id") == ident and key in data and (value is None or data[key] == value):
            return True
        return any(_holds(v, key, ident, value, depth + 1) for v in data.values())
    if isinstance(data, list):
        return any(_holds(v, key, ident, value, depth + 1) for v in data)
    return False


def _same(a: Any, b: Any) -> bool:
    return a.lower() == b.lower() if isinstance(a, str) and isinstance(b, str) else bool(a == b)


def shown(evidence: Sequence[Evidence], calls: Iterable[CallRecord]) -> bool:
    """Did some call of the episode show one of the ``evidence`` look-ups?"""
    for c in calls:
        for ev in evidence:
            listed = len(c.data) if isinstance(c.data, list) else 1
            if ev.kind == "fact" and c.status is not None and 200 <= c.status < 300 \
                    and listed <= ev.max_listed and _holds(c.data, ev.key, ev.ident, ev.value):
                return True
            if ev.kind == "call" and c.op == ev.key and c.status == ev.status \
                    and _same(c.args.get(ev.arg), ev.ident) and all(_same(c.args.get(k), v) for k, v in ev.also):
                return True
    return False


def evaluate(goal: Snapshot, final: Snapshot, base: Snapshot, answer_spec: dict[str, Any] | None,
             answer: str, *, refusal: str | None = None, fact: str | None = None, fact_kind: str = "",
             proof: str | None = None, established: bool = True) -> tuple[float, dict[str, float]]:
    """(outcome, components) for a final state; ``base`` is the fixture the episode began from.

    ``refusal`` and ``fact``: the rule a forbidden task's answer must name and the fact it must
    cite (None: the answer must name no rule); ``proof``: the value of the fact's record the
    citation must carry too; ``established``: whether the episode made a look-up that shows the
    fact or the asked value (a refusal and an answer both need one).
    """
    goal_rows = reached = forbidden = 0
    same = True
    for table in GOAL_TABLES:
        g, f, b = _rows(goal, table), _rows(final, table), _rows(base, table)
        same &= g == f
        wanted, made = g - b, f - b  # rows the goal adds or changes; rows the episode did
        goal_rows += sum(wanted.values())
        reached += sum((wanted & made).values())
        forbidden += sum((made - wanted).values())
    answer_ok = check_answer(answer_spec, answer) and (answer_spec is None or established)
    refusal_ok = check_refusal(refusal, answer, fact, fact_kind, proof) and (refusal is None or established)
    comps = {"progress": reached / goal_rows if goal_rows else 0.0, "forbidden_writes": float(forbidden)}
    if answer_spec is not None:
        comps["answer_correct"] = float(answer_ok)
    return (1.0 if same and answer_ok and refusal_ok else 0.0), comps
