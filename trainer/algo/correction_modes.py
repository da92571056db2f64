"""The rollout-correction modes by name, and the parser of a mode string (``rule+mask``).

No torch here: the config checks ``correction.mode`` with :func:`parse_mode` before anything
heavy is imported; the weights themselves are :func:`~agentgym.trainer.algo.correction.correction_weights`.
"""

from __future__ import annotations

from agentgym.errors import ConfigError

__all__ = ["CORRECTION_MODES", "MASKS", "parse_mode"]

CORRECTION_MODES = ("none", "token_tis", "seq_tis", "token_mis", "seq_mis", "geo_mask")
MASKS = ("geo_mask",)  # 0/1 sequence filters that multiply a weight rule (``rule+mask``)


def parse_mode(mode: str) -> list[str]:
    """``"token_tis+geo_mask"`` -> ``["token_tis", "geo_mask"]``, checked: known names, at
    most one weight rule and at most one mask."""
    parts = [p.strip() for p in mode.split("+")]
    for p in parts:
        if p not in CORRECTION_MODES:
            import difflib

            close = difflib.get_close_matches(p, CORRECTION_MODES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown correction mode {p!r} in {mode!r}; expected one of "
                              f"{CORRECTION_MODES}, or a rule and a mask joined by '+' "
                              f"(e.g. 'token_tis+geo_mask').{hint}")
    rules = [p for p in parts if p not in MASKS]
    masks = [p for p in parts if p in MASKS]
    if len(rules) > 1 or len(masks) > 1:
        raise ConfigError(f"correction mode {mode!r}: expected at most one weight rule "
                          f"({[m for m in CORRECTION_MODES if m not in MASKS]}) and at most one "
                          f"mask ({list(MASKS)}) joined by '+', e.g. 'token_tis+geo_mask'")
    return parts
