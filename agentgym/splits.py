"""Task splits: names, the stable hash that assigns a problem to one, and the name check.

Every environment declares the splits it honours as ``splits`` on its class (``("train",
"eval")`` for the built-ins); ``split`` is a constructor argument and a reset option
(``env.reset(options={"split": "eval"})`` overrides the constructor's for one episode). A
name the env does not have is a :class:`ConfigError` with a did-you-mean, never ignored.

Procedural tasks and user datasets split by a hash of the problem's own text
(:func:`hash_split`), so the same problem lands in the same split whatever generated it, and
an eval problem is never generated in train. :func:`problem_digest` is the matching id part:
the same text gives the same id, which is what lets a trainer deduplicate eval problems.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Sequence

from agentgym.errors import ConfigError

__all__ = ["EVAL_SHARE", "check_split", "hash_split", "problem_digest"]

EVAL_SHARE = 5  # one problem in EVAL_SHARE goes to "eval" (20 %)
# Names other projects use, for the did-you-mean of an env that lacks them.
_ALIASES = {"test": "eval", "validation": "eval", "valid": "eval", "val": "eval", "dev": "eval",
            "evaluation": "eval", "training": "train"}


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def hash_split(text: str) -> str:
    """``"eval"`` when ``sha256(text) % 5 == 0``, else ``"train"``: stable across versions,
    platforms and generators (the text alone decides)."""
    return "eval" if int.from_bytes(_digest(text)[:8], "big") % EVAL_SHARE == 0 else "train"


def problem_digest(text: str, n: int = 12) -> str:
    """The first ``n`` hex digits of ``sha256(text)``: the problem's identity in task ids."""
    return _digest(text).hex()[:n]


def check_split(name: object, known: Sequence[str], where: str) -> str:
    """``name`` if it is one of ``known``, else a ConfigError naming ``where`` and the choices."""
    if isinstance(name, str) and name in known:
        return name
    if not known:
        raise ConfigError(f"{where} has no splits; leave 'split' out (got {name!r})")
    hint = difflib.get_close_matches(str(name), list(known), n=1)
    if not hint and isinstance(name, str):
        alias = _ALIASES.get(name.lower(), "")
        hint = [alias] if alias in known else [k for k in known if name.startswith(k)][:1]
    raise ConfigError(f"{where} has no split {name!r}" + (f"; did you mean {hint[0]!r}?" if hint else ";")
                      + f" its splits are {list(known)}")
