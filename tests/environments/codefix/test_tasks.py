"""The shipped task file: splits, levels, bug records, reproducible build."""

from __future__ import annotations

import ast
from collections import Counter

import pytest

from agentgym.environments.codefix.build_tasks import GENERIC_NOTE, _ProblemBuilder, is_eval_problem
from agentgym.environments.codefix.mutations import KINDS
from agentgym.environments.codefix.problems import load_humaneval
from agentgym.environments.codefix.tasks import load_tasks, select_tasks
from agentgym.errors import ConfigError

TASKS = load_tasks()


def test_ids_unique_and_fields_consistent() -> None:
    assert len({t.id for t in TASKS}) == len(TASKS) > 500
    for t in TASKS:
        assert t.id.startswith(t.problem + f"/L{t.level}/")
        assert t.buggy_source != t.canonical_source
        assert 0 <= t.start_passed < t.n_units  # the bug fails at least one hidden unit
        assert 1 <= t.n_visible <= t.n_units
        ast.parse(t.buggy_source)
        assert len(t.mutations) == (2 if t.level == 2 else 1)
        assert {m["kind"] for m in t.mutations} <= set(KINDS)


def test_splits_are_disjoint_by_problem_and_follow_the_rule() -> None:
    train = {t.problem for t in select_tasks("train", None)}
    evals = {t.problem for t in select_tasks("eval", None)}
    assert train and evals and not train & evals
    assert all(is_eval_problem(int(p.split("/")[1])) for p in evals)
    assert not any(is_eval_problem(int(p.split("/")[1])) for p in train)
    assert len(evals) >= 25


def test_levels_and_kinds_are_all_present() -> None:
    for split in ("train", "eval"):
        levels = Counter(t.level for t in select_tasks(split, None))
        assert set(levels) == {1, 2, 3}
    kinds = Counter(m["kind"] for t in TASKS for m in t.mutations)
    assert len(kinds) >= 9, kinds


def test_level3_docstring_vouches_for_the_bug() -> None:
    for t in select_tasks("train", 3)[:50]:
        fn = next(n for n in ast.parse(t.buggy_source).body
                  if isinstance(n, ast.FunctionDef) and n.name == t.entry_point)
        doc = ast.get_docstring(fn) or ""
        assert "note" in doc.lower() and (GENERIC_NOTE in doc or "`" in doc)


def test_visible_tests_are_a_prefix_of_the_hidden_units() -> None:
    for t in TASKS[:100]:
        assert t.visible_tests.count("\ndef test_") == t.n_visible
        for unit in t.units[: t.n_visible]:
            assert unit.splitlines()[-1].strip() in t.visible_tests


def test_bad_split_or_level_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="split"):
        select_tasks("test", None)
    with pytest.raises(ConfigError, match="level"):
        select_tasks("train", 4)


def test_build_is_reproducible_from_the_seed() -> None:
    """Rebuilding two problems with the shipped seed gives exactly the shipped tasks."""
    problems = {p.number: (p, sb) for p, sb in load_humaneval()}
    for number in (0, 7):
        p, sb = problems[number]
        built, why = _ProblemBuilder(p, sb, seed=0).build()
        shipped = [t for t in TASKS if t.number == number]
        assert why is None
        assert [(b["id"], b["buggy_source"]) for b in built] == [(s.id, s.buggy_source) for s in shipped]


def test_reset_options_and_constructor_errors_are_config_errors() -> None:
    from agentgym.environments.codefix.env import CodeFixEnv

    def no_sandbox() -> None:
        raise AssertionError("a bad reset must fail before taking a sandbox")

    env = CodeFixEnv(split="train", level=2, sandbox=no_sandbox)
    eval_id = select_tasks("eval", 2)[0].id
    with pytest.raises(ConfigError, match="not in split='train'"):
        env.reset(options={"task_id": eval_id})
    with pytest.raises(ConfigError, match="index must be"):
        env.reset(options={"index": len(env.tasks)})
    with pytest.raises(ConfigError, match="sandbox must be"):
        CodeFixEnv(sandbox=42)
    with pytest.raises(ConfigError, match="sandbox_seconds"):
        CodeFixEnv(sandbox_seconds=0)
    env.close()
