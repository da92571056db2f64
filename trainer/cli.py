"""``agentgym-train``: the trainer's command line.

    agentgym-train [--config RECIPE_OR_YAML] [key.sub=value | --key.sub value ...]
    agentgym-train --resume RUN_DIR [overrides...]     continue a killed run exactly
    agentgym-train --print-config [--config ...] [overrides...]
    agentgym-train --dry-run [--config ...] [overrides...]   layout + memory plan, no GPU needed
    torchrun --nproc_per_node N -m agentgym.trainer.cli ...  the learner on N processes (FSDP2)
    agentgym-train doctor ...                          engine/trainer mismatch doctor
    (a policy as a server: ``agentgym serve model ...``)

Config mistakes exit with code 2 and a one-paragraph message (expected / got / how to fix),
never a traceback; training failures (non-finite values, checkpoint problems) exit with 1; a
warm start whose tool loop did not learn (``sft.min_wellformed``) exits with 3; Ctrl-C exits with
130 and says where ``--resume`` would continue; SIGTERM (a scheduler's preemption) writes a
checkpoint after the current step and exits with 143 and the ``--resume`` command
(``preempt.py``); a full disk is one line (exit 1), never a half-written checkpoint. With no
arguments it prints this help.

``--resume RUN_DIR`` continues from the latest checkpoint (inside the warm start too); with no
checkpoint yet it says so and starts over with a fresh ``metrics.jsonl``. Overrides on resume
may change anything but the run's identity (model, tokenizer, env id, prompt, advantage kind),
and are saved to ``RUN_DIR/config.yaml``: a later ``--resume`` keeps them (``ppo.steps=10``
given once extends the run for good).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from agentgym.errors import ConfigError, Preempted, TrainerError, WarmStartFailed

from .config import RECIPES_DIR, config_help, config_to_dict, load_config

# The run needs torch (the [train] extra); the help and the config do not. Without it the import
# error is kept and raised by the first command that needs the run, inside main(), which turns
# it into the install line (agentgym.cli.guarded).
_RUN_MISSING: ModuleNotFoundError | None = None
try:
    from .controls import run_with_controls
    from .distributed import shutdown
    from .doctor import doctor_main
    from .evaluation import report_lines
    from .metrics import Progress
    from .model.files import latest_checkpoint
    from .plan import make_plan, memory_problems
    from .preempt import sigterm_stops
    from .preflight import preflight, weights_problems
    from .train import Trainer
except ModuleNotFoundError as e:
    _RUN_MISSING = e

__all__ = ["PREEMPTED", "main", "parse_args"]

PREEMPTED = 143  # exit status after SIGTERM (128 + 15), as a shell reports a process it ended

USAGE = """usage: agentgym-train [--config RECIPE] [KEY=VALUE ...]
       agentgym-train --resume RUN_DIR [KEY=VALUE ...]
       agentgym-train --print-config [--config RECIPE] [KEY=VALUE ...]
       agentgym-train --dry-run [--config RECIPE] [KEY=VALUE ...]
       torchrun --nproc_per_node N -m agentgym.trainer.cli [--config RECIPE] [KEY=VALUE ...]
       agentgym-train doctor --help
       agentgym serve model --model PATH|tiny      (serve a policy: OpenAI-compatible API)

Shipped recipes: {recipes}
Overrides are dotted keys: ppo.lr=5e-4 rollout.samples_per_task=8 (or --ppo.lr 5e-4).

Config keys (defaults):
{keys}
"""


def parse_args(argv: Sequence[str]) -> tuple[str | None, str | None, str | None, list[str]]:
    """-> (config, resume_dir, "print" | "dry-run" | None, overrides)."""
    config = resume = None
    print_only: str | None = None
    overrides: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("--config", "-c", "--resume"):
            if i + 1 >= len(args):
                raise ConfigError(f"{a} needs a value: {a} {'RUN_DIR' if a == '--resume' else 'RECIPE'}")
            if a == "--resume":
                resume = args[i + 1]
            else:
                config = args[i + 1]
            i += 2
            continue
        if a.startswith(("--config=", "--resume=")):
            k, v = a[2:].split("=", 1)
            config, resume = (v, resume) if k == "config" else (config, v)
        elif a in ("--print-config", "--dry-run"):
            print_only = a[2:].removesuffix("-config")
        elif a.startswith("--") and "=" in a:
            overrides.append(a[2:])
        elif a.startswith("--"):
            if i + 1 >= len(args):
                raise ConfigError(f"{a} needs a value, e.g. {a} 1e-3 (or {a[2:]}=1e-3)")
            overrides.append(f"{a[2:]}={args[i + 1]}")
            i += 1
        elif "=" in a:
            overrides.append(a)
        else:
            raise ConfigError(f"unexpected argument {a!r}: expected KEY=VALUE (e.g. ppo.lr=1e-3), "
                              "--config RECIPE, --resume RUN_DIR or doctor")
        i += 1
    if config and resume:
        raise ConfigError("--config and --resume do not mix: a resumed run uses the config saved "
                          "in RUN_DIR/config.yaml (overrides still apply)")
    return config, resume, print_only, overrides


def _usage() -> str:
    recipes = ", ".join(sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))
    from agentgym.cli import plain

    return plain(USAGE.format(recipes=recipes, keys=config_help()))  # a terminal's text, not the docstrings' reST


def _interrupted(run_dir: str | None) -> str:
    """What Ctrl-C leaves behind, truthfully: where --resume would continue, or that nothing was saved."""
    if run_dir is None:
        return "interrupted"
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        return f"interrupted; no checkpoint was written yet in {run_dir}: --resume would start over"
    import json

    state = json.loads((ckpt / "state.json").read_text())
    where = (f"warm-start step {state['sft_step']}" if "sft_step" in state
             else f"PPO step {state['step']}" + (" (after the warm start)" if state["step"] == 0 else ""))
    return f"interrupted; continue from {where} with: agentgym-train --resume {run_dir}"


def _need_the_run() -> None:
    if _RUN_MISSING is not None:
        raise _RUN_MISSING


def _run(argv: list[str], run_dir: list[str]) -> int:
    if argv and argv[0] == "doctor":
        _need_the_run()
        return int(doctor_main(argv[1:]) or 0)
    if argv and argv[0] == "serve":  # the model server moved: agentgym serve model
        print(f"agentgym-train: `agentgym-train {argv[0]}` is now `agentgym serve model` "
              "(same options: agentgym serve model --model PATH|tiny ...)", file=sys.stderr)
        return 2
    if not argv or any(a in ("-h", "--help") for a in argv):  # nothing asked: help, not a 30-step run
        print(_usage())
        if not argv:
            print(f"To train: agentgym-train --config cpu-quickstart ({MEASURED['cpu-quickstart']}); "
                  "--dry-run checks a config without running it.")
        return 0
    config, resume, print_only, overrides = parse_args(argv)
    if resume:
        saved = Path(resume) / "config.yaml"
        if not saved.exists():
            raise ConfigError(f"--resume {resume}: expected a run directory with config.yaml "
                              "(written at the start of every run), found none")
        cfg = load_config(saved, [*overrides, f"log.run_dir={resume}"])
    else:
        cfg = load_config(config, overrides)
    if print_only == "print":
        print(yaml.safe_dump(config_to_dict(cfg), sort_keys=False), end="")
        return 0
    _need_the_run()
    problems, missing = preflight(cfg), weights_problems(cfg)
    if print_only == "dry-run":
        plan = make_plan(cfg)
        plan.problems += problems
        print(plan.report())
        for m in missing:
            print(f"note: {m} (a run on this machine would stop here)")
        return 2 if plan.problems else 0
    if not problems and not missing:
        problems = memory_problems(cfg)  # before anything is allocated
    if problems or missing:
        raise ConfigError("; ".join(problems + missing))

    run_dir.append(cfg.log.run_dir)
    speaks = os.environ.get("RANK", "0") == "0"
    if speaks:
        print(f"agentgym-train: {'resuming' if resume else 'starting'} {cfg.env.id} with model {cfg.model.name} "
              f"({cfg.rollout.engine} engine) in {cfg.log.run_dir}", flush=True)
        print(_plan_line(cfg, None if resume else config), flush=True)

    def build(cfg: Any, *, resume: bool) -> Trainer:  # vLLM takes minutes to start: say so
        bar = Progress(1, "building the policy, engine and envs", cfg.log.progress and speaks)
        try:
            trainer = Trainer(cfg, resume=resume)
            bar.update(1)
        finally:
            bar.close()
        return trainer

    try:
        with sigterm_stops():
            summary, compared = run_with_controls(cfg, resume=bool(resume), trainer_cls=build)
    except WarmStartFailed:
        if speaks:
            print("\n".join(report_lines(cfg.log.run_dir)))
        raise
    except Preempted as e:
        if speaks:
            print(f"agentgym-train: {e}; {_interrupted(cfg.log.run_dir).removeprefix('interrupted; ')}",
                  file=sys.stderr, flush=True)
        return PREEMPTED
    except OSError as e:  # a write outside the checkpoints (metrics, plots) on a full disk
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise TrainerError(f"cannot write {e.filename or cfg.log.run_dir}: {e.strerror}; free space there, "
                           f"then continue with: agentgym-train --resume {cfg.log.run_dir}") from None
    finally:
        shutdown()
    lines = report_lines(summary["run_dir"]) + compared if os.environ.get("RANK", "0") == "0" else []
    if lines:  # under torchrun: rank 0 speaks
        print("\n".join(lines))
    return 0


# Measured wall-clock cost of the bundled recipes (bench/RESULTS.md), printed with the plan.
MEASURED = {"cpu-quickstart": "13-34 CPU-minutes on 2 cores, controls included; 15-60 min wall"}


def _plan_line(cfg: Any, recipe: str | None) -> str:
    """The run's planned work, and what it cost when measured, before it starts."""
    parts = []
    if cfg.sft.steps:
        stop = f", stops early at pass@{cfg.sft.check_samples} >= {cfg.sft.stop_pass_at_k}" \
            if cfg.sft.check_every and cfg.sft.stop_pass_at_k is not None else ""
        parts.append(f"warm start up to {cfg.sft.steps} steps{stop}")
    parts.append(f"{cfg.algo.upper()} {cfg.ppo.steps} steps")
    if cfg.controls:
        parts.append(f"then the controls ({', '.join(cfg.controls)})")
    cost = MEASURED.get(Path(recipe).stem if recipe else "")
    return ("agentgym-train: plan: " + "; ".join(parts)
            + (f". Measured for this recipe: {cost}" if cost else "")
            + ". Ctrl-C stops it; --resume RUN_DIR continues.")


def main(argv: Sequence[str] | None = None) -> int:
    from agentgym.cli import guarded

    args = list(sys.argv[1:] if argv is None else argv)
    run_dir: list[str] = []  # filled once the config is known (for the Ctrl-C message)
    return guarded("agentgym-train", lambda: _run(args, run_dir),
                   on_interrupt=lambda: _interrupted(run_dir[0] if run_dir else None))


if __name__ == "__main__":
    sys.exit(main())
