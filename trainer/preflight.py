"""What ``agentgym-train`` checks in a second before anything heavy is built.

A config that parses can still name things that do not exist: an env id with a typo, an engine
that is not one, a run dir that cannot be written, a model folder that is not there, a warm
start with no oracle for its env. ``--dry-run`` reports these with the memory plan; a real run
refuses to start on them (exit 2) instead of failing after the model is built.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from agentgym.errors import AgentGymError

__all__ = ["preflight"]


def _run_dir_problem(run_dir: str) -> str | None:
    path = Path(run_dir)
    probe = path
    while not probe.exists() and probe != probe.parent:  # the nearest folder that exists
        probe = probe.parent
    if not probe.is_dir():
        return f"log.run_dir={run_dir}: {probe} is not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".agentgym-write-test-"):
            pass
    except OSError as e:
        return f"log.run_dir={run_dir}: cannot create files under {probe} ({e.strerror or e}); pick a folder you can write"
    return None


def preflight(cfg: Any) -> list[str]:
    """Problems (one sentence each, with the fix) that would stop this run right after start-up."""
    import agentgym  # noqa: F401  (registers the built-in ids)
    from agentgym.registration import check_env_id
    from agentgym.trainer.engines.base import ENGINES, make_engine
    from agentgym.trainer.model import is_tiny

    problems: list[str] = []

    def check(what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except AgentGymError as e:
            problems.append(f"{what}: {e}")

    check(f"env.id={cfg.env.id}", check_env_id, cfg.env.id)
    if cfg.rollout.engine not in ENGINES:
        check(f"rollout.engine={cfg.rollout.engine}", make_engine, cfg.rollout.engine)
    bad = _run_dir_problem(cfg.log.run_dir)
    if bad:
        problems.append(bad)
    if not is_tiny(cfg.model.name):
        from agentgym.hub import pretrained_kwargs

        check(f"model.name={cfg.model.name}", pretrained_kwargs, cfg.model.name, "model")
    from agentgym.tokenizers import TOKENIZERS

    tok = cfg.model.tokenizer
    if tok not in ("auto", "byte") and tok not in TOKENIZERS:
        from agentgym.hub import pretrained_kwargs

        check(f"model.tokenizer={tok}", pretrained_kwargs, tok, "tokenizer")
    if cfg.model.init_from and not os.path.exists(cfg.model.init_from):
        problems.append(f"model.init_from={cfg.model.init_from}: no such file or directory")
    if cfg.sft.steps > 0 and not problems:
        from agentgym.trainer.sft import find_oracle

        check(f"sft.steps={cfg.sft.steps}", find_oracle, cfg.env.id)
    return problems
