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
import hashlib
import json
import os
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agentgym.errors import SubmissionError
from agentgym.leaderboards.limits import (
    MAX_FILE_BYTES,
    MAX_LINE_BYTES,
    MAX_LINES,
    MAX_PROBLEMS,
    LineError,
    parse_line,
)
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
    """The tokenizer a header names, built without the network: ``byte``, a name of
    :data:`agentgym.tokenizers.TOKENIZERS`, or a local folder / a hub id already in the Hugging Face
    cache (``local_files_only``). Anything else is a :class:`SubmissionError` saying how to get it."""
    from agentgym.tokenizers import TOKENIZERS, as_tokenizer

    spec = str(info.get("spec", ""))
    try:
        tok = as_tokenizer(spec) if spec in TOKENIZERS else _local_tokenizer(spec)
    except SubmissionError:
        raise
    except Exception as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:300]
        raise SubmissionError(f"cannot load the submission's tokenizer {spec!r} ({first}); verification needs "
                              "it locally (a directory with tokenizer.json)") from e
    if tok.vocab_size != info.get("vocab_size") or getattr(tok, "name", None) != info.get("name"):
        raise SubmissionError(f"tokenizer {spec!r} loads as {getattr(tok, 'name', '?')!r} with "
                              f"{tok.vocab_size} ids, but the submission recorded {info.get('name')!r} with "
                              f"{info.get('vocab_size')}: not the tokenizer the episodes were sampled with")
    return tok


def _local_tokenizer(spec: str) -> Any:
    """A Hugging Face tokenizer from a local folder or the local cache; never from the hub
    (verification is offline: a submission must not make the verifier fetch anything)."""
    from agentgym.tokenizers import HFTokenizer

    if not spec:
        raise SubmissionError("the header names no tokenizer (submission.tokenizer.spec is empty)")
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise SubmissionError(f"the submission's tokenizer {spec!r} is a Hugging Face tokenizer, which needs "
                              "transformers: pip install 'agentgym-suite[train]'") from e
    try:
        hf = AutoTokenizer.from_pretrained(spec, local_files_only=True)
    except (OSError, ValueError) as e:
        raise SubmissionError(
            f"the submission's tokenizer {spec!r} is not available locally (verification never downloads: "
            f"{(str(e).splitlines() or ['not found'])[0][:200]}); put its files in a local folder or the Hugging "
            "Face cache (huggingface-cli download NAME on a machine with access), then verify again") from None
    return HFTokenizer(hf)


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


def _lines(path: Path, out: RawSubmission) -> list[str | None] | None:
    """The file's lines (newlines kept), each read with a bounded ``readline`` (:mod:`.limits`); a
    ``.gz`` stream is decompressed a buffer at a time. A line that repeats an earlier one byte for
    byte is a problem and None (a bomb of one line repeated is never parsed twice). None when the
    file must not be read further (the reason is in ``out.problems``)."""
    lines: list[str | None] = []
    total = 0
    seen: dict[bytes, int] = {}  # digest of a line -> its line number
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as f:
            while raw := f.readline(MAX_LINE_BYTES + 1):
                n = len(lines) + 1
                total += len(raw)
                if total > MAX_FILE_BYTES:
                    out.problems.append(f"the file holds more than {MAX_FILE_BYTES:,} bytes (uncompressed) by line "
                                        f"{n}: larger than any submission agentgym-eval writes (a compression "
                                        "bomb?); refused without reading further")
                    return None
                if n > MAX_LINES:
                    out.problems.append(f"the file has more than {MAX_LINES:,} lines: more than any suite has "
                                        "episodes; refused without reading further")
                    return None
                if len(raw) > MAX_LINE_BYTES:
                    out.problems.append(f"line {n} is longer than {MAX_LINE_BYTES:,} bytes: longer than any line "
                                        "agentgym-eval writes; refused without reading further")
                    return None
                digest = hashlib.blake2b(raw, digest_size=16).digest()
                if digest in seen:
                    out.problems.append(f"line {n} repeats line {seen[digest]} byte for byte")
                    lines.append(None)
                else:
                    seen[digest] = n
                    lines.append(raw.decode("utf-8"))
                if len(out.problems) > MAX_PROBLEMS:
                    out.problems.append(f"more than {MAX_PROBLEMS} problems by line {n}: reading stopped")
                    return None
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
        # A cut-off gzip stream ends with EOFError ("Compressed file ended before the end-of-stream marker").
        reason = (str(e).splitlines() or [type(e).__name__])[0][:200]
        out.problems.append(f"{path}: the file cannot be read to its end ({reason}): truncated or corrupt")
        return None
    return lines


def read_raw(path: str | Path) -> RawSubmission:
    """Read every line within the limits of :mod:`.limits`, never raising on content: what is
    wrong goes to ``problems``."""
    path = Path(path)
    out = RawSubmission(path)
    if not path.exists():
        raise SubmissionError(f"{path}: no such submission file")
    lines = _lines(path, out)
    if lines is None:
        return out
    if lines and lines[-1] is not None and not lines[-1].endswith("\n"):
        out.problems.append(f"line {len(lines)}: the last line has no newline: the file was cut off while "
                            "being written (truncated)")
    for n, line in enumerate(lines, 1):
        if line is None:
            continue
        try:
            obj = parse_line(line.removesuffix("\n"))
        except LineError as e:
            out.problems.append(f"line {n}: {e}")
            obj = None
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if kind == "header" and n == 1:
            out.header = obj
        elif kind == "episode":
            out.episodes.append((n, obj))
        elif kind == "footer" and n == len(lines):
            out.footer = obj
        elif obj is not None:
            out.problems.append(f"line {n}: unexpected record kind {kind!r} here (line 1 is the header, the "
                                "last line the footer, every other line an episode)")
        if len(out.problems) > MAX_PROBLEMS:
            out.problems.append(f"more than {MAX_PROBLEMS} problems by line {n}: reading stopped")
            return out
    if out.header is None:
        out.problems.append("line 1: the header is missing (expected {\"kind\": \"header\", ...} first)")
    if out.footer is None:
        out.problems.append(f"the footer is missing after line {len(lines)}: the file is truncated (an "
                            "agentgym-eval run writes the footer last)")
    return out
