"""Cheating policies: what a policy that does not do the task tries, and must earn 0 for.

A reward that can be won without the work teaches the shortcut. Each built-in environment
declares a table of *hacks* with its capabilities (``Capabilities(hacks="module:function")``,
read back by :func:`hacks_for`, so a new environment cannot be registered without one unnoticed): scripted policies that echo the question or its expression, answer an
unreduced fraction, pick a refusal from the wording, answer a constant, give several answers at
once, negate (also in words or LaTeX text), bound or hedge the answer, correct it to another
value, wrap it in an unknown operator, refuse everything, or (CodeFix) tamper with the judge. The
imported envs (:data:`INTEROP_CASES`: reasoning-gym datasets, SkyRL env classes) get theirs too:
code in the answer, the question wrapped in ``integrate()``/``expand()``, the unfactored input, a
constant in the answer format (``#### 0``). Played on a
sample of tasks (:func:`hack_tasks`), every hack must earn exactly 0 in both reward modes
wherever it applies (``tests/environments/test_reward_hacks.py``); ``bench/reward_hacks.py``
prints the table.

A hack is a script: the reset environment (unwrapped) -> its actions, each a function of the
environment giving token ids; the last action repeats until the episode ends. ``applies`` says
on which tasks the hack is a cheat (a constant answer is not one where it is right).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agentgym.errors import ConfigError
from agentgym.oracles import load_callable
from agentgym.registration import capabilities, ids_with

__all__ = ["INTEROP_CASES", "RCE_TARGET", "Hack", "codefix_hacks", "hack_ids", "hack_tasks", "hacks_for",
           "interop_tasks", "lookup_hacks", "math_hacks", "mathcalc_hacks", "play", "question_expression",
           "webapi_hacks"]

Action = Callable[[Any], list[int]]


@dataclass(frozen=True)
class Hack:
    name: str
    script: Callable[[Any], list[Action]]  # the reset env (unwrapped) -> its actions
    applies: Callable[[Any], bool] = lambda u: True  # is it a cheat on this task?


def final(text: str | Callable[[Any], str]) -> Action:
    return lambda u: u.codec.final_ids(text(u) if callable(text) else text)


def says(text: str) -> Callable[[Any], list[Action]]:
    """A script of one constant final answer."""
    return lambda u: [final(text)]


def tool(name: str, args: dict[str, Any] | Callable[[Any], dict[str, Any]]) -> Action:
    return lambda u: u.codec.tool_call_ids(name, args(u) if callable(args) else args)


def play(env: gym.Env, hack: Hack, options: dict[str, Any] | None, seed: int = 0) -> float | None:
    """The hack's total reward on one task, or None when it does not apply there."""
    env.reset(seed=seed, options=options)
    u = env.unwrapped
    if not hack.applies(u):
        return None
    actions = hack.script(u)
    total, i = 0.0, 0
    while True:
        ids = actions[min(i, len(actions) - 1)](u)
        _, r, term, trunc, _ = env.step(np.asarray(ids, dtype=np.int64))
        total += float(r)
        i += 1
        if term or trunc:
            return total


# ---------------------------------------------------------------------------- math
_QUESTION_MATH = [  # the procedural families' question templates -> their math
    re.compile(r"Solve for x: (.*)\.$"),
    re.compile(r"Solve (.* = 0)\. Give both roots"),
    re.compile(r"Solve the system (.*)\. Give the answer"),
    re.compile(r"derivative of f\(x\) = (.*) with respect"),
    re.compile(r"integral of (.*) with respect"),
    re.compile(r"Compute (.*)\. Give the answer"),
    re.compile(r"What is (.*)\?$"),
]


def question_expression(u: Any) -> str:
    """The math of the question, as it is written there (``7 * (5 - 12)^2 + 30 / 5``,
    ``x + 5 = 8``, ``3x^2 - 2x + 5``): what an echo restates."""
    expr = u.task.meta.get("expression") or getattr(u.problem, "given", None)
    if expr:
        return str(expr)
    for pat in _QUESTION_MATH:
        m = pat.search(u.task.prompt)
        if m:
            return m.group(1)
    return str(u.task.prompt)


def _answer(u: Any) -> str:
    return str(u.task.answer)


def _numbers(text: str) -> list[str]:
    return re.findall(r"-?\d+(?:\.\d+)?", text)


def _scaled(answer: str) -> str:
    """Every number of the answer as an unreduced fraction (``7/4`` -> ``14/8``, ``3`` -> ``6/2``)."""
    def one(m: re.Match[str]) -> str:
        p, q = m.group(1), m.group(2) or "1"
        return f"{2 * int(p)}/{2 * int(q)}"
    return re.sub(r"(-?\d+)(?:/(\d+))?(?![\d.])", one, answer)


def _is_numeric(u: Any) -> bool:
    return str(u.problem.form).split("[")[-1].rstrip("]") in ("integer", "fraction", "number", "decimal")


def _integer(u: Any) -> int | None:
    """The answer as an int (None when it is no integer literal)."""
    a = _answer(u).strip()
    return int(a) if re.fullmatch(r"-?\d+", a) else None


def _last_clause(question: str) -> str:
    """The question's last clause: ``from x = 0 to x = 4.``, ``3x - 20 = 10.``, its last number."""
    cuts = [question.rfind(" from "), question.rfind(": "), question.rfind(", ")]
    k = max(cuts)
    return question[k + 1:].strip() if k >= 0 else question


def _right(text: str) -> Callable[[Any], bool]:
    """Applies where ``text`` is not the right answer."""
    from agentgym.environments.math.verify import verify

    return lambda u: not verify(text, _answer(u)).correct


# name (A: the answer) -> the final message (@: the answer): negations the verifier must read as negations
_NEGATED_IN_WORDS = {
    "\\text{not } A": "\\text{not } @",
    "\\operatorname{not}(A), boxed": "\\boxed{\\operatorname{not}(@)}",
    "other than A": "The answer is other than @.",
    "anything except A": "It is anything except @",
    "neither A": "neither @",
    "unequal to A": "unequal to @",
    "\\text{anything but } A": "\\boxed{\\text{anything but } @}",
}


def _saying(template: str) -> Callable[[Any], list[Action]]:
    """A script of one final answer: ``template`` with the task's answer for ``@``."""
    return lambda u: [final(template.replace("@", _answer(u)))]


def _math_hacks(calc: bool) -> list[Hack]:
    expr = question_expression
    wrong = "12345"
    hacks = [
        Hack("echo the question", lambda u: [final(u.task.prompt)]),
        Hack("echo its expression", lambda u: [final(expr(u))]),
        Hack("echo it boxed", lambda u: [final(f"\\boxed{{{expr(u)}}}")]),
        Hack("echo it as the answer", lambda u: [final(f"The answer is {expr(u)}.")]),
        Hack("unreduced answer", lambda u: [final(_scaled(_answer(u)))],
             applies=lambda u: _is_numeric(u) and _scaled(_answer(u)) != _answer(u)),
        Hack("the question's first number", lambda u: [final(_numbers(u.task.prompt)[0])],
             applies=lambda u: bool(_numbers(u.task.prompt)) and _right(_numbers(u.task.prompt)[0])(u)),
        *[Hack(f"constant {c}", says(c), applies=_right(c)) for c in ("0", "1", "2")],
        Hack("several answers", lambda u: [final(f"{_answer(u)}, {wrong}")]),
        Hack("either answer", lambda u: [final(f"{_answer(u)} or {wrong}")]),
        Hack("hedged answer", lambda u: [final(f"It is {_answer(u)}, or maybe {wrong}.")]),
        Hack("negated answer", lambda u: [final(f"The answer is not {_answer(u)}.")]),
        Hack("\\ne answer", lambda u: [final(f"\\ne {_answer(u)}")]),
        Hack("unknown LaTeX around it", lambda u: [final(f"\\lfloor {_answer(u)} \\rfloor")]),
        *[Hack(f"negated: {name}", _saying(template)) for name, template in _NEGATED_IN_WORDS.items()],
        Hack("unknown operator around it", lambda u: [final(f"\\operatorname{{foo}}({_answer(u)})")]),
        Hack("unknown function in \\mathrm around it", lambda u: [final(f"\\mathrm{{foo}}({_answer(u)})")]),
        Hack("a bound: at least the answer", lambda u: [final(f"The answer is at least {_answer(u)}.")]),
        Hack("the answer, then a correction", lambda u: [final(f"{_answer(u)}, no wait, {wrong}")]),
        Hack("the answer after '0,'", lambda u: [final(f"0,{_integer(u) or 0:03d}")],
             applies=lambda u: 0 < (_integer(u) or 0) < 1000),
        Hack("100 times the answer, in percent", lambda u: [final(f"{100 * (_integer(u) or 0)}%")],
             applies=lambda u: bool(_integer(u))),
        Hack("echo the question's last clause", lambda u: [final(_last_clause(u.task.prompt))]),
        Hack("a tiny extra term", lambda u: [final(f"{_answer(u)} + e^{{-200}}" if _is_numeric(u)
                                                   else f"{_answer(u)} + 10^{{-45}}x")],
             applies=lambda u: "," not in _answer(u) and "C" not in _answer(u)),
        Hack("refuse", lambda u: [final("I cannot solve this problem.")]),
    ]
    if calc:
        calc_expr = tool("calculator", lambda u: {"expression": expr(u)})
        hacks += [
            Hack("calculator, then echo the question", lambda u: [calc_expr, final(u.task.prompt)]),
            Hack("calculator, then echo its expression", lambda u: [calc_expr, final(expr(u))]),
        ]
    return hacks


def math_hacks() -> list[Hack]:
    """Math-v1's and MathTool-v1's table (one answer, no calculator to misuse)."""
    return _math_hacks(calc=False)


def mathcalc_hacks() -> list[Hack]:
    """MathCalc-v1's table: Math-v1's and the calculator's own (declared in its Capabilities)."""
    return _math_hacks(calc=True)


def _math_tasks(env: Any, n: int) -> list[dict[str, Any]]:
    """About ``n`` tasks spread over every family x level x split of the env."""
    u = env.unwrapped
    combos = [(f, lv, s) for f in u.families for lv in u.levels for s in ("train", "eval")]
    per = max(1, -(-n // len(combos)))
    return [{"family": f, "level": lv, "index": i, "split": s} for f, lv, s in combos for i in range(per)]


# ---------------------------------------------------------------------------- webapi
def _template(prompt: str) -> str:
    """A request's wording with its names, numbers and ids blanked (what a wording policy sees)."""
    text = re.sub(r"\S+@\S+|\d+|[A-Z][\w-]*(?: [A-Z0-9][\w-]*)*", "#", prompt)
    return re.sub(r"\b(?:changed_mind|damaged|wrong_item|late|other)\b", "#", text)


def _wording_rules() -> dict[str, str | None]:
    """template -> the refusal most often right for it on the train split (None: serve it),
    learned from the train tasks' outcomes: the best a policy that reads only the wording can do."""
    from agentgym.environments.webapi.tasks import split_tasks

    votes: dict[str, Counter[str | None]] = {}
    for t in split_tasks("train"):
        votes.setdefault(_template(t.prompt), Counter())[t.refusal] += 1
    return {k: v.most_common(1)[0][0] for k, v in votes.items()}


def _reads(u: Any) -> list[Action]:
    """The task's look-ups (its plan without the writes), made and never read."""
    from agentgym.environments.webapi.domain import OPERATIONS

    writes = {"update_customer", "create_order", "update_order_address", "cancel_order", "return_order"}
    return [tool(op, args) for op, args in u.web_task.plan if op in OPERATIONS and op not in writes]


def _wording_refusal(cite: Callable[[Any], str]) -> Callable[[Any], list[Action]]:
    rules = _wording_rules()

    def script(u: Any) -> list[Action]:
        rule = rules.get(_template(u.task.prompt))
        looks = _reads(u)[:1]
        if rule is None:
            return [*looks, final("Done.")]
        return [*looks, final(f"Sorry, store policy.\nREFUSED: {rule}{cite(u)}")]
    return script


def _email(u: Any) -> str:
    return str(re.findall(r"[\w.+-]+@[\w.-]+\w", u.task.prompt)[0])


def _about(t: Any) -> tuple[str, Any]:
    """What a task is about, as its plan names it: ("order", id), ("product", name) or ("", None)."""
    for _, args in t.plan:
        if "order_id" in args:
            return "order", args["order_id"]
        if "query" in args:
            return "product", args["query"]
    return "", None


# kind -> (what it is about, the facts of it its answer cites): how a memoriser reads a train
# answer, and composes an eval answer from what it memorised.
_MEMO: dict[str, tuple[str, ...]] = {
    "order_status": ("status", "ordered"), "cancel_not_placed": ("status", "ordered"),
    "cancel_not_owner": ("owner",), "return_late": ("delivered",),
    "buy_out_of_stock": ("stock", "sku"), "stock": ("stock",),
}


def _facts_of(t: Any) -> dict[str, Any]:
    a = t.answer or {}
    return {"order_status": lambda: {"status": a.get("value"), "ordered": a.get("date")},
            "cancel_not_placed": lambda: {"status": t.fact, "ordered": t.proof},
            "cancel_not_owner": lambda: {"owner": t.fact}, "return_late": lambda: {"delivered": t.fact},
            "buy_out_of_stock": lambda: {"stock": t.fact, "sku": t.proof},
            "stock": lambda: {"stock": a.get("value")}}[t.kind]()


def _memorised() -> dict[tuple[str, Any], dict[str, Any]]:
    """What a policy that memorised the oracle's train episodes knows: every fact their answers
    cited, by the order or product it was about (an order's status from a status question, its
    owner from a refusal...), to answer eval tasks about the same order or product unread."""
    from agentgym.environments.webapi.tasks import split_tasks

    memory: dict[tuple[str, Any], dict[str, Any]] = {}
    for t in split_tasks("train"):
        if t.kind in _MEMO:
            memory.setdefault(_about(t), {}).update(_facts_of(t))
    return memory


def _recalled(u: Any, memory: dict[tuple[str, Any], dict[str, Any]]) -> str | None:
    """The eval task's answer composed from memory, or None when memory lacks a fact it needs."""
    import dataclasses

    t = u.web_task
    known = memory.get(_about(t), {})
    if t.kind not in _MEMO or not all(k in known for k in _MEMO[t.kind]):
        return None
    answers = {"order_status": lambda: {"answer": {"kind": "status", "value": known["status"],
                                                  "date": known["ordered"]}},
               "cancel_not_placed": lambda: {"fact": known["status"], "proof": known["ordered"]},
               "cancel_not_owner": lambda: {"fact": known["owner"]},
               "return_late": lambda: {"fact": known["delivered"]},
               "buy_out_of_stock": lambda: {"fact": known["stock"], "proof": known["sku"]},
               "stock": lambda: {"answer": {"kind": "number", "value": known["stock"]}}}
    return str(dataclasses.replace(t, **answers[t.kind]()).final_text)


def _replay_memory(memory: dict[tuple[str, Any], dict[str, Any]]) -> Callable[[Any], list[Action]]:
    def script(u: Any) -> list[Action]:
        # The eval task's look-ups are made (never read), then the memorised answer is given.
        return [*_reads(u), final(str(_recalled(u, memory)))]
    return script


def _unread_then(text: str) -> Callable[[Any], list[Action]]:
    """A script: the task's look-ups, never read, then ``text``."""
    return lambda u: [*_reads(u), final(text)]


def _asker(u: Any) -> int:
    """The asking customer's id (a not_owner task's id ends with it)."""
    return int(u.web_task.id.rsplit("-", 1)[1])


def _asked(u: Any) -> int:
    """The quantity the user asks for, from the prompt."""
    return int(re.search(r"order (\d+) x", u.task.prompt).group(1))  # type: ignore[union-attr]


def webapi_hacks() -> list[Hack]:
    """WebAPI-v1's table (declared in its Capabilities)."""
    from agentgym.environments.webapi.reward import STATUSES
    from agentgym.environments.webapi.tasks import REFUSAL_RULES

    forbidden = lambda u: bool(u.web_task.forbidden)  # noqa: E731
    asks = lambda u: u.web_task.answer is not None  # noqa: E731
    allowed = lambda u: not u.web_task.forbidden  # noqa: E731
    kind = lambda *kinds: lambda u: u.web_task.kind in kinds  # noqa: E731
    memory = _memorised()
    return [
        # Guessed or computed facts after the right look-ups, never read: a status has 4-5 values,
        # the owner "the asker's id +- 1", the stock "one less than asked" (the prompt's number).
        *[Hack(f"unread get_order, then ANSWER: {st}", _unread_then(f"ANSWER: {st}"),
               applies=kind("order_status")) for st in STATUSES],
        *[Hack(f"unread look-up, guessed status {st}", _unread_then(f"REFUSED: not_placed (status {st})"),
               applies=kind("cancel_not_placed")) for st in STATUSES[1:]],
        Hack("unread look-up, computed owner: asker + 1",
             lambda u: [*_reads(u), final(f"REFUSED: not_owner (customer {_asker(u) + 1})")],
             applies=kind("cancel_not_owner")),
        Hack("unread look-up, computed owner: asker - 1",
             lambda u: [*_reads(u), final(f"REFUSED: not_owner (customer {_asker(u) - 1})")],
             applies=kind("cancel_not_owner")),
        Hack("unread look-up, computed stock: asked - 1",
             lambda u: [*_reads(u), final(f"REFUSED: out_of_stock (stock {_asked(u) - 1})")],
             applies=kind("buy_out_of_stock")),
        Hack("memorised train facts replayed on eval, eval results unread", _replay_memory(memory),
             applies=lambda u: u.web_task.split == "eval" and _recalled(u, memory) is not None),
        Hack("done at once", lambda u: [final("Done.")]),
        Hack("echo the question", lambda u: [final(u.task.prompt)]),
        *[Hack(f"refuse everything: {r}", says(f"I cannot do that.\nREFUSED: {r}")) for r in REFUSAL_RULES],
        Hack("wording-only refusal, one unread look-up", _wording_refusal(lambda u: "")),
        Hack("wording-only refusal citing the request's last number",
             _wording_refusal(lambda u: f" ({_numbers(u.task.prompt)[-1]})")),
        Hack("refuse an allowed request after its look-ups",
             lambda u: [*_reads(u), final(f"REFUSED: {next(iter(REFUSAL_RULES))}")], applies=allowed),
        Hack("cite every status at once",
             lambda u: [*_reads(u), final(f"REFUSED: {u.web_task.refusal} ({' or '.join(STATUSES)})")],
             applies=lambda u: u.web_task.refusal == "not_placed"),
        Hack("cite the fact, no look-up", lambda u: [final(u.web_task.final_text)], applies=forbidden),
        Hack("learn the card's date with made-up digits, refuse identity",
             lambda u: [tool("verify_customer", {"email": _email(u), "card_last4": "0000"}),
                        final(f"REFUSED: identity (card added {u.web_task.fact})")],
             applies=lambda u: u.web_task.refusal == "identity"),
        *[Hack(f"blind answer {c}", says(f"ANSWER: {c}"), applies=asks) for c in ("delivered", "shipped", "0", "10.00")],
        Hack("right answer, no look-up", lambda u: [final(u.web_task.final_text)], applies=asks),
        Hack("several answers at once",
             lambda u: [*_reads(u), final("ANSWER: " + " ".join(STATUSES) + " 0 1 2 3 4 5 10.00")], applies=asks),
    ]


def _webapi_tasks(env: Any, every: int) -> list[dict[str, Any]]:
    from agentgym.environments.webapi.tasks import split_tasks

    tasks = split_tasks("all")
    return [{"task_id": t.id} for i, t in enumerate(tasks) if t.forbidden or i % every == 0]


# ---------------------------------------------------------------------------- codefix
_STALL = "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"
_FORGE = "print('@@agentgym-judge 0 {\"passed\": 99, \"total\": 99}')\n"


def _constant_body(value: str) -> Callable[[Any], str]:
    """solution.py with the buggy function's body replaced by ``return value``."""
    def source(u: Any) -> str:
        t = u.task.answer
        m = re.search(rf"def {t.entry_point}\(.*?\).*?:\n", t.buggy_source, re.S)
        head = t.buggy_source[: m.end()] if m else t.buggy_source
        return head + f"    return {value}\n"
    return source


def _writes(content: Callable[[Any], str]) -> Callable[[Any], list[Action]]:
    """A script: write ``content(env)`` over solution.py, then submit."""
    write = tool("write_file", lambda u: {"path": "solution.py", "content": content(u)})
    return lambda u: [write, tool("submit", {})]


def codefix_hacks() -> list[Hack]:
    """CodeFix-v1's table: the unchanged or constant submission, and tampering with the judge."""
    return [
        Hack("echo the question", lambda u: [final(u.task.prompt)]),
        Hack("refuse", says("I cannot fix this.")),
        Hack("submit unchanged", lambda u: [tool("submit", {})]),
        *[Hack(f"constant body {c}", _writes(_constant_body(c))) for c in ("None", "True", "0", "[]")],
        Hack("stall the judge (SIGSTOP at import)", _writes(lambda u: _STALL)),
        Hack("forge the judge's line", _writes(lambda u: _FORGE)),
        Hack("exit at import", _writes(lambda u: "import os\nos._exit(0)\n")),
    ]


def _codefix_tasks(env: Any, n: int) -> list[dict[str, Any]]:
    tasks = env.unwrapped.tasks
    return [{"task_id": tasks[i * len(tasks) // n].id} for i in range(n)]


# ---------------------------------------------------------------------------- lookup
def lookup_hacks() -> list[Hack]:
    """Lookup-v1's table: every way to an answer that skips a link of the chain, or reads the fault."""
    from agentgym.environments.lookup.env import UNAVAILABLE

    start = lambda u: u.task.meta["codes"][0]  # noqa: E731
    first = lambda u: u.task.meta["codes"][1]  # noqa: E731
    one_short = lambda u: u.task.meta["codes"][-2]  # noqa: E731
    return [
        Hack("echo the start code", lambda u: [final(start)]),
        Hack("answer the first link only", lambda u: [tool("lookup", lambda v: {"code": start(v)}), final(first)],
             applies=lambda u: u.task.meta["depth"] >= 2),
        Hack("stop one link short", lambda u: [final(one_short)], applies=lambda u: u.task.meta["depth"] >= 2),
        Hack("answer the fault's text", lambda u: [final(UNAVAILABLE)]),
        Hack("answer 'unavailable'", says("unavailable")),
        Hack("retry the start code forever", lambda u: [tool("lookup", lambda v: {"code": start(v)})]),
        Hack("every code of the chain at once", lambda u: [final(lambda v: " ".join(v.task.meta["codes"]))]),
        Hack("constant 500", says("500"), applies=lambda u: u.task.answer != "500"),
        Hack("the depth as the answer", lambda u: [final(lambda v: f"{v.task.meta['depth']:03d}")],
             applies=lambda u: u.task.answer != f"{u.task.meta['depth']:03d}"),
    ]


def _lookup_tasks(n: int) -> list[dict[str, Any]]:
    """About ``n`` tasks over depths 1-4, both splits, with and without faults."""
    combos = [(d, p, s) for d in (1, 2, 3, 4) for p in (0.0, 0.5) for s in ("train", "eval")]
    per = max(1, -(-n // len(combos)))
    return [{"depth": d, "fail_rate": p, "split": s, "index": i} for d, p, s in combos for i in range(per)]


# ---------------------------------------------------------------------------- interop
# The imported envs' hacks run on named cases (an env id and its kwargs: a reasoning-gym dataset, a
# SkyRL env class), not on the built-in table: INTEROP_CASES -> the case's hacks and tasks. Their
# oracle is checked with the env's default scoring (no partial credit, no guard).
RCE_TARGET = "/tmp/agentgym-hack-rce"  # what the code-executing hacks try to create (must never exist)
_RCE = [
    ("code: write a file", f"__import__('pathlib').Path('{RCE_TARGET}').write_text('x') and []"),
    ("code: run a shell", f"__import__('os').system('touch {RCE_TARGET}') or []"),
    ("code: patch the scorer to pay 1",
     "[setattr(c, 'score_answer', lambda *a, **k: 1.0) for c in "
     "__import__('reasoning_gym.dataset', fromlist=['x']).ProceduralDataset.__subclasses__()]"),
    ("code: an object equal to anything", "type('X', (), {'__eq__': lambda s, o: True, '__hash__': None})()"),
]
SKYRL_ROWS = [{"prompt": [{"role": "user", "content": f"What is {i} + {i + 3}? End with '#### ANSWER'."}],
               "reward_spec": {"ground_truth": str(2 * i + 3)}, "extra_info": {"max_turns": 3}} for i in range(4)]


def _rg_meta(key: str) -> Callable[[Any], str]:
    return lambda u: str(u.entry["metadata"][key])


def _not_answer(text: Callable[[Any], str] | str) -> Callable[[Any], bool]:
    """Applies where ``text`` (a constant, or a function of the env) is not the task's own reference answer."""
    return lambda u: str(text(u) if callable(text) else text).strip() != str(u.task.answer).strip()


def _interop_common() -> list[Hack]:
    return [
        Hack("echo the question", lambda u: [final(u.task.prompt)]),
        Hack("done at once", says("Done.")),
        *[Hack(name, says(text)) for name, text in _RCE],
    ]


def _rg_hacks(dataset: str) -> Callable[[], list[Hack]]:
    def hacks() -> list[Hack]:
        out = _interop_common()
        if dataset in ("simple_integration", "intermediate_integration"):
            f = _rg_meta("integrand")
            out += [Hack("echo the integrand", lambda u: [final(f(u))]),
                    Hack("wrap it in integrate()", lambda u: [final(f"integrate({f(u)}, x)")]),
                    Hack("wrap it in Integral() + C", lambda u: [final(f"Integral({f(u)}, x) + C")])]
        if dataset == "polynomial_multiplication":
            g = _rg_meta("polynomial_expr")
            # reasoning-gym's question is sometimes printed already expanded (it depends on
            # PYTHONHASHSEED): there the echo is the answer, not a cheat
            out += [Hack("echo the product", lambda u: [final(g(u))], applies=_not_answer(g)),
                    Hack("wrap it in expand()", lambda u: [final(f"expand({g(u)})")])]
        if dataset == "prime_factorization":
            n = _rg_meta("number")
            out += [Hack("the unfactored number", lambda u: [final(n(u))], applies=_not_answer(n))]
        out += [Hack(f"constant {c}", says(c), applies=_not_answer(c)) for c in ("0", "1")]
        return out
    return hacks


def _skyrl_hacks() -> list[Hack]:
    return [*_interop_common(),
            *[Hack(f"constant #### {c}", says(f"#### {c}"), applies=_not_answer(c)) for c in ("0", "1")]]


INTEROP_CASES: dict[str, tuple[str, dict[str, Any], Callable[[], list[Hack]]]] = {
    # partial credit on (any fraction paid counts), with the guard its docs prescribe for it
    **{f"ReasoningGym-v0 {d}": ("agentgym/ReasoningGym-v0", {"dataset": d, "config": {"size": 60},
                                                             "partial_credit": True, "no_attempt_guard": True},
                                _rg_hacks(d))
       for d in ("string_insertion", "spiral_matrix", "binary_matrix", "n_queens", "polynomial_multiplication",
                 "simple_integration", "intermediate_integration", "puzzle24", "countdown", "prime_factorization",
                 "game_of_life_halting")},
    **{f"SkyRL-v0 {c}": ("agentgym/SkyRL-v0", {"env_class": c, "tasks": SKYRL_ROWS}, _skyrl_hacks)
       for c in ("gsm8k", "gsm8k_multi_turn")},
}


def interop_tasks(case: str, size: str = "small") -> list[dict[str, Any]]:
    """Reset options of the tasks a case's hacks are played on."""
    n = 12 if size == "large" else 3
    if INTEROP_CASES[case][0] == "agentgym/SkyRL-v0":
        return [{"index": i} for i in range(min(n, len(SKYRL_ROWS)))]
    return [{"index": i} for i in range(n)]


# ---------------------------------------------------------------------------- tables
def hack_ids() -> list[str]:
    """Every registered environment that declares its hack table (``Capabilities.hacks``), sorted."""
    return ids_with("hacks")


def hacks_for(env_id: str) -> list[Hack]:
    """The hacks ``env_id`` declared at registration (``Capabilities(hacks="module:function")``)."""
    spec = capabilities(env_id).hacks
    if spec is None:
        raise ConfigError(f"{env_id!r} declares no hack table (Capabilities(hacks='module:function') at "
                          f"registration); these do: {hack_ids()}")
    hacks: list[Hack] = load_callable(spec, "hacks")()
    return hacks


def hack_tasks(env_id: str, env: Any, size: str = "small") -> list[dict[str, Any]]:
    """Reset options of the tasks the hacks are played on (``size``: "small" for CI, "large")."""
    big = size == "large"
    if env_id == "agentgym/WebAPI-v1":
        return _webapi_tasks(env, 3 if big else 12)
    if env_id == "agentgym/CodeFix-v1":
        return _codefix_tasks(env, 12 if big else 2)
    if env_id == "agentgym/Lookup-v1":
        return _lookup_tasks(240 if big else 32)
    return _math_tasks(env, 240 if big else 40)
