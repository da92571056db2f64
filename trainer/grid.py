"""Held-out success of finished runs on a grid of evaluation options: by depth, by fault rate.

    cells = parse_grid(["depth=1,2,3,4", "fail_rate=0,0.3"])   # 8 cells
    rec = grid_eval("runs/ctl/seed-5/ppo", cells, problems=64, samples=4, seed_start=5_000_000)
    rec["depth=3,fail_rate=0.3"]["sampled_success"]

A run's own evaluation scores one setting (``env.eval_options``). A claim about where a method
helps needs more: the levels it trained on, the easier ones, one beyond training, with and
without faults. :func:`grid_eval` loads a finished run's final weights (a warm start's saved
``warm_start/`` for a warm-start run) and plays, in every cell, the same ``problems`` held-out
problems (the eval split, the first distinct ones from ``seed_start`` up) ``samples`` times at
the rollout temperature and once greedy, with fixed sampling seeds. Every run evaluated with the
same cells, ``problems``, ``samples`` and ``seed_start`` therefore plays identical problems with
identical random numbers, and :func:`grid_differences` pairs them problem by problem
(:func:`agentgym.trainer.stats.gain`). The records land in ``RUN_DIR/grid.json``, keyed by the
grid's settings, so a second call reads them back.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from agentgym.errors import ConfigError

from .config import config_from_dict, config_to_dict, load_config
from .controls import between_seeds, final_eval
from .evaluation import collect_fixed, eval_record
from .model.files import latest_checkpoint, load_weights, write_text_atomic
from .rollout.heldout import distinct_problems
from .stats import gain
from .train import Trainer

__all__ = ["GRID_FILE", "cell_name", "grid_differences", "grid_eval", "grid_lines", "parse_grid", "stored_grid"]

GRID_FILE = "grid.json"
SAMPLE_SEED = 97531  # the sampling seed of a grid's first chunk (chunk c: + c), for every run


def parse_grid(specs: Sequence[str]) -> list[dict[str, Any]]:
    """``["depth=1,2", "fail_rate=0,0.3"]`` -> the cells of their product, in order:
    ``[{"depth": 1, "fail_rate": 0}, {"depth": 1, "fail_rate": 0.3}, ...]`` (values read as YAML)."""
    axes: list[tuple[str, list[Any]]] = []
    for spec in specs:
        key, sep, values = spec.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError(f"grid: expected KEY=V1,V2,... (e.g. depth=1,2,3), got {spec!r}")
        axes.append((key.strip(), [yaml.safe_load(v) for v in values.split(",")]))
    return [dict(zip([k for k, _ in axes], combo)) for combo in itertools.product(*[v for _, v in axes])]


def cell_name(cell: dict[str, Any]) -> str:
    """``{"depth": 3, "fail_rate": 0.3}`` -> ``depth=3,fail_rate=0.3``."""
    return ",".join(f"{k}={v}" for k, v in cell.items())


def _weights(run_dir: Path) -> Path:
    """The final weights of a finished run: its latest checkpoint, or a warm-start run's
    ``warm_start/`` (a run with ``ppo.steps=0`` saves no checkpoint). A run stopped part way is
    refused: its latest checkpoint is not its result."""
    if (run_dir / "metrics.jsonl").exists() and final_eval(run_dir) is None:
        raise ConfigError(f"{run_dir}: this run has not finished (no closing evaluation in its "
                          "metrics.jsonl); continue it with `agentgym-train --resume`, then evaluate it")
    if latest_checkpoint(run_dir) is not None:
        return run_dir
    if (run_dir / "warm_start" / "model.safetensors").exists():
        return run_dir / "warm_start"
    raise ConfigError(f"{run_dir}: expected a finished run dir (a checkpoint, or a saved warm_start/); "
                      "train it first")


@contextlib.contextmanager
def final_policy(run_dir: str | Path) -> Iterator[Trainer]:
    """A :class:`Trainer` built from finished run ``run_dir``'s config in a scratch dir (no
    controls, nothing logged), holding the run's final weights: to play episodes with them."""
    run_dir = Path(run_dir)
    weights = _weights(run_dir)
    d = config_to_dict(load_config(run_dir / "config.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        d["log"].update(run_dir=tmp, progress=False, plots=False, tensorboard=False, wandb=False)
        d["controls"] = []
        d["sft"]["load"] = None
        t = Trainer(config_from_dict(d))
        try:
            load_weights(t.learner.model, weights)
            t.rollouts.refresh()
            yield t
        finally:
            t.log.close()
            t.close()


def grid_eval(run_dir: str | Path, cells: Sequence[dict[str, Any]], *, problems: int, samples: int,
              seed_start: int) -> dict[str, dict[str, Any]]:
    """Cell name -> the evaluation record (:func:`~agentgym.trainer.evaluation.eval_record`) of
    the run's final weights on that cell: ``sampled_*`` keys at the rollout temperature
    (``samples`` per problem), the plain keys greedy. Read from ``RUN_DIR/grid.json`` when it
    holds this grid (same cells, problems, samples, seed_start); else computed and added there."""
    run_dir = Path(run_dir)
    done = stored_grid(run_dir, cells, problems=problems, samples=samples, seed_start=seed_start)
    if done is not None:
        return done
    out: dict[str, dict[str, Any]] = {}
    with final_policy(run_dir) as t:
        cfg = t.cfg
        split = cfg.env.eval_split
        held = t.rollouts.held
        probe = t.rollouts.make_env(split)
        try:
            for cell in cells:
                opts = {**cell, **({"split": split} if split is not None else {})}
                found = distinct_problems(probe, problems, options=opts, start=seed_start)
                if len(found) < problems:
                    raise ConfigError(f"grid cell {cell_name(cell)}: only {len(found)} distinct problems "
                                      f"from seed {seed_start}; expected {problems}")
                seeds, ids = [s for s, _ in found], [t_id for _, t_id in found]
                with t.learner.compute():
                    rec: dict[str, Any] = {"cell": cell}
                    for temp, n, prefix in ((cfg.rollout.temperature, samples, "sampled_"), (0.0, 1, "")):
                        trajs = collect_fixed(t.rollouts.eval_collector, temperature=temp,
                                              sample_seed=SAMPLE_SEED, options=opts, seeds=seeds, samples=n)
                        rec.update(eval_record(trajs, temp, prefix, samples=n, needs_tool=held.needs_tool,
                                               task_ids=ids))
                out[cell_name(cell)] = rec
        finally:
            probe.close()
    path = run_dir / GRID_FILE
    stored = json.loads(path.read_text()) if path.exists() else {}
    stored[_grid_key(cells, problems, samples, seed_start)] = out
    write_text_atomic(path, json.dumps(stored))
    return out


def _grid_key(cells: Sequence[dict[str, Any]], problems: int, samples: int, seed_start: int) -> str:
    return json.dumps({"cells": list(cells), "problems": problems, "samples": samples,
                       "seed_start": seed_start}, sort_keys=True)


def stored_grid(run_dir: str | Path, cells: Sequence[dict[str, Any]], *, problems: int, samples: int,
                seed_start: int) -> dict[str, dict[str, Any]] | None:
    """What :func:`grid_eval` stored in ``RUN_DIR/grid.json`` for this grid, or None."""
    path = Path(run_dir) / GRID_FILE
    stored = json.loads(path.read_text()) if path.exists() else {}
    key = _grid_key(cells, problems, samples, seed_start)
    return dict(stored[key]) if key in stored else None


def grid_differences(records: dict[int, dict[str, dict[str, dict[str, Any]]]], cell: str, pairs: Sequence[tuple[str, str]],
                     prefix: str, *, pass_at_k: bool = False) -> dict[str, dict[int, float]]:
    """``records``: seed -> arm -> cell -> record. For each ``(a, b)`` of ``pairs`` -> seed ->
    the paired difference a - b on ``cell`` (seeds where either is missing are left out)."""
    out: dict[str, dict[int, float]] = {}
    for a, b in pairs:
        per = out.setdefault(f"{a} - {b}", {})
        for seed, arms in records.items():
            ra, rb = arms.get(a, {}).get(cell), arms.get(b, {}).get(cell)
            g = gain(rb, ra, prefix, pass_at_k=pass_at_k) if ra and rb else None
            if g is not None:
                per[seed] = g["gain"]
    return out


def grid_lines(records: dict[int, dict[str, dict[str, dict[str, Any]]]], cells: Sequence[str], arms: Sequence[str],
               base: str, prefix: str, *, pass_at_k: bool = False) -> list[str]:
    """Per cell: every arm - the warm start and ``base`` - every other arm, each seed's paired
    difference, then across seeds the mean, its between-seed SE and the 95% interval."""
    others = [a for a in arms if a != base]
    pairs = [(a, "warm") for a in arms] + [(base, a) for a in others]
    seeds = sorted(records)
    lines = []
    for cell in cells:
        lines.append(f"{cell}:")
        for name, per in grid_differences(records, cell, pairs, prefix, pass_at_k=pass_at_k).items():
            st = between_seeds([per[s] for s in seeds if s in per])
            interval = f"[{st['lo']:+.3f}, {st['hi']:+.3f}]" if per and st["se"] < float("inf") else "(no interval)"
            lines.append(f"  {name.replace('warm', 'warm start'):<22} "
                         + " ".join(f"{per[s]:+7.3f}" if s in per else f"{'-':>7}" for s in seeds)
                         + f" | mean {st['mean']:+.3f} SE {st['se']:.3f} 95% {interval}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentgym.trainer.grid RUN_DIR [RUN_DIR ...] --grid depth=1,2 fail_rate=0,0.3``:
    evaluate finished runs on a grid (stored in each ``RUN_DIR/grid.json``) and print each cell."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m agentgym.trainer.grid", description=main.__doc__)
    ap.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--grid", nargs="+", metavar="KEY=V1,V2", required=True)
    ap.add_argument("--problems", type=int, default=64, help="held-out problems per cell")
    ap.add_argument("--samples", type=int, default=4, help="samples per problem at the rollout temperature")
    ap.add_argument("--seed-start", type=int, default=None,
                    help="first problem seed (default: each run's log.eval_seed_start)")
    args = ap.parse_args(argv)
    try:
        cells = parse_grid(args.grid)
        for d in args.run_dirs:
            if not (Path(d) / "config.yaml").exists():
                raise ConfigError(f"{d}: expected a run dir with config.yaml; train it first")
            start = args.seed_start
            if start is None:
                start = load_config(Path(d) / "config.yaml").log.eval_seed_start
            rec = grid_eval(d, cells, problems=args.problems, samples=args.samples, seed_start=start)
            print(f"{d} ({args.problems} problems per cell from seed {start}): success at the rollout "
                  f"temperature ({args.samples} samples), greedy")
            for name, r in rec.items():
                print(f"  {name:<28} {r.get('sampled_success', float('nan')):.3f}  {r.get('success', float('nan')):.3f}")
    except ConfigError as e:
        print(f"grid: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
