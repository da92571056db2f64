"""Deterministic bug injection by AST mutation.

Every mutation site in a module is enumerated in a fixed order (``ast.walk`` order over the
lines of the canonical solution only, so the problem statement and its helpers stay
intact). A :class:`Mutation` names one site and one change; :func:`apply_mutations` applies
one or more of them to the *source text* by splicing the changed node's text back in, so
the rest of the file (comments, quoting, blank lines) is untouched and the diff between the
buggy and the canonical file is the bug alone. Each splice is checked by re-parsing: the
result must be exactly the intended mutated tree, or the mutation is refused.

Kinds (see :data:`KINDS`): arithmetic and comparison operator swaps, and/or swaps, negated
and dropped conditions, dropped branches, off-by-one in ranges, indices, slices and
compared constants, wrong variable, wrong return value, swapped arguments or operands, and
a wrong-but-similar builtin or method (min/max, any/all, lower/upper, ...).
"""

# Rewrites are lambdas binding loop variables as defaults, which mypy cannot infer:
# mypy: disable-error-code="misc"
from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["KINDS", "Mutation", "MutationError", "apply_mutations", "enumerate_mutations"]

KINDS = (
    "arithmetic_operator", "comparison_operator", "boolean_operator", "negated_condition",
    "dropped_condition", "dropped_branch", "off_by_one", "wrong_variable", "wrong_return",
    "swapped_arguments", "wrong_builtin",
)

_BINOP: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd, ast.LShift: ast.RShift, ast.RShift: ast.LShift,
}
_CMPOP: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_SYMBOL: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/",
           ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.LShift: "<<",
           ast.RShift: ">>", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
           ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Is: "is",
           ast.IsNot: "is not", ast.And: "and", ast.Or: "or"}
_BUILTIN_SWAP = {"min": "max", "max": "min", "any": "all", "all": "any"}
_METHOD_SWAP = {"lower": "upper", "upper": "lower", "islower": "isupper", "isupper": "islower",
                "startswith": "endswith", "endswith": "startswith", "isdigit": "isalpha",
                "isalpha": "isdigit", "find": "rfind", "rfind": "find", "floor": "ceil",
                "ceil": "floor"}
_NONCOMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


class MutationError(ValueError):
    """A mutation could not be applied cleanly (overlapping sites, splice did not re-parse)."""


@dataclass(frozen=True, slots=True)
class Mutation:
    kind: str  # one of KINDS
    node_index: int  # position of the mutated node in ast.walk(tree) order
    variant: int  # which of the node's alternatives of this kind
    description: str  # human-readable, e.g. "`<` -> `<=` on line 7"
    line: int  # 1-based line of the mutated node in the original source

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "node_index": self.node_index, "variant": self.variant,
                "description": self.description, "line": self.line}


# A rewrite takes the (copied) node and returns its replacement: a node, a list of
# statements (for statement-level kinds) or [] to delete a statement.
Rewrite = Callable[[Any], Any]  # node -> ast.AST | list[ast.stmt]; nodes are typed Any: AST fields vary by class


def _plus(expr: ast.expr, delta: int) -> ast.expr:
    """``expr + delta`` with constants folded, so ``x[-1]`` becomes ``x[-2]`` not ``x[-1 + -1]``."""
    value = _int_value(expr)
    if value is not None:
        v = value + delta
        return ast.Constant(v) if v >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-v))
    op: ast.operator = ast.Add() if delta > 0 else ast.Sub()
    return ast.BinOp(copy.deepcopy(expr), op, ast.Constant(abs(delta)))


def _int_value(expr: ast.AST) -> int | None:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    if (isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub)
            and isinstance(expr.operand, ast.Constant) and type(expr.operand.value) is int):
        return -expr.operand.value
    return None


def _locals_of(fn: ast.FunctionDef) -> list[str]:
    """Parameters and assigned names of a function (the candidates for a wrong variable)."""
    names = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
    return sorted(names)


def _candidates(node: Any, parent: Any, fn: ast.FunctionDef | None
                ) -> Iterator[tuple[str, str, Rewrite]]:
    """(kind, description, rewrite) for every mutation of one node."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
        new = _BINOP[type(node.op)]
        yield ("arithmetic_operator", f"`{_SYMBOL[type(node.op)]}` -> `{_SYMBOL[new]}`",
               lambda n, new=new: ast.BinOp(n.left, new(), n.right))
    if isinstance(node, ast.AugAssign) and type(node.op) in _BINOP:
        new = _BINOP[type(node.op)]
        yield ("arithmetic_operator", f"`{_SYMBOL[type(node.op)]}=` -> `{_SYMBOL[new]}=`",
               lambda n, new=new: [ast.AugAssign(n.target, new(), n.value)])
    if isinstance(node, ast.BinOp) and isinstance(node.op, _NONCOMMUTATIVE):
        yield ("swapped_arguments", "swapped the operands of "
               f"`{_SYMBOL[type(node.op)]}`", lambda n: ast.BinOp(n.right, n.op, n.left))
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _CMPOP:
                new = _CMPOP[type(op)]
                yield ("comparison_operator", f"`{_SYMBOL[type(op)]}` -> `{_SYMBOL[new]}`",
                       lambda n, i=i, new=new: ast.Compare(
                           n.left, [new() if j == i else o for j, o in enumerate(n.ops)],
                           n.comparators))
        for i, comp in enumerate([node.left, *node.comparators]):
            v = _int_value(comp)
            if v is not None:
                for d in (1, -1):
                    yield ("off_by_one", f"compared constant {v} -> {v + d}",
                           lambda n, i=i, d=d: _replace_operand(n, i, d))
    if isinstance(node, ast.BoolOp):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield ("boolean_operator", f"`{_SYMBOL[type(node.op)]}` -> `{_SYMBOL[other]}`",
               lambda n, other=other: ast.BoolOp(other(), n.values))
        if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.comprehension)):
            for i in range(len(node.values)):
                yield ("dropped_condition", f"dropped operand {i + 1} of `{_SYMBOL[type(node.op)]}`",
                       lambda n, i=i: _drop_operand(n, i))
    if isinstance(node, (ast.If, ast.While)):
        yield ("negated_condition", "negated the condition",
               lambda n: [type(n)(_negate(n.test), n.body, n.orelse)])
    if isinstance(node, ast.IfExp):
        yield ("negated_condition", "negated the condition",
               lambda n: ast.IfExp(_negate(n.test), n.body, n.orelse))
    if isinstance(node, ast.comprehension):
        for i in range(len(node.ifs)):
            yield ("dropped_condition", "dropped a comprehension filter",
                   lambda n, i=i: ast.comprehension(n.target, n.iter,
                                                    n.ifs[:i] + n.ifs[i + 1:], n.is_async))
    if isinstance(node, ast.If):
        if node.orelse:
            yield ("dropped_branch", "dropped the else/elif branch",
                   lambda n: [ast.If(n.test, n.body, [])])
        else:
            yield ("dropped_branch", "dropped an if statement", lambda n: [])
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            for i in range(len(node.args)):
                if i < 2:
                    for d in (1, -1):
                        yield ("off_by_one", f"range argument {i + 1} {d:+d}",
                               lambda n, i=i, d=d: _call_arg(n, i, _plus(n.args[i], d)))
        pos = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(pos) == len(node.args) >= 2 and ast.dump(pos[0]) != ast.dump(pos[1]):
            yield ("swapped_arguments", "swapped the first two arguments",
                   lambda n: ast.Call(n.func, [n.args[1], n.args[0], *n.args[2:]], n.keywords))
        if isinstance(node.func, ast.Name) and node.func.id in _BUILTIN_SWAP:
            new_name = _BUILTIN_SWAP[node.func.id]
            yield ("wrong_builtin", f"`{node.func.id}` -> `{new_name}`",
                   lambda n, s=new_name: ast.Call(ast.Name(s, ast.Load()), n.args, n.keywords))
        if isinstance(node.func, ast.Attribute) and node.func.attr in _METHOD_SWAP:
            new_attr = _METHOD_SWAP[node.func.attr]
            yield ("wrong_builtin", f"`.{node.func.attr}` -> `.{new_attr}`",
                   lambda n, s=new_attr: ast.Call(ast.Attribute(n.func.value, s, ast.Load()),
                                                  n.args, n.keywords))
    if isinstance(node, ast.Subscript):
        if isinstance(node.slice, ast.Slice):
            for part in ("lower", "upper"):
                if getattr(node.slice, part) is not None:
                    for d in (1, -1):
                        yield ("off_by_one", f"slice {part} bound {d:+d}",
                               lambda n, part=part, d=d: _slice(n, part, d))
        elif isinstance(node.ctx, ast.Load) and not isinstance(node.slice, ast.Tuple):
            for d in (1, -1):
                yield ("off_by_one", f"index {d:+d}",
                       lambda n, d=d: ast.Subscript(n.value, _plus(n.slice, d), n.ctx))
    if isinstance(node, ast.Return) and node.value is not None:
        val = node.value
        if isinstance(val, ast.Constant) and isinstance(val.value, bool):
            yield ("wrong_return", f"return {val.value} -> {not val.value}",
                   lambda n: [ast.Return(ast.Constant(not n.value.value))])
        elif _int_value(val) is not None:
            for d in (1, -1):
                yield ("wrong_return", f"returned constant {d:+d}",
                       lambda n, d=d: [ast.Return(_plus(n.value, d))])
        elif isinstance(val, (ast.Compare, ast.BoolOp)) or (
                isinstance(val, ast.UnaryOp) and isinstance(val.op, ast.Not)):
            yield ("wrong_return", "negated the returned value",
                   lambda n: [ast.Return(_negate(n.value))])
    if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and fn is not None
            and node.id in (local := _locals_of(fn))):
        others = [x for x in local if x != node.id]
        # Two neighbours in sorted order: enough variety without exploding the site count.
        pick = others[:1] + others[-1:] if len(others) > 1 else others
        for alt in dict.fromkeys(pick):
            yield ("wrong_variable", f"`{node.id}` -> `{alt}`",
                   lambda n, alt=alt: ast.Name(alt, ast.Load()))


def _negate(test: ast.expr) -> ast.expr:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(ast.Not(), test)


def _drop_operand(n: ast.BoolOp, i: int) -> ast.expr:
    rest = n.values[:i] + n.values[i + 1:]
    return rest[0] if len(rest) == 1 else ast.BoolOp(n.op, rest)


def _replace_operand(n: ast.Compare, i: int, d: int) -> ast.Compare:
    parts = [n.left, *n.comparators]
    parts[i] = _plus(parts[i], d)
    return ast.Compare(parts[0], n.ops, parts[1:])


def _call_arg(n: ast.Call, i: int, new: ast.expr) -> ast.Call:
    return ast.Call(n.func, [new if j == i else a for j, a in enumerate(n.args)], n.keywords)


def _slice(n: ast.Subscript, part: str, d: int) -> ast.Subscript:
    s = copy.copy(n.slice)
    assert isinstance(s, ast.Slice)
    setattr(s, part, _plus(getattr(s, part), d))
    return ast.Subscript(n.value, s, n.ctx)


def _walk_with_context(tree: ast.Module) -> list[tuple[ast.AST, ast.AST | None, ast.FunctionDef | None]]:
    """Every node in ast.walk order with its parent and innermost enclosing function."""
    parent: dict[int, ast.AST] = {}
    func: dict[int, ast.FunctionDef | None] = {id(tree): None}
    out = []
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[id(child)] = node
            func[id(child)] = node if isinstance(node, ast.FunctionDef) else func[id(node)]
        out.append((node, parent.get(id(node)), func[id(node)]))
    return out


def enumerate_mutations(source: str, first_line: int = 1) -> list[Mutation]:
    """All mutations of nodes that start on or after ``first_line``, in a fixed order."""
    tree = ast.parse(source)
    muts: list[Mutation] = []
    for index, (node, parent, fn) in enumerate(_walk_with_context(tree)):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.comprehension):
            line = node.target.lineno
        if line is None or line < first_line:
            continue
        per_kind: dict[str, int] = {}
        for kind, desc, _ in _candidates(node, parent, fn):
            v = per_kind.get(kind, 0)
            per_kind[kind] = v + 1
            muts.append(Mutation(kind, index, v, f"{desc} on line {line}", line))
    return muts


def _rewrite_for(m: Mutation, node: Any, parent: Any,
                 fn: ast.FunctionDef | None) -> Rewrite:
    found = [rw for kind, _, rw in _candidates(node, parent, fn) if kind == m.kind]
    if m.variant >= len(found):
        raise MutationError(f"{m} does not exist in this source")
    return found[m.variant]


def _byte_col_to_char(line: str, col: int) -> int:
    return len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))


def _span(lines: list[str], node: Any) -> tuple[int, int]:
    """Character offsets [start, end) of a node in the joined source."""
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    a = starts[node.lineno - 1] + _byte_col_to_char(lines[node.lineno - 1], node.col_offset)
    b = starts[node.end_lineno - 1] + _byte_col_to_char(lines[node.end_lineno - 1], node.end_col_offset)
    return a, b


def _line_start(lines: list[str], lineno: int) -> int:
    return sum(len(ln) for ln in lines[: lineno - 1])


def _splice_text(source: str, lines: list[str], node: Any, new: ast.AST | list[ast.stmt],
                 parens: bool) -> tuple[int, int, str]:
    """The text edit (start, end, replacement) that turns ``node`` into ``new``."""
    if not isinstance(new, list):  # an expression: replace exactly its characters
        text = ast.unparse(new)
        a, b = _span(lines, node)
        return a, b, f"({text})" if parens else text
    first = lines[node.lineno - 1]
    col = _byte_col_to_char(first, node.col_offset)
    if first[:col].strip():
        raise MutationError("statement does not start its line")
    a, b = _line_start(lines, node.lineno), _span(lines, node)[1]
    if not new:  # delete the statement's lines, newline included
        return a, _line_start(lines, node.end_lineno + 1), ""
    indent = first[:col]
    text = "\n".join(indent + ln if ln else ln
                     for ln in "\n".join(ast.unparse(s) for s in new).splitlines())
    if first[col:].startswith("elif") and text.lstrip().startswith("if"):
        text = indent + "el" + text[len(indent):]
    return a, b, text


def apply_mutations(source: str, mutations: Sequence[Mutation]) -> str:
    """The source with every mutation applied; raises MutationError when that is not clean."""
    tree = ast.parse(source)
    ctx = _walk_with_context(tree)
    lines = source.splitlines(keepends=True)
    target_ids = [m.node_index for m in mutations]
    if len(set(target_ids)) != len(target_ids):
        raise MutationError("two mutations of the same node")
    # Rewrite a copy of the tree (the expected result) and collect text splices.
    expected = copy.deepcopy(tree)
    exp_nodes = [n for n in ast.walk(expected)]
    edits: list[tuple[int, int, ast.AST, ast.AST | list[ast.stmt]]] = []
    replacements: dict[int, ast.AST | list[ast.stmt]] = {}
    for m in mutations:
        node, parent, fn = ctx[m.node_index]
        if isinstance(node, ast.comprehension):  # splice the enclosing comprehension expression
            if parent is None:
                raise MutationError("orphan comprehension")
            new_comp = _rewrite_for(m, copy.deepcopy(node), parent, fn)(copy.deepcopy(node))
            new_parent = copy.deepcopy(parent)
            new_parent.generators = [new_comp if g is node else copy.deepcopy(g)  # type: ignore[attr-defined]
                                     for g in parent.generators]  # type: ignore[attr-defined]
            p_index = next(i for i, (n, _, _) in enumerate(ctx) if n is parent)
            if p_index in replacements or p_index in target_ids:
                raise MutationError("overlapping mutations")
            replacements[p_index] = new_parent
            edits.append((*_span(lines, parent), parent, new_parent))
            continue
        new = _rewrite_for(m, copy.deepcopy(node), parent, fn)(copy.deepcopy(node))
        if new == [] and _alone_in_block(node, parent):
            new = [ast.Pass()]
        replacements[m.node_index] = new
        edits.append((*_span(lines, node), node, new))
    edits.sort(key=lambda e: e[0])
    for (_, end1, *_), (start2, *_) in zip(edits, edits[1:]):
        if start2 < end1:
            raise MutationError("overlapping mutations")
    _replace_in_tree(expected, exp_nodes, replacements)
    want = ast.dump(expected)
    # Try plain splices first, then parenthesised expressions (precedence changes).
    for parens in (False, True):
        out = source
        for _, _, node, new in sorted(edits, key=lambda e: -e[0]):
            a2, b2, text = _splice_text(source, lines, node, new, parens)
            out = out[:a2] + text + out[b2:]
        try:
            if ast.dump(ast.parse(out)) == want:
                return out
        except SyntaxError:
            pass
    raise MutationError(f"splicing {[m.description for m in mutations]} did not reproduce the tree")


def _alone_in_block(node: ast.AST, parent: ast.AST | None) -> bool:
    return any(getattr(parent, f, None) == [node] for f in ("body", "orelse", "finalbody"))


def _replace_in_tree(tree: ast.AST, nodes: list[ast.AST], repl: dict[int, ast.AST | list[ast.stmt]]) -> None:
    targets = {id(nodes[i]): new for i, new in repl.items()}

    class _T(ast.NodeTransformer):
        def visit(self, node: ast.AST):  # type: ignore[override]
            if id(node) in targets:
                new = targets[id(node)]
                return new if new != [] else None
            return self.generic_visit(node)

    _T().visit(tree)
