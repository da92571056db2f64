"""What ``agentgym-train`` checks in a second before anything heavy is built.

A config that parses can still name things that do not exist: an env id with a typo, an engine
that is not one, a run dir that cannot be written, a warm start with no oracle for its env
(:func:`preflight`), or weights this machine cannot load (:func:`weights_problems`). ``--dry-run``
reports the former as problems of the plan and the latter as notes (a plan may be for another
machine); a real run refuses to start on either (exit 2) instead of failing after the model is
built.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from agentgym.errors import AgentGymError

from .model.files import model_dir_problem
from .model.gptoss import is_tiny, tokenizer_source
from .rollout.demos import find_oracle
from .rollout.engines import ENGINES, make_engine

__all__ = ["preflight", "weights_problems"]


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
    if cfg.sft.steps > 0 and not problems:
        check(f"sft.steps={cfg.sft.steps}", find_oracle, cfg.env.id)
    return problems


def weights_problems(cfg: Any) -> list[str]:
    """Weights and tokenizer this machine cannot load (a missing folder; a hub id that is not
    cached while the hub is off or unreachable). A run stops on them; a dry run, which may plan
    a run for another machine, only notes them."""
    from agentgym.hub import pretrained_kwargs

    problems: list[str] = []
    names = [] if is_tiny(cfg.model.name) else [("model.name", cfg.model.name, "model")]
    source = tokenizer_source(cfg.model.name, cfg.model.tokenizer)
    if cfg.model.tokenizer != "auto" and source is not None:  # auto: the model's own, checked above
        names.append(("model.tokenizer", source, "tokenizer"))
    for key, name, what in names:
        try:
            pretrained_kwargs(name, what)
        except AgentGymError as e:
            problems.append(f"{key}={name}: {e}")
    if cfg.model.init_from and not os.path.exists(cfg.model.init_from):
        problems.append(f"model.init_from={cfg.model.init_from}: no such file or directory")
    if cfg.sft.load:
        bad = model_dir_problem(cfg.sft.load, extra=("sft_optimizer.pt",) if cfg.ppo.carry_sft_optimizer else ())
        if bad is not None:
            problems.append(f"sft.load={cfg.sft.load}: not a complete warm start ({bad}); load the warm_start/ "
                            "folder of a run that finished its warm start")
    return problems
