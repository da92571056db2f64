"""Held-out problems: what evaluations run on, and what training must never see.

    held = HeldOut.build(env_cfg, make_env, n_eval=64, eval_seed_start=0, n_check=32,
                         check_start=CHECK_SEED_BASE)  # probes the eval split for distinct problems
    held.eval_seeds                             # [seed, ...]: one per distinct task id, fixed
    seeds = held.train_seeds(seeds, options)    # env.exclude_held_out: held-out tasks replaced
    held.overlap(trajs)                         # training episodes on held-out problems

A *problem* is a task id (``Trajectory.task_id``: the env's id of the problem itself, e.g. a
hash of the question), not a seed: two seeds can draw the same problem, so an evaluation of N
seeds may hold fewer than N problems, and a problem drawn in training may also be drawn in
evaluation. So the held-out sets are built by resetting a probe env at seeds 0, 1, 2, ... of
the eval split (from ``log.eval_seed_start``) and keeping the first seed of each new task id:

* ``eval``: the evaluation problems (``log.eval_episodes`` / ``eval_episodes_final`` of them);
* ``check``: the warm start's stopping-check problems (``sft.check_problems``, from seed
  ``CHECK_SEED_BASE`` up, moved by the run's seed like every task stream), none of them an evaluation problem, so stopping on them does not
  select the warm start on the problems it is finally scored on.

Training draws from the train split. An env that keeps its splits disjoint needs nothing more;
for an env without splits (``env.train_split: null``) ``env.exclude_held_out`` makes the trainer
replace every training task whose id is held out (seed ``s`` -> ``s + j * REPLACE_STRIDE``, the
first ``j`` that draws a problem outside the sets: a pure function of ``s``, so runs and resumes
agree). Either way :meth:`HeldOut.overlap` counts the training episodes that landed on a
held-out problem, and the trainer refuses to go on when an env with splits produced one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import TrainerError

__all__ = ["CHECK_SEED_BASE", "REPLACE_STRIDE", "HeldOut", "distinct_problems", "problems_hash",
           "task_id_at"]

CHECK_SEED_BASE = 500_000  # first seed probed for the stopping-check problems
REPLACE_STRIDE = 10_000_019  # a held-out training seed s is replaced by s + j * this (j = 1, 2, ...)
MAX_REPLACEMENTS = 200


def task_id_at(env: Any, seed: int, options: dict[str, Any] | None) -> str:
    """The id of the problem ``env`` draws at ``seed`` with reset ``options``."""
    _, info = env.reset(seed=seed, options=options)
    tid = info.get("task_id") if isinstance(info, dict) else None
    return str(tid if tid is not None else env.unwrapped.trajectory.task_id)


def distinct_problems(env: Any, n: int, *, options: dict[str, Any] | None, start: int = 0,
                      exclude: set[str] | frozenset[str] = frozenset(),
                      max_probes: int | None = None) -> list[tuple[int, str]]:
    """The first ``n`` seeds from ``start`` up whose task ids are new (and not in ``exclude``)
    -> [(seed, task_id)]. Fewer if ``max_probes`` seeds (default 20 n + 100) hold fewer
    distinct problems (a small task set)."""
    limit = max_probes if max_probes is not None else 20 * n + 100
    seen: set[str] = set(exclude)
    out: list[tuple[int, str]] = []
    for seed in range(start, start + limit):
        if len(out) >= n:
            break
        tid = task_id_at(env, seed, options)
        if tid not in seen:
            seen.add(tid)
            out.append((seed, tid))
    return out


def problems_hash(task_ids: Sequence[str]) -> str:
    """A short digest of an ordered list of task ids: two evaluations compare problem by problem
    only when their digests agree."""
    return hashlib.blake2s("\n".join(task_ids).encode(), digest_size=6).hexdigest()


def _options(split: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, **({"split": split} if split is not None else {})}


@dataclass
class HeldOut:
    """The held-out problem sets of a run, and the guard that keeps them out of training."""

    eval: list[tuple[int, str]]
    check: list[tuple[int, str]]
    splits: bool  # the env is asked for disjoint train / eval splits
    exclude: bool  # the trainer replaces held-out training tasks itself
    probe: Callable[[], Any] | None = None  # makes a train-split env for probing (exclude)
    needs_tool: bool = False  # the env has tools: a well-formed episode calls one
    stop_ids: tuple[int, ...] = ()  # the env codec's stop tokens (an action without one was cut)
    skipped_tuning: bool = False  # log.eval_seed_start > 0 skipped the problems a run from 0 evaluates on
    ids: frozenset[str] = field(init=False)
    _env: Any = field(default=None, init=False, repr=False)
    _cache: dict[tuple[int, str], str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.ids = frozenset(t for _, t in self.eval) | frozenset(t for _, t in self.check)

    @classmethod
    def build(cls, env_cfg: Any, make_env: Callable[[str | None], Any], *, n_eval: int, eval_seed_start: int,
              n_check: int, check_start: int) -> HeldOut:
        """Probe the eval split (``make_env(env_cfg.eval_split)``) for the run's problem sets.

        ``env_cfg``: the run's env config (``id``, ``train_split``, ``eval_split``,
        ``eval_options``, ``exclude_held_out``); ``n_eval`` evaluation problems from seed
        ``eval_seed_start`` up; ``n_check`` stopping-check problems (0: the run has no check)
        from seed ``check_start`` up, none of them an evaluation problem."""
        e = env_cfg
        env = make_env(e.eval_split)
        try:
            opts = _options(e.eval_split, e.eval_options)
            start = eval_seed_start
            # above 0: also skip the problems a run from seed 0 evaluates on (where a recipe is
            # tuned), unless the split is too small to hold both sets (skipped_tuning says which)
            dev = {t for _, t in distinct_problems(env, n_eval, options=opts)} if start else set()
            ev = distinct_problems(env, n_eval, options=opts, start=start, exclude=dev)
            if dev and len(ev) < n_eval:
                ev, dev = distinct_problems(env, n_eval, options=opts, start=start), set()
            check = (distinct_problems(env, n_check, options=opts, start=check_start, exclude={t for _, t in ev})
                     if n_check else [])
            needs_tool = bool(getattr(env.unwrapped, "tools", list)())
            stop_ids = tuple(int(t) for t in env.unwrapped.codec.stop_ids)
        finally:
            env.close()
        if not ev:
            raise TrainerError(f"{e.id}: no evaluation problem found under split={e.eval_split!r}")
        return cls(ev, check, splits=e.train_split is not None and e.eval_split is not None,
                   exclude=e.exclude_held_out, probe=lambda: make_env(e.train_split), needs_tool=needs_tool,
                   stop_ids=stop_ids, skipped_tuning=bool(dev))

    # ------------------------------------------------------------------ the sets
    def eval_seeds(self, n: int | None = None) -> list[int]:
        return [s for s, _ in self.eval[:n]]

    def eval_ids(self, n: int | None = None) -> list[str]:
        return [t for _, t in self.eval[:n]]

    @property
    def check_seeds(self) -> list[int]:
        return [s for s, _ in self.check]

    def is_held_out(self, task_id: str) -> bool:
        return task_id in self.ids

    def to_dict(self) -> dict[str, Any]:
        return {"eval": self.eval, "check": self.check, "splits": self.splits, "exclude": self.exclude}

    # ------------------------------------------------------------------ keeping them out
    def train_seeds(self, seeds: Sequence[int], options: Sequence[dict[str, Any]]) -> list[int]:
        """``seeds`` with every seed whose problem is held out replaced (``exclude`` only; one
        options dict per seed, the split included). Repeated seeds (a group) stay equal."""
        if not self.exclude:
            return list(seeds)
        return [self.replace(s, o) for s, o in zip(seeds, options, strict=True)]

    def replace(self, seed: int, options: dict[str, Any] | None) -> int:
        """The first of ``seed``, ``seed + REPLACE_STRIDE``, ... whose problem is not held out."""
        for j in range(MAX_REPLACEMENTS):
            cand = seed + j * REPLACE_STRIDE
            if not self.is_held_out(self._probe_id(cand, options)):
                return cand
        raise TrainerError(f"{MAX_REPLACEMENTS} candidates for training seed {seed} all drew held-out "
                           f"problems: the env has too few problems outside the {len(self.ids)} held out; "
                           "lower log.eval_episodes / sft.check_problems")

    def _probe_id(self, seed: int, options: dict[str, Any] | None) -> str:
        key = (seed, repr(sorted((options or {}).items())))
        if key not in self._cache:
            if self._env is None:
                if self.probe is None:
                    raise TrainerError("HeldOut.exclude needs a probe env factory")
                self._env = self.probe()
            self._cache[key] = task_id_at(self._env, seed, options)
        return self._cache[key]

    def overlap(self, trajs: Sequence[Any], where: str) -> int:
        """How many of ``trajs`` (training episodes) drew a held-out problem. With splits (or
        exclusion) that is a broken promise: raise, naming the env and the problem."""
        hits = [t for t in trajs if t.task_id in self.ids]
        if hits and (self.splits or self.exclude):
            t = hits[0]
            raise TrainerError(
                f"{where}: {len(hits)} training episode(s) drew held-out problems (first: {t.env_id} seed "
                f"{t.seed}, task {t.task_id!r}), so the evaluation would not be held out. "
                + ("The env ignores its split or its splits overlap; fix the env, or set "
                   "env.exclude_held_out=true" if not self.exclude else "This is a trainer bug."))
        return len(hits)

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
