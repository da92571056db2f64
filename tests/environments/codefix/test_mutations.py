"""Bug injection: deterministic enumeration, clean splices, every kind reachable."""

from __future__ import annotations

import ast
import difflib

import pytest

from agentgym.environments.codefix.mutations import (
    KINDS,
    MutationError,
    apply_mutations,
    enumerate_mutations,
)

SRC = '''from typing import List


def f(xs: List[int], k: int) -> int:
    """Docstring stays untouched."""
    total = 0
    for i in range(1, len(xs)):
        if xs[i] > k and xs[i - 1] != 0:
            total += xs[i] * 2
        elif xs[i] == k:
            total -= 1
        else:
            continue
    if not xs:
        return False
    best = max(total, k)
    words = [w.lower() for w in ["A", "B"] if w != "C"]
    return best - len(words) if total >= 0 else not (total < -5)
'''
FIRST = 6  # the "canonical" part starts at `total = 0`


def test_enumeration_is_deterministic_and_after_first_line() -> None:
    a, b = enumerate_mutations(SRC, FIRST), enumerate_mutations(SRC, FIRST)
    assert a == b and a
    assert all(m.line >= FIRST for m in a)
    assert {m.kind for m in a} == set(KINDS), set(KINDS) - {m.kind for m in a}


def test_every_mutation_changes_only_the_code_and_reparses() -> None:
    applied = 0
    for m in enumerate_mutations(SRC, FIRST):
        try:
            out = apply_mutations(SRC, [m])
        except MutationError:
            continue
        applied += 1
        assert out != SRC
        ast.parse(out)
        # the prompt part (imports, signature, docstring) is byte-identical
        assert out.splitlines()[:FIRST - 1] == SRC.splitlines()[:FIRST - 1]
    assert applied >= 0.9 * len(enumerate_mutations(SRC, FIRST))


def test_splice_keeps_the_rest_of_the_file() -> None:
    m = next(m for m in enumerate_mutations(SRC, FIRST)
             if m.kind == "comparison_operator" and "`>` -> `>=`" in m.description)
    out = apply_mutations(SRC, [m])
    diff = [ln for ln in difflib.unified_diff(SRC.splitlines(), out.splitlines(), lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("---", "+++"))]
    assert diff == ["-        if xs[i] > k and xs[i - 1] != 0:", "+        if xs[i] >= k and xs[i - 1] != 0:"]


def test_off_by_one_folds_constants() -> None:
    outs = {apply_mutations(SRC, [m]) for m in enumerate_mutations(SRC, FIRST)
            if m.kind == "off_by_one" and "range argument 1" in m.description}
    assert any("range(2, len(xs))" in o for o in outs) and any("range(0, len(xs))" in o for o in outs)


def test_dropped_branch_removes_lines_or_leaves_pass() -> None:
    outs = [apply_mutations(SRC, [m]) for m in enumerate_mutations(SRC, FIRST) if m.kind == "dropped_branch"]
    assert any("elif" not in o for o in outs)
    for o in outs:
        ast.parse(o)


def test_two_mutations_apply_together_and_overlaps_are_refused() -> None:
    ms = enumerate_mutations(SRC, FIRST)
    a = next(m for m in ms if m.kind == "wrong_builtin")
    b = next(m for m in ms if m.kind == "boolean_operator")
    both = apply_mutations(SRC, [a, b])
    assert "min(total, k)" in both and " or " in both
    with pytest.raises(MutationError):
        apply_mutations(SRC, [a, a])
    inner = next(m for m in ms if m.kind == "comparison_operator" and m.line == 8)
    outer = next(m for m in ms if m.kind == "negated_condition" and m.line == 8)
    with pytest.raises(MutationError):
        apply_mutations(SRC, [inner, outer])
