"""Apply a unified diff (``diff -u`` / ``git diff`` output) to files, in pure Python.

Hunks are located by their context and removed lines, not trusted line numbers: a hunk
applies at the stated line if it matches there, else at the nearest line where it
matches. Anything that does not match exactly raises :class:`PatchError` with a message
a model can act on (which file, which hunk, what was expected there).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["PatchError", "apply_unified_diff"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """The diff is malformed or does not apply."""


@dataclass
class _Hunk:
    old_start: int
    lines: list[str] = field(default_factory=list)  # with their ' ', '-', '+' prefix

    def old(self) -> list[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "-")]

    def new(self) -> list[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "+")]


def _strip_prefix(path: str) -> str:
    path = path.split("\t")[0].strip()
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return path


def _parse(patch: str) -> list[tuple[str | None, str | None, list[_Hunk]]]:
    files: list[tuple[str | None, str | None, list[_Hunk]]] = []
    lines = patch.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old = _strip_prefix(line[4:])
            new = _strip_prefix(lines[i + 1][4:])
            files.append((None if old == "/dev/null" else old,
                          None if new == "/dev/null" else new, []))
            i += 2
            continue
        m = _HUNK.match(line)
        if m:
            if not files:
                raise PatchError("hunk before any '--- a/FILE' / '+++ b/FILE' header")
            hunk = _Hunk(int(m.group(1)))
            n_old = int(m.group(2)) if m.group(2) is not None else 1
            n_new = int(m.group(4)) if m.group(4) is not None else 1
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < n_old or seen_new < n_new):
                body = lines[i]
                if body.startswith("\\"):  # "\ No newline at end of file"
                    i += 1
                    continue
                tag = body[:1] if body else " "  # editors strip the space of blank context lines
                if tag not in (" ", "-", "+"):
                    break
                hunk.lines.append(tag + body[1:])
                seen_old += tag in (" ", "-")
                seen_new += tag in (" ", "+")
                i += 1
            if seen_old != n_old or seen_new != n_new:
                raise PatchError(
                    f"hunk '{line}' announces {n_old} old / {n_new} new lines but has "
                    f"{seen_old} / {seen_new}; fix the counts in the @@ header")
            files[-1][2].append(hunk)
            continue
        i += 1  # diff --git, index, commentary lines
    if not files:
        raise PatchError("no '--- a/FILE' / '+++ b/FILE' header found: expected a unified diff")
    return files


def _find(lines: list[str], old: list[str], start: int) -> int | None:
    """Index where ``old`` occurs in ``lines``, nearest to ``start``."""
    if not old:
        return min(max(start, 0), len(lines))
    best = None
    for pos in range(len(lines) - len(old) + 1):
        if lines[pos:pos + len(old)] == old and (best is None or abs(pos - start) < abs(best - start)):
            best = pos
    return best


def apply_unified_diff(patch: str, read: Callable[[str], str | None]) -> dict[str, str]:
    """New contents of every file the diff touches. ``read(path)`` gives the current text
    (None if the file does not exist). Deleting files is not supported."""
    out: dict[str, str] = {}
    for old_path, new_path, hunks in _parse(patch):
        if new_path is None:
            raise PatchError(f"deleting files is not supported (diff deletes {old_path!r})")
        if not hunks:
            raise PatchError(f"no @@ hunks for {new_path!r}")
        if old_path is None:
            text = ""
        else:
            current = out.get(old_path, read(old_path))
            if current is None:
                raise PatchError(f"{old_path!r} does not exist; create it with '--- /dev/null'")
            text = current
        ends_nl = text.endswith("\n") or not text
        lines = text.splitlines()
        offset = 0
        for k, h in enumerate(hunks):
            old = h.old()
            pos = _find(lines, old, h.old_start - 1 + offset)
            if pos is None:
                shown = "\n".join(old[:6])
                raise PatchError(
                    f"hunk {k + 1} of {new_path!r} does not apply: these lines were not found "
                    f"(context and '-' lines must match the file exactly):\n{shown}")
            lines[pos:pos + len(old)] = h.new()
            offset += len(h.new()) - len(old)
        out[new_path] = "\n".join(lines) + ("\n" if ends_nl and lines else "")
    return out
