"""User problem sets: JSON Lines with one ``{"id", "question", "answer"}`` object per line."""

from __future__ import annotations

import json
from pathlib import Path

from agentgym.environments.math.generators import Problem
from agentgym.errors import DatasetError

__all__ = ["load_dataset"]

REQUIRED = ("id", "question", "answer")


def load_dataset(path: str | Path) -> list[Problem]:
    """Read a JSONL problem set; every bad row is a :class:`DatasetError` naming its line.

    ``answer`` may be a string or a number (``3`` is read as ``"3"``). Optional ``family`` and
    ``level`` fields are kept (default ``"dataset"`` and ``"custom"``). Blank lines are skipped.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise DatasetError(f"cannot read dataset {str(p)!r}: {e}; expected a JSONL file path") from e
    out: list[Problem] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{where}: not valid JSON ({e.msg}); expected one object per line") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected a JSON object with keys {list(REQUIRED)}, "
                               f"got {type(row).__name__}")
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise DatasetError(f"{where}: missing key(s) {missing}; each row needs {list(REQUIRED)}")
        pid, question, answer = row["id"], row["question"], row["answer"]
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        for key, val in (("id", pid), ("question", question), ("answer", answer)):
            if not isinstance(val, str) or not val.strip():
                raise DatasetError(f"{where}: {key!r} must be a non-empty string, got {val!r}")
        if pid in seen:
            raise DatasetError(f"{where}: duplicate id {pid!r} (first on line {seen[pid]}); ids must be unique")
        seen[pid] = lineno
        out.append(Problem(pid, question, answer, str(row.get("family", "dataset")),
                           str(row.get("level", "custom"))))
    if not out:
        raise DatasetError(f"{p}: the dataset has no problems; expected JSONL rows {{\"id\", \"question\", \"answer\"}}")
    return out
