"""Tokenizers that speak Harmony.

An environment takes any object that satisfies :class:`Tokenizer`. Two come ready:

* :class:`ByteTokenizer`, agentgym's own offline tokenizer: one id per byte (so any text
  round-trips exactly) followed by the Harmony special tokens, each a single id. Built in
  memory, no download. This is the default everywhere.
* :class:`HFTokenizer`, an adapter for any Hugging Face tokenizer that has the Harmony
  special tokens as single ids (GPT-OSS's ``o200k_harmony`` tokenizer does).
* ``"o200k_harmony"`` (alias ``"gpt-oss"``): GPT-OSS's own tokenizer, built offline from
  openai-harmony and bpe-openai (:mod:`agentgym.harmony_tokenizer`).

:func:`as_tokenizer` accepts those names (:data:`TOKENIZERS`), a local path, a Hugging Face
tokenizer or any object with the :class:`Tokenizer` methods.

Text from the environment or the task is always encoded as *plain text*: a task that
contains the characters ``<|end|>`` can never inject a control token. Only
:func:`encode_harmony_text` (used by the text wrapper for strings written by an API model)
turns special-token strings into special ids.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from agentgym.errors import TokenizerError

__all__ = [
    "HARMONY_SPECIALS",
    "ByteTokenizer",
    "HFTokenizer",
    "TOKENIZERS",
    "Tokenizer",
    "as_tokenizer",
    "default_tokenizer",
    "encode_harmony_text",
]

# Order matters for ByteTokenizer: ids 256.. in this order.
HARMONY_SPECIALS: tuple[str, ...] = (
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|channel|>",
    "<|constrain|>",
    "<|return|>",
    "<|call|>",
)
_PAD = "<|endoftext|>"
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in HARMONY_SPECIALS) + ")")


@runtime_checkable
class Tokenizer(Protocol):
    """What an environment needs from a tokenizer."""

    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """Plain text to ids. Never produces a special-token id."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Ids to text; special ids render as their strings (``<|end|>``)."""
        ...

    def special_id(self, token: str) -> int:
        """The single id of a Harmony special token such as ``"<|call|>"``."""
        ...


class ByteTokenizer:
    """Byte-level tokenizer: ids 0-255 are bytes, then the Harmony specials, then a pad.

    >>> tok = ByteTokenizer()
    >>> tok.decode(tok.encode("héllo")) == "héllo"
    True
    """

    name = "agentgym-byte-v1"

    def __init__(self) -> None:
        self._special_to_id = {s: 256 + i for i, s in enumerate(HARMONY_SPECIALS)}
        self._special_to_id[_PAD] = 256 + len(HARMONY_SPECIALS)
        self._id_to_special = {i: s for s, i in self._special_to_id.items()}
        self.vocab_size = 256 + len(self._special_to_id)
        self.pad_id = self._special_to_id[_PAD]

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            i = int(i)
            if 0 <= i < 256:
                run.append(i)
                continue
            if run:
                out.append(bytes(run).decode("utf-8", errors="replace"))
                run = []
            special = self._id_to_special.get(i)
            if special is None:
                raise TokenizerError(
                    f"id {i} is outside the vocabulary (0..{self.vocab_size - 1}) of "
                    f"{self.name}; pass ids produced by this tokenizer"
                )
            out.append(special)
        if run:
            out.append(bytes(run).decode("utf-8", errors="replace"))
        return "".join(out)

    def special_id(self, token: str) -> int:
        try:
            return self._special_to_id[token]
        except KeyError:
            raise TokenizerError(
                f"{token!r} is not a special token of {self.name}; "
                f"expected one of {sorted(self._special_to_id)}"
            ) from None

    def __repr__(self) -> str:
        return f"ByteTokenizer(vocab_size={self.vocab_size})"


class HFTokenizer:
    """Adapter for a Hugging Face tokenizer that carries the Harmony special tokens."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf = hf_tokenizer
        self.name = getattr(hf_tokenizer, "name_or_path", type(hf_tokenizer).__name__)
        self.vocab_size = len(hf_tokenizer)
        self._special_to_id: dict[str, int] = {}
        missing = []
        for s in HARMONY_SPECIALS:
            ids = hf_tokenizer.convert_tokens_to_ids([s])
            tid = ids[0] if ids else None
            if tid is None or tid == getattr(hf_tokenizer, "unk_token_id", None):
                missing.append(s)
            else:
                self._special_to_id[s] = int(tid)
        if missing:
            raise TokenizerError(
                f"tokenizer {self.name!r} lacks the Harmony special tokens {missing}; "
                "expected a GPT-OSS (o200k_harmony) tokenizer or one with these tokens added "
                "as single ids (tokenizer.add_special_tokens), or pass no tokenizer to use "
                "agentgym's offline ByteTokenizer"
            )

    def encode(self, text: str) -> list[int]:
        # split_special_tokens: "<|end|>" inside text stays text, never a control token.
        return list(self.hf.encode(text, add_special_tokens=False, split_special_tokens=True))

    def decode(self, ids: Sequence[int]) -> str:
        bad = [int(i) for i in ids if not 0 <= int(i) < self.vocab_size]
        if bad:
            raise TokenizerError(
                f"ids {bad[:5]} are outside the vocabulary (0..{self.vocab_size - 1}) "
                f"of {self.name!r}"
            )
        return str(self.hf.decode(list(ids), skip_special_tokens=False))

    def special_id(self, token: str) -> int:
        try:
            return self._special_to_id[token]
        except KeyError:
            raise TokenizerError(f"{token!r} is not a Harmony special token") from None

    def __repr__(self) -> str:
        return f"HFTokenizer({self.name!r}, vocab_size={self.vocab_size})"


@lru_cache(maxsize=1)
def default_tokenizer() -> ByteTokenizer:
    """The shared offline tokenizer every environment uses when given none."""
    return ByteTokenizer()


@lru_cache(maxsize=1)
def _o200k_harmony() -> Tokenizer:
    from agentgym.harmony_tokenizer import HarmonyTokenizer

    return HarmonyTokenizer()


# Tokenizers known by name (built offline, shared); anything else a string names is a path.
TOKENIZERS: dict[str, Callable[[], Tokenizer]] = {
    "byte": default_tokenizer,
    "o200k_harmony": _o200k_harmony,
    "gpt-oss": _o200k_harmony,
}


def as_tokenizer(obj: Any = None) -> Tokenizer:
    """Turn ``None``, a name in :data:`TOKENIZERS`, a local path, a Hugging Face tokenizer or a
    :class:`Tokenizer` into one."""
    if obj is None:
        return default_tokenizer()
    if isinstance(obj, (ByteTokenizer, HFTokenizer)):
        return obj
    if isinstance(obj, str) and obj in TOKENIZERS:
        return TOKENIZERS[obj]()
    if isinstance(obj, str):
        close = difflib.get_close_matches(obj, TOKENIZERS, n=1)
        if close and not os.path.exists(obj):  # a typo of a name, not a path or a hub id
            raise TokenizerError(f"unknown tokenizer {obj!r}; did you mean {close[0]!r}? "
                                 f"Known names: {sorted(TOKENIZERS)}, or pass a path / hub id")
        from agentgym.hub import pretrained_kwargs

        kwargs = pretrained_kwargs(obj, "tokenizer", TokenizerError)  # before transformers' slow import
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise TokenizerError(
                f"loading tokenizer {obj!r} needs transformers: pip install 'agentgym-suite[train]'"
            ) from e
        try:
            hf = AutoTokenizer.from_pretrained(obj, **kwargs)
        except (OSError, ValueError) as e:
            raise TokenizerError(
                f"could not load a tokenizer from {obj!r}: {e}. Expected one of {sorted(TOKENIZERS)}, "
                "a local folder with Hugging Face tokenizer files, or a hub id") from e
        return HFTokenizer(hf)
    if hasattr(obj, "convert_tokens_to_ids") and hasattr(obj, "encode"):
        return HFTokenizer(obj)
    if isinstance(obj, Tokenizer):
        return obj
    raise TokenizerError(
        f"expected None, a path, a Hugging Face tokenizer or an agentgym Tokenizer; "
        f"got {type(obj).__name__}"
    )


def encode_harmony_text(tok: Tokenizer, text: str) -> list[int]:
    """Encode text written *in Harmony*: special-token strings become special ids."""
    ids: list[int] = []
    for part in _SPECIAL_RE.split(text):
        if not part:
            continue
        if part in HARMONY_SPECIALS:
            ids.append(tok.special_id(part))
        else:
            ids.extend(tok.encode(part))
    return ids
