"""``agentgym validate ENV_ID``: may this environment be on a leaderboard?

Checks, all in sparse reward mode:

* ``check_env``: Gymnasium's own environment checker passes;
* ``oracle``: the env's scripted oracle scores 1 on every task (every task of a finite task list,
  or a sample covering every family x level of a procedural generator, or seeds);
* ``do-nothing`` and ``just-answer`` score 0 on the same tasks: an env that pays for not
  attempting the task, or for answering without looking, cannot rank anybody;
* ``same seed, same tokens``: two fresh envs at one seed give identical episodes;
* ``no shared state``: episodes played one after another on one env (the same task twice in a
  row included, so that whatever the first wrote is there for the second to see) and
  concurrently on two envs give exactly the episodes of fresh envs.

Environments imported from other hubs (``agentgym.environments.interop``) state their
provenance; the report prints it and says what it cannot check: with no oracle in the source,
the oracle check is ``n/a`` (not a pass); on a source that is not replayable, the determinism and
isolation checks are ``n/a`` with the reason. A no-attempt probe that earns reward there is named
as the source env's problem, with the fix (``no_attempt_guard=True``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agentgym.leaderboards.policies import DoNothingPolicy, JustAnswerPolicy, OraclePolicy, ScriptedPolicy
from agentgym.leaderboards.preflight import check_infrastructure
from agentgym.trajectory import Trajectory

__all__ = ["VARIANTS", "Check", "ValidationReport", "task_list", "validate_env"]

# Env kwargs to validate by default: every split of the built-in envs with fixed task lists.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "agentgym/CodeFix-v1": [{"split": "train"}, {"split": "eval"}],
    "agentgym/WebAPI-v1": [{"split": "all"}],
}
PROCEDURAL_PER_COMBO = 3  # procedural math: tasks per family x level
SEED_TASKS = 64  # envs with neither a task list nor families: this many seeds


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float
    applies: bool = True  # False: this env cannot be checked this way (detail says why); not a pass


def _not_applicable(name: str, why: str) -> Check:
    return Check(name, True, f"cannot be checked: {why}", 0.0, applies=False)


@dataclass
class ValidationReport:
    env_id: str
    kwargs: dict[str, Any]
    tasks: int = 0
    checks: list[Check] = field(default_factory=list)
    provenance: dict[str, Any] | None = None  # imported envs: hub, source, replayable, oracle

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks if c.applies)

    def format(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        lines = [f"{self.env_id}({args}): {'PASS' if self.ok else 'FAIL'} on {self.tasks} tasks"]
        if self.provenance:
            p = self.provenance
            lines.append(f"  imported from {p['hub']} ({p['source']}): "
                         f"{'replayable' if p['replayable'] else 'NOT replayable'} ({p['replay_note']}); "
                         f"{'oracle' if p['oracle'] else 'no oracle'} ({p['oracle_note']})")
        for c in self.checks:
            mark = "n/a " if not c.applies else "ok" if c.ok else "FAIL"
            lines.append(f"  [{mark}] {c.name:22s} {c.seconds:6.1f} s  {c.detail}")
        return "\n".join(lines)


def task_list(env: Any, max_tasks: int | None = None) -> list[dict[str, Any] | None]:
    """Reset options covering the env's tasks: ``{"index": i}`` over a task list or dataset, an
    index sample over every family x level of procedural math, else ``None`` (seeds alone)."""
    u = env.unwrapped
    opts: list[dict[str, Any] | None] = [None] * SEED_TASKS
    for attr in ("tasks", "_tasks", "dataset"):
        seq = getattr(u, attr, None)
        if isinstance(seq, (list, tuple)) and seq:
            opts = [{"index": i} for i in range(len(seq))]
            break
    else:
        if getattr(u, "families", None) and getattr(u, "levels", None):
            opts = [{"family": f, "level": lv, "index": i} for i in range(PROCEDURAL_PER_COMBO)
                    for f in u.families for lv in u.levels]
    if max_tasks is not None and len(opts) > max_tasks:
        step = len(opts) / max_tasks  # evenly spread, so a sample still spans levels and kinds
        opts = [opts[int(i * step)] for i in range(max_tasks)]
    return opts


class _Runner:
    """Plays (policy, seed, options) episodes on fresh or reused envs of one env id + kwargs."""

    def __init__(self, env_id: str, kwargs: dict[str, Any], workers: int, progress: bool = False) -> None:
        import gymnasium as gym

        import agentgym  # noqa: F401

        self.make: Callable[[], Any] = lambda: gym.make(env_id, **{**kwargs, "reward_mode": "sparse"})
        self.workers = max(1, workers)
        self.env_id, self.progress = env_id, progress

    def play_fresh(self, policy: ScriptedPolicy, jobs: Sequence[tuple[int, dict[str, Any] | None]]
                   ) -> list[Trajectory]:
        """Each job on an env of a worker (one env per worker thread, reused across its jobs)."""
        import threading

        local = threading.local()
        made: list[Any] = []

        def one(job: tuple[int, dict[str, Any] | None]) -> Trajectory:
            env = getattr(local, "env", None)
            if env is None:
                env = local.env = self.make()
                made.append(env)
            return policy.play(env, seed=job[0], options=job[1])

        from agentgym.trainer.metrics import Progress

        bar = Progress(len(jobs), f"validate {self.env_id}: {policy.name}", self.progress)
        out: list[Trajectory] = []
        pool = ThreadPoolExecutor(self.workers)
        try:
            for traj in pool.map(one, jobs):
                out.append(traj)
                bar.update(len(out))
            return out
        except BaseException:  # Ctrl-C or a failure: the queued episodes never start
            pool.shutdown(wait=True, cancel_futures=True)  # those in flight finish (seconds), then envs close
            raise
        finally:
            pool.shutdown(wait=True)
            bar.close()
            for e in made:
                e.close()

    def play_on(self, env: Any, policy: ScriptedPolicy, jobs: Sequence[tuple[int, dict[str, Any] | None]]
                ) -> list[Trajectory]:
        return [policy.play(env, seed=s, options=o) for s, o in jobs]

    def play_each_fresh(self, policy: ScriptedPolicy, jobs: Sequence[tuple[int, dict[str, Any] | None]]
                        ) -> list[Trajectory]:
        """Every job on a brand-new env: the reference nothing else can have touched."""
        out = []
        for job in jobs:
            env = self.make()
            try:
                out += self.play_on(env, policy, [job])
            finally:
                env.close()
        return out


def _label(traj: Trajectory, opts: dict[str, Any] | None) -> str:
    o = "" if not opts else " (" + ", ".join(f"{k}={v}" for k, v in opts.items()) + ")"
    return f"task {traj.task_id}{o} seed {traj.seed}"


def _expect(name: str, trajs: list[Trajectory], opts: list[dict[str, Any] | None], want: float,
            seconds: float) -> Check:
    bad = [(t, o) for t, o in zip(trajs, opts) if abs(t.total_reward - want) > 1e-9]
    if not bad:
        return Check(name, True, f"{want:g} on all {len(trajs)} tasks", seconds)
    shown = "; ".join(f"{_label(t, o)}: {t.total_reward:g}" for t, o in bad[:5])
    more = f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""
    return Check(name, False, f"expected {want:g}, got otherwise on {len(bad)} of {len(trajs)} tasks: {shown}{more}",
                 seconds)


def _same(a: Trajectory, b: Trajectory) -> bool:
    return a.to_dict() == b.to_dict()


def validate_env(env_id: str, kwargs: dict[str, Any] | None = None, *, max_tasks: int | None = None,
                 workers: int = 4, oracle: str | Callable[[Any], Any] | None = None, seed: int = 0,
                 progress: bool = False) -> ValidationReport:
    """Run every check on ``env_id`` built with ``kwargs``; see the module docstring.
    ``progress``: report the episodes of each policy as they finish (the CLI does)."""
    kwargs = dict(kwargs or {})
    report = ValidationReport(env_id, kwargs)
    runner = _Runner(env_id, kwargs, workers, progress)
    # The probe stays open to the end: it holds what envs of this id share by design (the WebAPI
    # server, the sandbox pool), which would otherwise stop and restart around every fresh env.
    probe = runner.make()
    try:
        opts = task_list(probe, max_tasks)
        check_infrastructure(probe, seed=seed, options=opts[0] if opts else None)  # down: refused, not failed
        if progress:
            print(_plan(runner, probe, opts, seed, max_tasks), file=sys.stderr, flush=True)
        _run_checks(report, runner, probe, max_tasks=max_tasks, oracle=oracle, seed=seed)
    finally:
        probe.close()
    return report


def _plan(runner: _Runner, probe: Any, opts: list[dict[str, Any] | None], seed: int, max_tasks: int | None) -> str:
    """The planned episodes and a time estimate from one timed episode (the oracle's when there is one)."""
    n = len(opts)
    t0 = time.perf_counter()
    try:
        OraclePolicy().play(probe, seed=seed, options=opts[0] if opts else None)
    except Exception:  # no oracle for this env (an imported one): the do-nothing probe's episode
        DoNothingPolicy().play(probe, seed=seed, options=opts[0] if opts else None)
    per = time.perf_counter() - t0
    pooled = 3 * n  # oracle, do-nothing and just-answer on every task, ``workers`` at a time
    serial = 3 * min(8, n) + 3 * min(4, n)  # determinism (fresh envs, twice) and isolation, one at a time
    minutes = (per * pooled / runner.workers + per * serial) / 60
    hint = ("; pass --max-tasks N for an even sample of N tasks" if max_tasks is None and minutes > 2 else "")
    return (f"validate {runner.env_id}: {n} tasks x 3 policies + {serial} replay episodes; one episode took "
            f"{per:.2f} s here, so about {max(minutes, 0.1):.1f} min{hint}")


def _run_checks(report: ValidationReport, runner: _Runner, probe: Any, *, max_tasks: int | None,
                oracle: str | Callable[[Any], Any] | None, seed: int) -> None:
    from gymnasium.utils.env_checker import check_env

    opts = task_list(probe, max_tasks)
    report.tasks = len(opts)
    t0 = time.perf_counter()
    try:
        check_env(probe.unwrapped, skip_render_check=True)
        report.checks.append(Check("check_env", True, "gymnasium's env checker passes", time.perf_counter() - t0))
    except Exception as e:  # the checker raises AssertionError and others on a contract break
        report.checks.append(Check("check_env", False, f"{type(e).__name__}: {e}", time.perf_counter() - t0))
    jobs = [(seed + i, o) for i, o in enumerate(opts)]
    prov = _provenance(probe)
    report.provenance = prov
    has_oracle = oracle is not None or prov is None or prov["oracle"]
    policies: list[tuple[str, ScriptedPolicy, float]] = [
        ("oracle scores 1", OraclePolicy(oracle), 1.0),
        ("do-nothing scores 0", DoNothingPolicy(), 0.0),
        ("just-answer scores 0", JustAnswerPolicy(), 0.0),
    ]
    pooled: list[Trajectory] = []
    for name, policy, want in policies:
        if policy.name == "oracle" and not has_oracle:
            assert prov is not None
            report.checks.append(_not_applicable(name, f"the source has no oracle ({prov['oracle_note']})"))
            continue
        t0 = time.perf_counter()
        trajs = runner.play_fresh(policy, jobs)
        check = _expect(name, trajs, opts, want, time.perf_counter() - t0)
        if prov is not None and not check.ok and policy.name != "oracle":
            check.detail += (f". This is the source env's problem ({prov['hub']}, {prov['source']} pays for not "
                             "attempting the task), not agentgym's: make the env with no_attempt_guard=True to pay "
                             "only what beats not attempting")
        report.checks.append(check)
        if policy.name == "oracle":
            pooled = trajs
    if prov is not None and not prov["replayable"]:
        why = f"the source is not replayable ({prov['replay_note']})"
        report.checks += [_not_applicable("same seed, same tokens", why), _not_applicable("no shared state", why)]
        return
    if not pooled:  # no oracle to drive the episodes: the do-nothing probe plays them
        return _determinism_without_oracle(report, runner, jobs)
    t0 = time.perf_counter()
    fresh = runner.play_each_fresh(OraclePolicy(oracle), jobs[:min(8, len(jobs))])
    report.checks.append(_determinism(runner, jobs, fresh, pooled, OraclePolicy(oracle), time.perf_counter() - t0))
    report.checks.append(_isolation(runner, jobs, fresh, OraclePolicy(oracle)))


def _provenance(env: Any) -> dict[str, Any] | None:
    prov = getattr(env.unwrapped, "provenance", None)
    return prov().to_dict() if callable(prov) else None


def _determinism_without_oracle(report: ValidationReport, runner: _Runner,
                                jobs: list[tuple[int, dict[str, Any] | None]]) -> None:
    """With no oracle, the just-answer probe's episodes on fresh envs (twice) must agree."""
    t0 = time.perf_counter()
    k = min(8, len(jobs))
    a = runner.play_each_fresh(JustAnswerPolicy(), jobs[:k])
    b = runner.play_each_fresh(JustAnswerPolicy(), jobs[:k])
    diff = [f"seed {x.seed}" for x, y in zip(a, b) if not _same(x, y)]
    report.checks.append(Check("same seed, same tokens", not diff,
                               f"{k} just-answer episodes identical on fresh envs (twice; no oracle to play more)"
                               if not diff else "differs: " + ", ".join(diff[:6]), time.perf_counter() - t0))
    report.checks.append(_not_applicable("no shared state", "needs an oracle to play whole episodes"))


def _determinism(runner: _Runner, jobs: list[tuple[int, dict[str, Any] | None]], fresh: list[Trajectory],
                 pooled: list[Trajectory], policy: ScriptedPolicy, spent: float) -> Check:
    """Fresh envs twice, and the worker envs of the oracle check, must agree token for token."""
    t0 = time.perf_counter() - spent
    k = len(fresh)
    again = runner.play_each_fresh(policy, jobs[:k])
    env = runner.make()
    try:
        (s, o) = jobs[0]
        p1, _ = env.reset(seed=s, options=o)
        p2, _ = env.reset(seed=s, options=o)
    finally:
        env.close()
    diff = [f"seed {a.seed} on two fresh envs" for a, b in zip(fresh, again) if not _same(a, b)]
    diff += [f"seed {a.seed} on a fresh env and on a reused one" for a, b in zip(fresh, pooled) if not _same(a, b)]
    if p1.tolist() != p2.tolist():
        diff.append(f"two resets at seed {s} gave different prompts")
    ok = not diff
    detail = (f"{k} episodes identical on fresh envs (twice) and on reused ones" if ok
              else "differs: " + ", ".join(diff[:6]))
    return Check("same seed, same tokens", ok, detail, time.perf_counter() - t0)


def _isolation(runner: _Runner, jobs: list[tuple[int, dict[str, Any] | None]], fresh: list[Trajectory],
               policy: ScriptedPolicy) -> Check:
    """Sequences on one env (with immediate repeats) and two envs at once must match fresh envs."""
    t0 = time.perf_counter()
    n = min(4, len(jobs))
    order = [0, 0, 1, 0, 2, 1, 3, 3][: 2 * n] if n > 1 else [0, 0]
    order = [i for i in order if i < n]
    env = runner.make()
    try:
        seq = runner.play_on(env, policy, [jobs[i] for i in order])
    finally:
        env.close()
    problems = [f"episode {pos} of the sequence (seed {jobs[i][0]}) differs from a fresh env"
                for pos, (i, t) in enumerate(zip(order, seq)) if not _same(t, fresh[i])]
    envs = [runner.make(), runner.make()]
    try:
        with ThreadPoolExecutor(2) as pool:
            halves = [jobs[:n][0::2], jobs[:n][1::2]]
            futs = [pool.submit(runner.play_on, e, policy, h) for e, h in zip(envs, halves)]
            conc = [f.result() for f in futs]
    finally:
        for e in envs:
            e.close()
    for half, trajs in zip((list(range(n))[0::2], list(range(n))[1::2]), conc):
        problems += [f"seed {jobs[i][0]} played concurrently differs from a fresh env"
                     for i, t in zip(half, trajs) if not _same(t, fresh[i])]
    ok = not problems
    detail = (f"{len(order)} episodes in sequence on one env (repeats included) and {n} on two concurrent envs "
              "match fresh envs") if ok else "; ".join(problems[:5])
    return Check("no shared state", ok, detail, time.perf_counter() - t0)
