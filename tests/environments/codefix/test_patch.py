"""The unified-diff applier behind the apply_patch tool."""

from __future__ import annotations

import difflib

import pytest

from agentgym.environments.codefix.patch import PatchError, apply_unified_diff

OLD = "def f(x):\n    y = x + 1\n    return y\n\n\ndef g():\n    return 2\n"
NEW = "def f(x):\n    y = x - 1\n    return y\n\n\ndef g():\n    return 3\n"


def diff(a: str, b: str, path: str = "solution.py") -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), f"a/{path}", f"b/{path}"))


def test_roundtrip_with_difflib() -> None:
    assert apply_unified_diff(diff(OLD, NEW), {"solution.py": OLD}.get) == {"solution.py": NEW}


def test_wrong_line_numbers_are_tolerated() -> None:
    d = diff(OLD, NEW).replace("@@ -1,", "@@ -3,")
    assert apply_unified_diff(d, {"solution.py": OLD}.get)["solution.py"] == NEW


def test_context_mismatch_names_the_hunk() -> None:
    with pytest.raises(PatchError, match="hunk 1 of 'solution.py' does not apply"):
        apply_unified_diff(diff(OLD, NEW), {"solution.py": OLD.replace("x + 1", "x * 9")}.get)


def test_missing_file_new_file_and_garbage() -> None:
    with pytest.raises(PatchError, match="does not exist"):
        apply_unified_diff(diff(OLD, NEW, "nope.py"), {}.get)
    created = "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n"
    assert apply_unified_diff(created, {}.get) == {"new.py": "a = 1\nb = 2\n"}
    with pytest.raises(PatchError, match="expected a unified diff"):
        apply_unified_diff("please fix it", {}.get)
    with pytest.raises(PatchError, match="announces"):
        apply_unified_diff("--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n-a\n+b\n", {"x": "a\n"}.get)
    with pytest.raises(PatchError, match="deleting"):
        apply_unified_diff("--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n", {"x": "a\n"}.get)
