"""GPT-OSS's own tokenizer, ``o200k_harmony``, built offline.

Two PyPI packages hold everything (``pip install 'agentgym-suite[harmony]'``):

* ``openai-harmony``, OpenAI's Harmony renderer, loads the ``o200k_harmony`` encoding (the
  ``o200k_base`` byte-pair ranks plus GPT-OSS's special tokens, ids 199998-201088) from the
  folder named by ``TIKTOKEN_ENCODINGS_BASE``;
* ``bpe-openai`` ships ``o200k_base.tiktoken`` gzipped in its wheel.

:func:`o200k_base_file` unpacks that file once into agentgym's cache and checks its published
sha256 (openai-harmony checks it again), :func:`harmony_encoding` loads the encoding, and
:class:`HarmonyTokenizer` is an agentgym :class:`~agentgym.tokenizers.Tokenizer` over it, so
plain text is encoded exactly as openai-harmony encodes message content.
:meth:`HarmonyTokenizer.save_pretrained` writes the same tokenizer as Hugging Face files
(``tokenizer.json`` ...) next to a model, so transformers and vLLM load model and tokenizer
from one folder; the suite checks that those files encode like openai-harmony.

The model vocabulary is 201,088 ids (0..201087), GPT-OSS's ``vocab_size``; openai-harmony
also names a reserved id 201088, which no GPT-OSS model can emit, so it is outside this
tokenizer's range.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import json
import os
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentgym.errors import TokenizerError

__all__ = [
    "O200K_BASE_SHA256",
    "O200K_HARMONY_VOCAB",
    "HarmonyTokenizer",
    "harmony_encoding",
    "o200k_base_file",
]

# Published sha256 of o200k_base.tiktoken (tiktoken's openai_public.py; openai-harmony checks it).
O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_HARMONY_VOCAB = 201_088  # GPT-OSS config.vocab_size
_N_BASE = 199_998  # o200k_base ranks 0..199997; the special tokens follow
_HINT = "pip install 'agentgym-suite[harmony]' (openai-harmony and bpe-openai, both on PyPI)"
# tiktoken's o200k_base pre-tokenizer (tiktoken_ext/openai_public.py), for the HF files.
_O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
_lock = threading.Lock()


def _cache_dir() -> Path:
    base = os.environ.get("AGENTGYM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "agentgym")
    return Path(base) / "o200k_harmony"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def o200k_base_file() -> Path:
    """``o200k_base.tiktoken`` unpacked from the ``bpe-openai`` wheel into the cache, sha256 checked."""
    target = _cache_dir() / "o200k_base.tiktoken"
    with _lock:
        if target.exists() and _sha256(target) == O200K_BASE_SHA256:
            return target
        # The file only: importing bpe_openai itself would load its 74 MB extension for nothing.
        spec = importlib.util.find_spec("bpe_openai")
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        packed_path = Path(folders[0]) / "data" / "o200k_base.tiktoken.gz" if folders else None
        if packed_path is None or not packed_path.exists():
            raise TokenizerError(f"the o200k_harmony tokenizer needs bpe-openai's o200k_base.tiktoken: {_HINT}")
        packed = packed_path.read_bytes()
        data = gzip.decompress(packed)
        digest = hashlib.sha256(data).hexdigest()
        if digest != O200K_BASE_SHA256:
            raise TokenizerError(
                f"bpe-openai's o200k_base.tiktoken has sha256 {digest}, expected the published "
                f"{O200K_BASE_SHA256}; reinstall bpe-openai (pip install --force-reinstall bpe-openai)")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, target)  # atomic: a concurrent reader never sees half a file
        return target


@lru_cache(maxsize=1)
def harmony_encoding() -> Any:
    """openai-harmony's ``HarmonyEncoding`` for GPT-OSS (``o200k_harmony``), loaded offline."""
    try:
        import openai_harmony as oh
    except ImportError as e:
        raise TokenizerError(f"the o200k_harmony tokenizer needs openai-harmony: {_HINT}") from e
    folder = str(o200k_base_file().parent)
    with _lock:  # TIKTOKEN_ENCODINGS_BASE is read during the load only; restore the caller's
        before = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
        os.environ["TIKTOKEN_ENCODINGS_BASE"] = folder
        try:
            return oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
        finally:
            if before is None:
                os.environ.pop("TIKTOKEN_ENCODINGS_BASE", None)
            else:
                os.environ["TIKTOKEN_ENCODINGS_BASE"] = before


def _load_ranks(path: Path) -> dict[bytes, int]:
    """A ``.tiktoken`` file: one ``base64(token) rank`` per line."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=1)
def _hf_tokenizer_json() -> str:
    """The Hugging Face ``tokenizer.json`` of o200k_harmony (built once, ~10 s, then cached on disk)."""
    cached = _cache_dir() / f"tokenizer-{O200K_BASE_SHA256[:12]}.json"
    if cached.exists():
        return cached.read_text()
    try:
        from tokenizers import AddedToken
        from transformers.convert_slow_tokenizer import TikTokenConverter
    except ImportError as e:
        raise TokenizerError(
            "writing o200k_harmony as Hugging Face files needs transformers and tokenizers: "
            "pip install 'agentgym-suite[train,harmony]'") from e

    class _Converter(TikTokenConverter):  # transformers' converter, reading the ranks without tiktoken
        @staticmethod
        def load_tiktoken_bpe(path: str) -> dict[bytes, int]:
            return _load_ranks(Path(path))

    tok = _Converter(vocab_file=str(o200k_base_file()), pattern=_O200K_PATTERN).converted()
    enc = harmony_encoding()
    specials = [str(enc.decode([i])) for i in range(_N_BASE, O200K_HARMONY_VOCAB)]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    if tok.get_vocab_size() != O200K_HARMONY_VOCAB:  # the ids must be the model's ids, in order
        raise TokenizerError(f"built {tok.get_vocab_size()} ids, expected {O200K_HARMONY_VOCAB}")
    text = tok.to_str()
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, cached)
    return text


class HarmonyTokenizer:
    """GPT-OSS's ``o200k_harmony`` tokenizer (alias ``gpt-oss``), from openai-harmony, offline.

    >>> tok = HarmonyTokenizer()                                     # doctest: +SKIP
    >>> tok.encode("hello world"), tok.special_id("<|call|>")        # doctest: +SKIP
    ([24912, 2375], 200012)
    """

    name = "o200k_harmony"

    def __init__(self) -> None:
        self.enc = harmony_encoding()
        self.vocab_size = O200K_HARMONY_VOCAB
        self.pad_id = self.special_id("<|endoftext|>")  # GPT-OSS's pad_token_id (199999)

    def encode(self, text: str) -> list[int]:
        # disallowed_special=(): "<|end|>" inside text is text, as in openai-harmony's renders.
        return [int(i) for i in self.enc.encode(text, disallowed_special=())]

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise TokenizerError(
                f"ids {bad[:5]} are outside the vocabulary (0..{self.vocab_size - 1}) of {self.name}; "
                "pass ids produced by this tokenizer")
        return str(self.enc.decode(ids))

    def special_id(self, token: str) -> int:
        if token not in self.enc.special_tokens_set:
            raise TokenizerError(f"{token!r} is not a special token of {self.name}; expected e.g. '<|call|>'")
        return int(self.enc.encode(token, allowed_special={token})[0])

    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        """Write Hugging Face tokenizer files into ``directory`` (e.g. a model folder), as GPT-OSS's
        own: ``tokenizer.json`` (byte-level BPE, o200k pre-tokenizer, specials 199998-201087),
        ``tokenizer_config.json`` (PreTrainedTokenizerFast; bos/eos/pad) and
        ``special_tokens_map.json``. ``AutoTokenizer.from_pretrained(directory)`` and vLLM load them."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "tokenizer.json").write_text(_hf_tokenizer_json())
        specials = {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"}
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072, **specials}
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
        return out

    def __repr__(self) -> str:
        return f"HarmonyTokenizer({self.name!r}, vocab_size={self.vocab_size})"
