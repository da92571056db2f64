"""reasoning-gym datasets as Math-v1 JSONL user tasks, exported at test time.

For fifteen reasoning-gym datasets (``DATASETS``, each with the answer form it asks for), 25
problems each are written as a JSONL dataset (``form`` and ``expression`` from the problem)
and played through ``agentgym/Math-v1``: the oracle answer earns 1, and the hacks (the question
echoed, its expression, the unreduced input fraction, the input number of a factorization, a
wrong number) earn 0, in both reward modes. Every verdict is compared with reasoning-gym's own
``score_answer`` on the same string (1.0 = accepted): they must agree.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym  # noqa: F401  (registers the ids)

rg = pytest.importorskip("reasoning_gym", reason="reasoning-gym is in the [dev] extra")

# dataset -> the form its answers are in (what score_answer asks for)
DATASETS: dict[str, str] = {
    "basic_arithmetic": "integer", "chain_sum": "integer", "products": "integer", "leg_counting": "integer",
    "gcd": "integer", "lcm": "integer", "simple_equations": "integer", "complex_arithmetic": "complex",
    "fraction_simplification": "fraction", "decimal_arithmetic": "decimal", "decimal_chain_sum": "decimal",
    "polynomial_multiplication": "expanded", "prime_factorization": "factored",
    "simple_integration": "antiderivative", "polynomial_equations": "set[number]",
}
SIZE, SEED = 25, 21


def _given(name: str, entry: dict[str, Any]) -> str | None:
    """The question's own expression, which no answer may restate."""
    md = entry["metadata"]
    if name == "fraction_simplification":
        return f"{md['numerator']}/{md['denominator']}"
    if name == "prime_factorization":
        return str(md.get("number") or re.findall(r"\d+", entry["question"])[0])
    if name == "complex_arithmetic":
        return str(entry["question"].split(": ", 1)[1])
    given = md.get("expression") or md.get("polynomial_expr") or md.get("equation")
    return str(given) if given else None


def _same(a: str, b: str) -> bool:
    return "".join(a.split()).strip("$") == "".join(b.split()).strip("$")


def _hacks(name: str, entry: dict[str, Any], given: str | None) -> dict[str, str]:
    """The hacks that are cheats on this problem (an echo is not one where it is the answer)."""
    out = {"echo the question": entry["question"]}
    if given:
        out["echo its expression"] = given
        out["echo it boxed"] = f"\\boxed{{{given}}}"
    answer = entry["answer"].strip("$")
    if re.fullmatch(r"-?\d+", answer):
        out["a wrong number"] = str(int(answer) + 1)
    return {k: v for k, v in out.items() if not _same(v, entry["answer"])}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any, dict[str, dict[str, Any]]]]:
    """name -> (JSONL path, the reasoning-gym dataset, row id -> its entry)."""
    out = {}
    root = tmp_path_factory.mktemp("rg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, form in DATASETS.items():
            ds = rg.create_dataset(name, size=SIZE, seed=SEED)
            rows, entries, seen = [], {}, set()
            for i, e in enumerate(ds):
                if e["question"] in seen:  # a problem appears once in a dataset
                    continue
                seen.add(e["question"])
                rid = f"{name}/{i}"
                row = {"id": rid, "question": e["question"], "answer": e["answer"], "form": form}
                given = _given(name, e)
                if given is not None and not _same(given, e["answer"]):  # "Simplify -6480*y**2" exists
                    row["expression"] = given
                rows.append(row)
                entries[rid] = e
            path = root / f"{name}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            out[name] = (path, ds, entries)
    return out


def _episodes(path: Path, mode: str) -> Iterator[tuple[Any, Any]]:
    """Every problem of the dataset, both splits: yields (a function resetting the env to it and
    returning the env, the problem)."""
    env = gym.make("agentgym/Math-v1", dataset=str(path), reward_mode=mode)
    try:
        u = env.unwrapped
        for split in u.splits:
            for i, p in enumerate(u._rows[split]):
                def at(split: str = split, i: int = i) -> gym.Env:
                    env.reset(seed=0, options={"split": split, "index": i})
                    return env
                yield at, p
    finally:
        env.close()


def _score(ds: Any, text: str, entry: dict[str, Any]) -> float:
    """reasoning-gym's verdict (some datasets' score_answer raises on text that is no answer: 0)."""
    try:
        return float(ds.score_answer(text, entry))
    except (ValueError, TypeError, AttributeError):
        return 0.0


def _reward(env: gym.Env, text: str) -> float:
    return float(env.step(env.unwrapped.codec.final_ids(text))[1])


@pytest.mark.parametrize("mode", ["sparse", "shaped"])
@pytest.mark.parametrize("name", list(DATASETS))
def test_oracle_is_accepted_hacks_earn_nothing_and_verdicts_agree(name: str, mode: str, exported: dict) -> None:
    path, ds, entries = exported[name]
    verdicts = disagree = 0
    problems = 0
    wrongly_paid: list[tuple[str, str, float]] = []
    for at, p in _episodes(path, mode):
        problems += 1
        entry = entries[p.id]
        assert _reward(at(), p.answer) >= 1.0, (p.id, p.answer)  # the oracle
        assert _score(ds, p.answer, entry) == 1.0
        verdicts += 1
        for hack, text in _hacks(name, entry, p.given).items():
            r = _reward(at(), text)
            ours, theirs = r > 0, _score(ds, text, entry) == 1.0
            verdicts += 1
            disagree += ours != theirs
            if r != 0.0:
                wrongly_paid.append((p.id, hack, r))
    assert problems >= 20 and verdicts >= 2 * problems
    assert wrongly_paid == []
    assert disagree == 0, f"{disagree} of {verdicts} verdicts differ from reasoning-gym's score_answer"


def test_the_unreduced_input_fraction_earns_nothing(exported: dict) -> None:
    """The hack of the issue: the input fraction, unreduced, for "simplify to lowest terms"."""
    path, ds, entries = exported["fraction_simplification"]
    tried = 0
    for at, p in _episodes(path, "sparse"):
        assert p.given and "/" in p.given
        assert _reward(at(), p.given) == 0.0
        assert _score(ds, p.given, entries[p.id]) < 1.0
        tried += 1
    assert tried >= 20
