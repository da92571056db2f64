"""The reward invariant, on every registered environment, in both reward modes.

*No policy that does not attempt the task ever out-earns one that attempts it and fails*, and
a correct episode earns the most. Played with real scripted policies, per task:

* **does not attempt**: answers "Done." at once, an empty answer, a refusal, a message cut off
  before its stop token, only malformed output until the turn budget ends; CodeFix: submits
  solution.py unchanged; WebAPI: names a refusal rule at once, with no look-up;
* **attempts and fails**: uses the tools and answers wrong, makes malformed calls on the way,
  calls tools until the budget ends, answers with a bad stop token; CodeFix: runs the tests and
  submits, breaks the file, edits the wrong line; WebAPI: does part of the plan, makes a write
  the rules forbid, looks up and names the wrong rule;
* **solves**: the environment's oracle.

Asserted: every non-attempt earns exactly 0; the best non-attempt <= the worst failed attempt;
every failed attempt < the oracle. Every hack found while trying to break a reward is a case
below (the +0.09 for answering at once; WebAPI's "Done." on forbidden requests; CodeFix's
unchanged submit and broken-file penalty).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentgym
from agentgym.oracles import get_oracle
from agentgym.tokenizers import encode_harmony_text

NEEDS_DOCKER = {"agentgym/CodeFix-v1", "agentgym/MathTool-v1"}
BUILTIN = ["agentgym/Math-v1", "agentgym/MathCalc-v1", "agentgym/MathTool-v1", "agentgym/CodeFix-v1",
           "agentgym/WebAPI-v1", "agentgym/Lookup-v1"]
MAX_TURNS = 5

# An action is Harmony text, a callable env -> ids (it may read the episode), or ids.
Action = str | Callable[[Any], list[int]]


def tool(name: str, **args: Any) -> Action:
    return lambda u: u.codec.tool_call_ids(name, args)


def final(text: str) -> str:
    return f"<|channel|>final<|message|>{text}<|return|>"


def raw_tool(name: str, body: str, stop: str = "<|call|>") -> str:
    return f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{body}{stop}"


def play(env: gym.Env, script: list[Action] | Callable[[Any], list[Action]], options: dict[str, Any]) -> float:
    """Reset with ``options``, play ``script`` (repeating its last action) until the episode ends."""
    u = env.unwrapped
    env.reset(seed=0, options=options)
    actions = script(u) if callable(script) else script
    total, i = 0.0, 0
    while True:
        a = actions[min(i, len(actions) - 1)]
        ids = encode_harmony_text(u.tokenizer, a) if isinstance(a, str) else list(a(u))
        _, r, term, trunc, _ = env.step(np.asarray(ids, dtype=np.int64))
        total += float(r)
        i += 1
        if term or trunc:
            return total


def oracle(env_id: str) -> Callable[[Any], list[Action]]:
    policy = get_oracle(env_id)
    # the oracle reads the state each turn: a script of one callable, repeated until the end
    return lambda u: [lambda u: policy(u).tolist()]


IDLE_COMMON: dict[str, list[Action]] = {
    "done at once": [final("Done.")],
    "empty answer": [final("")],
    "refusal": [final("I'm sorry, I can't help with that.")],
    "cut off": ["<|channel|>final<|message|>Done."],
    "malformed until the budget ends": ["hello"],
}


def _math(calc: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    fail: dict[str, Any] = {
        "wrong answer": [final("-987654321")],
        "wrong answer, wrong stop": [final("-987654321").replace("<|return|>", "<|call|>")],
        "thinks, then answers wrong": ["<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant"
                                       + final("-987654321")],
    }
    if calc == "calculator":
        fail |= {
            "calculates, answers wrong": [tool("calculator", expression="1 + 1"), final("-987654321")],
            "bad calls, answers wrong": [raw_tool("calculator", "{oops"), tool("calculator", expression="x y"),
                                         final("-987654321")],
            "calculates until the budget ends": [tool("calculator", expression="2 * 3")],
        }
    if calc == "python":
        fail |= {
            "runs code, answers wrong": [tool("python", code="print(1 + 1)"), final("-987654321")],
            "code raises, answers wrong": [tool("python", code="1/0"), final("-987654321")],
        }
    return {}, fail


def _codefix() -> tuple[dict[str, Any], dict[str, Any]]:
    idle = {"submits unchanged": [tool("submit")]}
    fail = {
        "runs the tests, submits": [tool("run_tests"), tool("submit")],
        "reads, then answers": [tool("read_file", path="solution.py"), final("I fixed it.")],
        "breaks the file": [tool("write_file", path="solution.py", content="raise SystemExit(3)\n"),
                            tool("submit")],
        "edits the wrong place": [lambda u: u.codec.tool_call_ids(
            "write_file", {"path": "solution.py", "content": u.task.answer.buggy_source + "\n# fixed\n"}),
            tool("submit")],
        "bad calls, then submits": [raw_tool("edit", "{nope"), tool("apply_patch", patch="garbage"),
                                    tool("submit")],
    }
    return idle, fail


def _webapi(task_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from agentgym.environments.webapi.tasks import REFUSAL_RULES, all_tasks

    t = next(t for t in all_tasks() if t.id == task_id)
    plan = [tool(op, **args) for op, args in t.plan]
    idle = {f"names {code} at once": [final(f"I cannot do that.\nREFUSED: {code}")] for code in REFUSAL_RULES}
    fail: dict[str, Any] = {
        "part of the plan, then done": [*plan[:-1], final("Done.")] if len(plan) > 1 else [*plan, final("Done?")],
        "errors, then a wrong answer": [tool("get_order", order_id=99999), tool("verify_customer", email="a@b.c",
                                        card_last4="0000"), final("ANSWER: 0")],
        "looks things up until the budget ends": [tool("list_products", query="tent")],
    }
    if t.forbidden:
        wrong = next(c for c in REFUSAL_RULES if c != t.refusal)
        fail["looks up, names the wrong rule"] = [*plan, final(f"REFUSED: {wrong}")]
        fail["looks up, refuses vaguely"] = [*plan, final("Sorry, store policy.")]
        if t.kind == "return_late":
            order = t.plan[1][1]["order_id"]
            fail["does the forbidden return"] = [*plan, tool("return_order", order_id=order, reason="other"),
                                                 final("Returned.")]
    else:
        fail["does it all, answers wrong"] = [*plan, final("ANSWER: 0.01\nREFUSED: identity")]
    return idle, fail


def _lookup() -> tuple[dict[str, Any], dict[str, Any]]:
    start = lambda u: u.codec.tool_call_ids("lookup", {"code": u.task.meta["codes"][0]})  # noqa: E731
    fail: dict[str, Any] = {
        "looks up the start, answers its result": [start, lambda u: u.codec.final_ids(u.task.meta["codes"][1])],
        "looks up a code it never read, answers it": [tool("lookup", code="999"), final("999")],
        "retries until the budget ends": [start],
        "answers the fault": [final("unavailable")],
    }
    return {}, fail


# (env id) -> [(reset options, constructor kwargs, idle extra, fail)]
def cases(env_id: str, mode: str = "shaped") -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]]:
    if env_id == "agentgym/Math-v1":
        return [({"family": f, "level": "easy", "index": 1}, {}, *_math(None))
                for f in ("arithmetic", "quadratic", "derivative")]
    if env_id == "agentgym/MathCalc-v1":
        return [({"index": i}, {}, *_math("calculator")) for i in (0, 1)]
    if env_id == "agentgym/MathTool-v1":
        return [({"family": "arithmetic", "level": "easy", "index": 2}, {}, *_math("python"))]
    if env_id == "agentgym/CodeFix-v1":
        from agentgym.environments.codefix.tasks import select_tasks

        opt_in = {"level": 1, "shaping": {"pass_rate_delta": 1.0}}  # partial credit paid: floored at 0
        runs = ((2, {"level": 2}), (1, opt_in)) if mode == "shaped" else ((1, {"level": 1}),)
        return [({"task_id": select_tasks("train", lv)[4].id}, kw, *_codefix()) for lv, kw in runs]
    if env_id == "agentgym/WebAPI-v1":
        from agentgym.environments.webapi.tasks import all_tasks

        ids = [next(t.id for t in all_tasks() if t.kind == k)
               for k in ("return_late", "update_email_wrong_card", "move_and_cancel", "cancel_latest")]
        return [({"task_id": i}, {"split": "all"}, *_webapi(i)) for i in ids]
    if env_id == "agentgym/Lookup-v1":
        return [({"depth": 2, "index": 0}, {}, *_lookup()), ({"depth": 2, "fail_rate": 0.3}, {}, *_lookup())]  # one fault, retried
    raise AssertionError(f"no scripted policies for {env_id}: every registered env needs them")


def test_every_builtin_env_has_scripted_policies() -> None:
    builtin = [i for i in agentgym.registered_ids() if i.startswith("agentgym/")]
    assert sorted(builtin) == sorted(BUILTIN)


@pytest.fixture(scope="module")
def envs() -> Iterator[dict[tuple[str, str, str], gym.Env]]:
    made: dict[tuple[str, str, str], gym.Env] = {}
    yield made
    for e in made.values():
        e.close()


@pytest.mark.parametrize("mode", ["sparse", "shaped"])
@pytest.mark.parametrize("env_id", [pytest.param(i, marks=pytest.mark.docker) if i in NEEDS_DOCKER else i
                                    for i in BUILTIN])
def test_no_attempt_never_out_earns_a_failed_attempt(env_id: str, mode: str, envs: dict) -> None:
    if env_id in NEEDS_DOCKER:
        from agentgym.sandboxes import make_sandbox  # noqa: F401  (fails loudly if missing)
    for options, kwargs, idle_extra, fail in cases(env_id, mode):
        key = (env_id, mode, json.dumps(kwargs, sort_keys=True))
        if key not in envs:
            envs[key] = gym.make(env_id, reward_mode=mode, max_turns=MAX_TURNS, **kwargs)
        env = envs[key]
        idle = {name: play(env, s, options) for name, s in {**IDLE_COMMON, **idle_extra}.items()}
        tried = {name: play(env, s, options) for name, s in fail.items()}
        best = play(env, oracle(env_id), options)
        where = f"{env_id} {mode} {options}: idle {idle}, failed {tried}, oracle {best}"
        assert all(r == 0.0 for r in idle.values()), where  # doing nothing earns exactly nothing
        assert max(idle.values()) <= min(tried.values()), where  # the invariant
        assert max(tried.values()) < best and best >= 1.0, where  # a correct episode earns the most
        if mode == "shaped":
            assert all(r >= 0.0 for r in tried.values()), where  # no penalty pushes an attempt below 0
