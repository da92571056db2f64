"""User problem sets: JSON Lines, one ``{"id", "question", "answer"}`` object per line.

Optional fields of a row:

* ``form``: what a final answer must look like (:mod:`.answer_form`: ``"integer"``,
  ``"fraction"``, ``"set[number]"``, ``"expanded"``, ...); without it, the form the reference
  is written in (:func:`.verify.infer_form`: ``number`` for a number literal, ``expression``
  for an expression, ...). The reference must be in its own form.
* ``expression``: the question's expression (``"(x + 1)^2 - x^2"`` of "Simplify ..."): an answer
  that restates it earns 0, and a ``simplified`` answer must be shorter than it.
* ``split``: ``"train"`` or ``"eval"``; without it, the hash of the question decides
  (:func:`agentgym.splits.hash_split`), as for generated problems.
* ``family`` and ``level``: kept as labels (default ``"dataset"`` and ``"custom"``).

A task's id is its row's ``id``. A question may appear only once in a file: the same question
under two ids (or in two splits) would count one problem twice and could leak eval into train.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from agentgym.environments.math.answer_form import parse_form
from agentgym.environments.math.generators import Problem
from agentgym.environments.math.verify import infer_form, reference_form_problem
from agentgym.errors import ConfigError, DatasetError
from agentgym.splits import hash_split

__all__ = ["DATASET_SPLITS", "load_dataset"]

REQUIRED = ("id", "question", "answer")
DATASET_SPLITS = ("train", "eval")


def load_dataset(path: str | Path) -> list[Problem]:
    """Read a JSONL problem set; every bad row is a :class:`DatasetError` naming its line.

    ``answer`` may be a string or a number (``3`` is read as ``"3"``). Blank lines are skipped.
    A file read before is not parsed again while its size and modification time stay the same
    (a trainer makes one env per episode slot, each with the whole dataset).
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise DatasetError(f"cannot read dataset {str(p)!r}: {e}; expected a JSONL file path") from e
    return list(_parsed(p.resolve(), st.st_size, st.st_mtime_ns, p))


@functools.lru_cache(maxsize=8)
def _parsed(_key: Path, _size: int, _mtime_ns: int, p: Path) -> tuple[Problem, ...]:
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise DatasetError(f"cannot read dataset {str(p)!r}: {e}; expected a JSONL file path") from e
    out: list[Problem] = []
    seen: dict[str, int] = {}
    questions: dict[str, int] = {}
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
        if question in questions:
            raise DatasetError(f"{where}: the question of line {questions[question]} again; a problem appears "
                               "once (two copies would count it twice, or put it in both splits)")
        seen[pid], questions[question] = lineno, lineno
        given = row.get("expression")
        if given is not None and (not isinstance(given, str) or not given.strip()):
            raise DatasetError(f"{where}: 'expression' must be a non-empty string (the question's "
                               f"expression), got {given!r}")
        form = row.get("form")
        if form is None:
            form = infer_form(answer)
        try:
            parse_form(form)
        except ConfigError as e:
            raise DatasetError(f"{where}: {e}") from None
        bad = reference_form_problem(answer, form, given)
        if bad:
            raise DatasetError(f"{where}: the answer {answer!r} is not in its form {form!r}: {bad}")
        split = row.get("split", hash_split(question))
        if split not in DATASET_SPLITS:
            raise DatasetError(f"{where}: 'split' must be one of {list(DATASET_SPLITS)} (or left out: the "
                               f"question's hash decides), got {split!r}")
        out.append(Problem(pid, question, answer, str(row.get("family", "dataset")),
                           str(row.get("level", "custom")), None, form, split, given))
    if not out:
        raise DatasetError(f"{p}: the dataset has no problems; expected JSONL rows {{\"id\", \"question\", \"answer\"}}")
    return tuple(out)
