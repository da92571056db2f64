"""The answer rules of imported envs: what an answer must look like before a hub's scorer sees it.

Two gates, each returning why an answer earns 0 without being scored (None: score it):

* :func:`code_gate`: reasoning-gym datasets whose ``score_answer`` *evaluates* the answer
  (:data:`EVALUATES`). ``eval(answer)`` datasets accept a Python literal (``[1, 2]``,
  ``['a', 'b']``) or text that is not Python at all (``_ Q _``, which ``eval`` refuses); anything
  else (a call, an attribute, an operator, a comprehension) is code, refused. sympy
  ``parse_expr(answer)`` datasets accept plain math: digits, one-letter variables, the usual
  function names (:data:`MATH_NAMES`), ``+ - * / ^ ( ) . ,`` and spaces; any other name
  (``integrate``, ``expand``, ``Integral``, ``preview``, ``__import__``), quote, bracket,
  underscore or attribute access is refused. The scorer still runs isolated
  (:mod:`.isolation`); the gate is why an answer cannot choose its own verdict there.
* :func:`form_gate`: the answer-form rules of the built-in math envs
  (:mod:`agentgym.environments.math.answer_form`, through ``verify``) where the source's task
  declares a form (:data:`FORMS`): polynomial_multiplication wants an expanded polynomial (the
  question's product restated earns 0), the integration datasets an antiderivative (the integrand
  restated earns 0), prime_factorization a product of primes (the number itself earns 0, with
  ``partial_credit`` too).

The dataset's own reference answer always passes (a reference written unevaluated, as some
intermediate_integration rows are, is the task's own answer).
"""

from __future__ import annotations

import ast
import re
from typing import Any

__all__ = ["EVALUATES", "FORMS", "MATH_NAMES", "code_gate", "form_gate"]

# reasoning-gym datasets whose score_answer evaluates the answer: "python" (eval) or "sympy" (parse_expr)
EVALUATES: dict[str, str] = {
    "string_insertion": "python", "spiral_matrix": "python", "binary_matrix": "python", "n_queens": "python",
    "polynomial_multiplication": "sympy", "simple_integration": "sympy", "intermediate_integration": "sympy",
    "puzzle24": "sympy", "countdown": "sympy",
}
# dataset -> (the answer form of agentgym.environments.math.answer_form, the metadata key of the
# question's own expression, which an answer may never restate)
FORMS: dict[str, tuple[str, str]] = {
    "polynomial_multiplication": ("expanded", "polynomial_expr"),
    "simple_integration": ("antiderivative", "integrand"),
    "intermediate_integration": ("antiderivative", "integrand"),
    "prime_factorization": ("factored", "number"),
}
MATH_NAMES = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "sinh", "cosh", "tanh",
    "exp", "log", "ln", "sqrt", "pi", "oo", "Abs", "abs",
})
MAX_ANSWER = 20_000  # characters; longer answers to an evaluating scorer are refused unread
_PLAIN_MATH = re.compile(r"[0-9A-Za-z\s+\-*/^().,]*")
_NAME = re.compile(r"[A-Za-z]+")
_ATTRIBUTE = re.compile(r"\.\s*[A-Za-z]")
_LITERAL_NODES = (ast.Expression, ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Name, ast.Load,
                  ast.UnaryOp, ast.USub, ast.UAdd)


def _python_problem(answer: str) -> str | None:
    text = answer.lstrip(" \t")  # what eval() itself strips
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None  # eval refuses it too: harmless
    except (ValueError, RecursionError, MemoryError) as e:
        return f"the answer cannot be read as a literal ({type(e).__name__})"
    for node in ast.walk(tree):
        if not isinstance(node, _LITERAL_NODES):
            return f"the answer is Python code ({type(node).__name__}), not a literal; answer with the value itself"
    return None


def _sympy_problem(answer: str) -> str | None:
    if not _PLAIN_MATH.fullmatch(answer):
        bad = next(c for c in answer if not _PLAIN_MATH.fullmatch(c))
        return f"the answer has {bad!r}, which plain math does not; write the result with numbers, variables and + - * / ^ ( )"
    if _ATTRIBUTE.search(answer):
        return "the answer has an attribute access ('.name'); write the result itself"
    for name in _NAME.findall(answer):
        if len(name) > 1 and name not in MATH_NAMES:
            return (f"the answer calls or names {name!r}, which is not plain math: write the evaluated result, "
                    f"not an operation on the question")
    return None


def code_gate(dataset: str, answer: str, reference: Any) -> str | None:
    """Why ``answer`` may not reach ``dataset``'s evaluating scorer (None: it may, or the scorer
    does not evaluate its input)."""
    kind = EVALUATES.get(dataset)
    if kind is None or (isinstance(reference, str) and answer.strip() == reference.strip()):
        return None
    if len(answer) > MAX_ANSWER:
        return f"the answer has {len(answer)} characters; at most {MAX_ANSWER} reach this scorer"
    return _python_problem(answer) if kind == "python" else _sympy_problem(answer)


def form_gate(dataset: str, answer: str, entry: dict[str, Any]) -> str | None:
    """Why ``answer`` is not in the form ``dataset``'s task asks for (None: it is, or no form is known)."""
    rule = FORMS.get(dataset)
    reference = entry.get("answer")
    if rule is None or not isinstance(reference, str) or answer.strip() == reference.strip():
        return None
    from agentgym.environments.math.verify import verify

    form, key = rule
    given = (entry.get("metadata") or {}).get(key)
    verdict = verify(answer, reference, form, given=None if given is None else str(given))
    if verdict.reason.startswith("not_final_form"):
        return verdict.reason
    return None
