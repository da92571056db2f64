"""The submission file: one JSON object per line, plain or gzip-compressed (``.jsonl.gz``).

::

    {"kind": "header", "format": "agentgym-submission", "schema": 1,
     "suite": {...the whole suite...}, "submission": {name, policy, describe, tokenizer, ...}}
    {"kind": "episode", "env_id": ..., "task": 0, "trial": 0, "seed": ..., "options": {...},
     "score": 1.0, "cost": {...}, "trajectory": {...the trajectory record...}}
    ...                                   one line per episode, in suite order
    {"kind": "footer", "episodes": N, "scores": {env_id: summary}, "overall": summary, "cost": {...}}

The footer makes a cut-off file detectable even when it was cut at a line boundary. Scores and
token counts in the file are claims: the verifier recomputes every one of them by replay.
``submission.schema.json`` (next to this module) is the JSON schema of the three kinds of line.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agentgym.errors import SubmissionError
from agentgym.trajectory import Trajectory

__all__ = ["FORMAT", "SCHEMA_VERSION", "RawSubmission", "episode_cost", "episode_score", "load_tokenizer",
           "open_text", "read_raw", "schema_validator", "tokenizer_info", "write_submission"]

FORMAT = "agentgym-submission"
SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).parent / "submission.schema.json"


def open_text(path: str | Path, mode: str = "r") -> IO[str]:
    """Open a submission for text I/O; ``.gz`` files are gzip streams."""
    if str(path).endswith(".gz"):
        return gzip.open(path, mode + "t", encoding="utf-8")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8")


@functools.lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=4)
def schema_validator(kind: str) -> Any:
    """A jsonschema validator for one kind of line: ``header``, ``episode`` or ``footer``."""
    import jsonschema

    schema = {**_schema(), "$ref": f"#/$defs/{kind}"}
    return jsonschema.Draft202012Validator(schema)


def episode_score(traj: Trajectory) -> float:
    """The task outcome of an episode (the last turn's ``outcome`` component; 0 if it never ended)."""
    return float(traj.turns[-1].components.get("outcome", 0.0)) if traj.turns and traj.terminated else 0.0


def episode_cost(traj: Trajectory, wall_s: float = 0.0) -> dict[str, Any]:
    """Tokens in (the context the policy read at each turn, what a cache-less API bills), tokens
    out (what it sampled), turns, and wall-clock seconds (measured, not recomputable)."""
    return {"input_tokens": sum(t.action_start for t in traj.turns), "output_tokens": sum(traj.policy_mask),
            "turns": len(traj.turns), "wall_s": round(float(wall_s), 3)}


def tokenizer_info(tok: Any) -> dict[str, Any]:
    """What the header records of the tokenizer, enough for a verifier to rebuild it offline."""
    from agentgym.tokenizers import ByteTokenizer, default_tokenizer

    tok = tok if tok is not None else default_tokenizer()
    spec = "byte" if isinstance(tok, ByteTokenizer) else str(getattr(tok, "name", ""))
    return {"spec": spec, "name": str(getattr(tok, "name", type(tok).__name__)), "vocab_size": int(tok.vocab_size)}


def load_tokenizer(info: dict[str, Any]) -> Any:
    """The tokenizer a header names (``byte`` or a local path / hub id that must be available offline)."""
    from agentgym.tokenizers import ByteTokenizer, as_tokenizer

    spec = info.get("spec", "")
    try:
        tok = ByteTokenizer() if spec == "byte" else as_tokenizer(spec)
    except Exception as e:
        raise SubmissionError(f"cannot load the submission's tokenizer {spec!r} ({e}); verification needs "
                              "it locally (a directory with tokenizer.json)") from e
    if tok.vocab_size != info.get("vocab_size") or getattr(tok, "name", None) != info.get("name"):
        raise SubmissionError(f"tokenizer {spec!r} loads as {getattr(tok, 'name', '?')!r} with "
                              f"{tok.vocab_size} ids, but the submission recorded {info.get('name')!r} with "
                              f"{info.get('vocab_size')}: not the tokenizer the episodes were sampled with")
    return tok


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def write_submission(path: str | Path, header: dict[str, Any], episodes: Iterable[dict[str, Any]],
                     footer: dict[str, Any]) -> Path:
    """Write header, episodes and footer atomically (temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        # mtime=0 keeps a gzip file byte-identical across runs (gzip stamps the time otherwise).
        raw: Any = (gzip.GzipFile(tmp, "wb", mtime=0) if path.name.endswith(".gz") else open(tmp, "wb"))
        with raw:
            for obj in (header, *episodes, footer):
                raw.write((_dumps(obj) + "\n").encode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


@dataclass
class RawSubmission:
    """A submission as read, before any judgement: parsed lines with their line numbers."""

    path: Path
    header: dict[str, Any] | None = None
    episodes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    footer: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)  # structural: cut-off lines, missing header/footer


def read_raw(path: str | Path) -> RawSubmission:
    """Read every line, never raising on content: what is wrong goes to ``problems``."""
    path = Path(path)
    out = RawSubmission(path)
    if not path.exists():
        raise SubmissionError(f"{path}: no such submission file")
    try:
        with open_text(path) as f:
            lines = f.read().split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        # A cut-off gzip stream ends with EOFError ("Compressed file ended before the end-of-stream marker").
        out.problems.append(f"{path}: the file cannot be read to its end ({e}): truncated or corrupt")
        return out
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        out.problems.append(f"line {len(lines)}: the last line has no newline: the file was cut off while "
                            "being written (truncated)")
    for n, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            out.problems.append(f"line {n}: not valid JSON ({e.msg} at column {e.colno}): the line is cut off "
                                "or corrupt")
            continue
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if kind == "header" and n == 1:
            out.header = obj
        elif kind == "episode":
            out.episodes.append((n, obj))
        elif kind == "footer" and n == len(lines):
            out.footer = obj
        else:
            out.problems.append(f"line {n}: unexpected record kind {kind!r} here (line 1 is the header, the "
                                "last line the footer, every other line an episode)")
    if out.header is None:
        out.problems.append("line 1: the header is missing (expected {\"kind\": \"header\", ...} first)")
    if out.footer is None:
        out.problems.append(f"the footer is missing after line {len(lines)}: the file is truncated (an "
                            "agentgym-eval run writes the footer last)")
    return out
