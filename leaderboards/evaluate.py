"""``agentgym-eval``: run a suite against a policy and write a submission.

Episodes run concurrently (``workers`` threads, each with its own environments). Every finished
episode is appended to ``OUT.partial`` at once (one line, flushed and fsynced), so a killed run
loses at most the episodes in flight. Running the same command again resumes: episodes already
in the partial file are kept and never run again, a line cut off by the kill is dropped, the rest
run, and the submission is assembled in suite order. Policies sample with a seed derived from
each episode's own seed, so a resumed run writes the same episodes as an uninterrupted one.

The partial file starts with a ``run`` line (suite version, policy, its arguments and
description, tokenizer); a resume with anything different is refused rather than mixed in.

Infrastructure faults (a sandbox that dies, a server that stops answering, an engine timeout:
``info["infra_error"]`` or an :class:`~agentgym.errors.InfraError`) are not scores. Such an
episode is played again on a fresh environment, up to ``infra_retries`` times; one that still
fails is written as an ``infra`` line (not done: the next run retries it), counted apart, and
the submission is written only when every episode has a real outcome. An env whose
infrastructure is down before the run starts (no Docker engine, no database) is refused at once
(:mod:`agentgym.leaderboards.preflight`), not played into a pile of faults.

Ctrl-C drops the episodes not yet started at once and gives those in flight a few seconds to
finish (each one that does is saved); a rerun resumes from the partial file.
"""

from __future__ import annotations

import json
import os
import platform
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, InfraError, SubmissionError, infra_note
from agentgym.leaderboards.policies import EpisodePolicy
from agentgym.leaderboards.preflight import check_infrastructure
from agentgym.leaderboards.submission import (
    FORMAT,
    SCHEMA_VERSION,
    episode_cost,
    episode_score,
    tokenizer_info,
    write_submission,
)
from agentgym.leaderboards.suite import EpisodeSpec, Suite
from agentgym.trajectory import Trajectory

__all__ = ["hardware", "partial_path", "run_suite"]


def partial_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def hardware() -> dict[str, Any]:
    """Where the run happened (recorded, not verified)."""
    info: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "python": platform.python_version(), "cpus": os.cpu_count()}
    torch = sys.modules.get("torch")  # only when a model policy already imported it
    if torch is not None:
        info["torch"] = str(torch.__version__)
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


class _Partial:
    """The append-only progress file of one run."""

    def __init__(self, path: Path, identity: dict[str, Any]) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.done: dict[tuple[str, int, int], dict[str, Any]] = {}
        self.infra: dict[tuple[str, int, int], str] = {}  # episodes whose last try met an infrastructure fault
        self.sessions: list[tuple[float, float]] = []  # (start, last line) of earlier sessions
        if path.exists():
            self._load(identity)
        else:
            self._append({"kind": "run", **identity})
        self.started = time.time()
        self._append({"kind": "session", "started": self.started})

    def _load(self, identity: dict[str, Any]) -> None:
        data = self.path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):  # the kill landed mid-line: that episode is run again
            with open(self.path, "r+b") as f:
                f.truncate(cut)
        lines = [json.loads(x) for x in data[:cut].decode().splitlines() if x.strip()]
        if not lines or lines[0].get("kind") != "run":
            raise SubmissionError(f"{self.path} is not an agentgym-eval progress file; move it away to start over")
        ran = {k: v for k, v in lines[0].items() if k != "kind"}
        if ran != identity:
            diff = sorted(k for k in set(ran) | set(identity) if ran.get(k) != identity.get(k))
            raise SubmissionError(
                f"{self.path} holds a run with other settings ({', '.join(diff)} differ: "
                f"{ {k: ran.get(k) for k in diff} } vs now { {k: identity.get(k) for k in diff} }); "
                "resume with the same command, or delete the file to start over")
        start = last = None
        for obj in lines[1:]:
            if obj.get("kind") == "session":
                if start is not None:
                    self.sessions.append((start, last or start))
                start = last = obj["started"]
            elif obj.get("kind") == "episode":
                self.done[(obj["env_id"], obj["task"], obj["trial"])] = obj
                last = obj.pop("_t", last)
            elif obj.get("kind") == "infra":  # retried by this run, unless an episode line followed
                self.infra[(obj["env_id"], obj["task"], obj["trial"])] = obj["error"]
        if start is not None:
            self.sessions.append((start, last or start))

    def _append(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, allow_nan=False, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        with self.lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

    def add(self, spec: EpisodeSpec, record: dict[str, Any]) -> None:
        self._append({**record, "_t": time.time()})
        with self.lock:
            self.done[spec.key] = record
            self.infra.pop(spec.key, None)

    def add_infra(self, spec: EpisodeSpec, error: str, tries: int) -> None:
        self._append({"kind": "infra", "env_id": spec.env.id, "task": spec.task, "trial": spec.trial,
                      "seed": spec.seed, "error": error, "tries": tries, "_t": time.time()})
        with self.lock:
            self.infra[spec.key] = error

    def elapsed(self) -> float:
        return sum(b - a for a, b in self.sessions) + (time.time() - self.started)


def _record(spec: EpisodeSpec, traj: Trajectory, wall_s: float) -> dict[str, Any]:
    return {"kind": "episode", "env_id": spec.env.id, "task": spec.task, "trial": spec.trial, "seed": spec.seed,
            "options": spec.options, "score": episode_score(traj), "cost": episode_cost(traj, wall_s),
            "trajectory": traj.to_dict()}


def _play(policy: EpisodePolicy, envs: dict[str, Any], spec: EpisodeSpec) -> tuple[Trajectory, float]:
    env = envs[spec.env.id]
    t0 = time.perf_counter()
    traj = policy.play(env, seed=spec.seed, options=spec.options)
    wall = time.perf_counter() - t0
    if not isinstance(traj, Trajectory):
        raise SubmissionError(f"policy {policy.name!r} returned {type(traj).__name__} from play(); expected the "
                              "episode's Trajectory (a copy of env.unwrapped.trajectory)")
    if traj.seed != spec.seed or traj.env_id != spec.env.id:
        raise SubmissionError(f"policy {policy.name!r} returned an episode of {traj.env_id} seed {traj.seed} for "
                              f"{spec.label} (seed {spec.seed}): play() must reset the env it is given with the "
                              "seed and options it is given")
    return traj, wall


class _Pool:
    """``workers`` daemon threads playing ``todo`` in order; :meth:`results` yields as episodes finish.

    Not a ``ThreadPoolExecutor``: its threads are joined at interpreter exit, so a Ctrl-C waited
    for every episode in flight (and, before the queue was cancelled, for every queued one). Here
    :meth:`stop` drops the queue at once and gives the episodes in flight ``grace_s`` to finish
    (each one that does is saved); the process then exits without waiting for the rest, which
    are lost from the progress file and played again by the next run.
    """

    def __init__(self, fn: Callable[[EpisodeSpec], float | None], todo: list[EpisodeSpec], workers: int,
                 grace_s: float = 3.0) -> None:
        self._fn, self._todo, self._grace_s = fn, deque(todo), grace_s
        self._lock = threading.Lock()
        self._out: queue.Queue[tuple[float | None, BaseException | None]] = queue.Queue()
        self._threads = [threading.Thread(target=self._work, name=f"agentgym-eval-{i}", daemon=True)
                         for i in range(max(1, min(workers, len(todo))))] if todo else []
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._todo:
                    return
                spec = self._todo.popleft()
            try:
                self._out.put((self._fn(spec), None))
            except BaseException as e:  # handed to the main thread, which stops the others
                self._out.put((None, e))
                return

    def results(self) -> Iterator[float | None]:
        while any(t.is_alive() for t in self._threads) or not self._out.empty():
            try:
                score, error = self._out.get(timeout=0.5)  # a timed wait: Ctrl-C lands here at once
            except queue.Empty:
                continue
            if error is not None:
                raise error
            yield score

    def stop(self) -> None:
        with self._lock:
            self._todo.clear()
        deadline = time.monotonic() + self._grace_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


def run_suite(suite: Suite, policy: EpisodePolicy, out: str | Path, *, name: str, policy_name: str,
              policy_args: dict[str, Any] | None = None, workers: int = 4, progress: bool = True,
              notes: str = "", command: list[str] | None = None, max_episodes: int | None = None,
              infra_retries: int = 2) -> Path | None:
    """Run every episode of ``suite`` not already in ``OUT.partial`` and write the submission to ``out``.

    ``max_episodes`` stops after that many new episodes (the run stays resumable); the submission is
    written only when every episode is done. Returns its path, or None when it is not complete yet.
    Raises :class:`InfraError` when episodes still met infrastructure faults after ``infra_retries``
    fresh tries each (module doc): they are retried by the next run of the same command.
    """
    import agentgym

    out = Path(out)
    describe = policy.describe()
    temp = describe.get("temperature")
    if temp is not None and float(temp) not in (suite.temperature, 0.0):
        raise ConfigError(f"suite {suite.ref} samples at temperature {suite.temperature}, the policy at {temp}; "
                          f"pass --policy-arg temperature={suite.temperature} (or temperature=0: greedy "
                          "decoding, scored on trial 0 alone)")
    tok = getattr(policy, "tokenizer", None)
    identity = {"suite": suite.ref, "name": name, "policy": policy_name, "policy_args": policy_args or {},
                "describe": describe, "tokenizer": tokenizer_info(tok)}
    identity = json.loads(json.dumps(identity, default=str))  # as it reads back from the file
    out.parent.mkdir(parents=True, exist_ok=True)
    part = _Partial(partial_path(out), identity)
    specs = list(suite.episodes())
    todo = [s for s in specs if s.key not in part.done][:max_episodes]
    if part.done:
        print(f"resuming {part.path}: {len(part.done)} of {len(specs)} episodes already done", file=sys.stderr)

    all_envs: list[Any] = []  # closed at the end; the first of each id is the infrastructure check's
    try:
        for opening in {s.env.id: s for s in reversed(todo)}.values():  # each id's first episode to run
            all_envs.append(opening.env.make(tok))
            check_infrastructure(all_envs[-1], seed=opening.seed, options=opening.options)
    except BaseException:
        for e in all_envs:
            e.close()
        raise
    local = threading.local()
    closing = threading.Event()
    envs_lock = threading.Lock()

    def run_one(spec: EpisodeSpec) -> float | None:
        envs = local.__dict__.setdefault("envs", {})
        fault = ""
        for _ in range(infra_retries + 1):
            try:
                if spec.env.id not in envs:
                    envs[spec.env.id] = spec.env.make(tok)
                    with envs_lock:
                        all_envs.append(envs[spec.env.id])
                traj, wall = _play(policy, envs, spec)
                fault = traj.meta.get("infra_error") or ""
            except InfraError as e:
                fault = infra_note(e)
            if closing.is_set():  # played on while its env was being closed under it: not a result
                return None
            if not fault:
                rec = _record(spec, traj, wall)
                part.add(spec, rec)
                return float(rec["score"])
            env = envs.pop(spec.env.id, None)  # the next try gets a fresh env (sandbox, server)
            if env is not None:
                env.close()
        part.add_infra(spec, fault, infra_retries + 1)
        return None

    bar = None
    if progress:
        from agentgym.trainer.metrics import Progress

        bar = Progress(len(specs), f"{suite.ref} {name}", already=len(part.done))
    scores = [float(r["score"]) for r in part.done.values()]
    pool = _Pool(run_one, todo, workers)
    try:
        for score in pool.results():  # one per finished episode, as it finishes
            if score is not None:
                scores.append(score)
            if bar is not None:
                lost = f", {len(part.infra)} infrastructure faults" if part.infra else ""
                bar.update(len(part.done), f"mean score {sum(scores) / max(len(scores), 1):.3f}{lost}")
    except BaseException:
        pool.stop()  # Ctrl-C or a failure: no queued episode starts; those in flight get a short grace
        print(f"agentgym-eval stopped: {len(part.done)} of {len(specs)} episodes are saved in {part.path}; "
              "run the same command again to resume", file=sys.stderr, flush=True)
        raise
    finally:
        closing.set()
        if bar is not None:
            bar.close()
        policy.close()
        for e in all_envs:
            e.close()
    if part.infra:
        first = next(iter(part.infra.items()))
        raise InfraError(
            f"{len(part.infra)} episode(s) met infrastructure faults on each of {infra_retries + 1} tries and have "
            f"no score (first: {first[0][0]} task {first[0][1]} trial {first[0][2]}: {first[1]}); "
            f"{len(part.done)} of {len(specs)} episodes are saved in {part.path}. Fix the infrastructure "
            "(Docker, the service) and run the same command again: only the missing episodes run")
    if len(part.done) < len(specs):
        return None
    return _assemble(suite, part, specs, out, identity, notes=notes, command=command,
                     version=agentgym.__version__)


def _assemble(suite: Suite, part: _Partial, specs: list[EpisodeSpec], out: Path, identity: dict[str, Any], *,
              notes: str, command: list[str] | None, version: str) -> Path:
    from agentgym.leaderboards.verify import scored_trials, summarize

    records = [part.done[s.key] for s in specs]
    per_env, overall = summarize(suite, [(s, Trajectory.from_dict(r["trajectory"])) for s, r in zip(specs, records)],
                                 scored_trials(suite, identity["describe"]))
    cost = {k: sum(r["cost"][k] for r in records) for k in ("input_tokens", "output_tokens", "turns")}
    cost["wall_s"] = round(sum(r["cost"]["wall_s"] for r in records), 3)
    header = {"kind": "header", "format": FORMAT, "schema": SCHEMA_VERSION, "suite": suite.content,
              "submission": {"name": identity["name"], "policy": identity["policy"],
                             "policy_args": identity["policy_args"], "describe": identity["describe"],
                             "tokenizer": identity["tokenizer"], "agentgym_version": version,
                             "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                             "elapsed_s": round(part.elapsed(), 1), "hardware": hardware(),
                             "command": list(command or []), "notes": notes}}
    footer = {"kind": "footer", "episodes": len(records), "scores": per_env, "overall": overall, "cost": cost}
    path = write_submission(out, header, records, footer)
    part.path.unlink()
    return path
