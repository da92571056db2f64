"""Versioned evaluation suites: exactly which episodes a leaderboard submission must contain.

A suite is a YAML file in ``leaderboards/suites/``::

    name: core
    version: 9c1e0f2a4b7d          # content hash, checked at load
    trials: 3                      # episodes per task (pass^k uses k = trials)
    sampling: {temperature: 1.0}
    envs:
      - id: agentgym/Math-v1
        kwargs: {reward_mode: sparse, max_turns: 1, max_action_tokens: 1024}
        tasks: [{index: 0}, {index: 1}]   # reset options, one dict per task

``version`` is the first 12 hex digits of the SHA-256 of the canonical JSON of everything
else in the file but the description, so changing a suite (a task, a budget, the trial count) changes its version;
a file whose declared version does not match its content is refused at load. Submissions name
the suite version they were made for and carry the whole suite, so a board only compares
submissions of one version.

Every episode is one (env, task, trial) with a fixed seed derived from the suite seed, the
env id, the task's options and the trial index (:func:`episode_seed`): trials of one task get
different seeds (the policy's sampling seed is derived from it), and a trial's seed tells
which trial it was, which is how the verifier spots episodes taken from extra trials.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentgym.errors import ConfigError

__all__ = ["SUITES_DIR", "EnvSpec", "EpisodeSpec", "Suite", "episode_seed", "list_suites", "load_suite",
           "suite_from_dict", "suite_hash"]

SUITES_DIR = Path(__file__).parent / "suites"
_KEYS = {"name", "version", "description", "trials", "seed", "sampling", "envs", "subset_of"}
_ENV_KEYS = {"id", "kwargs", "tasks"}


def suite_hash(content: dict[str, Any]) -> str:
    """The version of a suite: 12 hex digits of SHA-256 over its canonical JSON, ``version`` and the
    free-text ``description`` left out (everything else decides which episodes are run, and how)."""
    body = {k: v for k, v in content.items() if k not in ("version", "description")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def episode_seed(suite_seed: int, env_id: str, options: dict[str, Any], trial: int) -> int:
    """The reset seed of one trial of one task: a hash, so tasks can be added without moving others."""
    key = json.dumps([suite_seed, env_id, options, trial], sort_keys=True, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") & 0x7FFFFFFF


@dataclass(frozen=True)
class EnvSpec:
    id: str  # exact registered id, version included: agentgym/Math-v1
    kwargs: dict[str, Any]  # gym.make keyword arguments: budgets, split, reward mode
    tasks: tuple[dict[str, Any], ...]  # reset options of each task, in board order

    def make(self, tokenizer: Any = None) -> Any:
        """A fresh environment of this spec (the tokenizer is the submission's choice)."""
        import gymnasium as gym

        import agentgym  # noqa: F401  (registers the built-in environments)

        return gym.make(self.id, tokenizer=tokenizer, **self.kwargs)

    @property
    def max_action_tokens(self) -> int:
        return int(self.kwargs.get("max_action_tokens", 4096))


@dataclass(frozen=True)
class EpisodeSpec:
    env: EnvSpec
    task: int  # position of the task in env.tasks
    trial: int  # 0 .. trials-1
    seed: int

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.env.tasks[self.task])

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.env.id, self.task, self.trial)

    @property
    def label(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.env.tasks[self.task].items())
        return f"{self.env.id} task {self.task} ({opts}) trial {self.trial}"


@dataclass(frozen=True)
class Suite:
    name: str
    version: str
    trials: int
    envs: tuple[EnvSpec, ...]
    sampling: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    description: str = ""
    content: dict[str, Any] = field(default_factory=dict, compare=False)  # the file, as loaded

    @property
    def ref(self) -> str:
        """``name@version``: how submissions and boards cite the suite."""
        return f"{self.name}@{self.version}"

    @property
    def temperature(self) -> float:
        return float(self.sampling.get("temperature", 1.0))

    def env(self, env_id: str) -> EnvSpec:
        for e in self.envs:
            if e.id == env_id:
                return e
        raise ConfigError(f"suite {self.ref} has no env {env_id!r}; it has {[e.id for e in self.envs]}")

    def episodes(self) -> Iterator[EpisodeSpec]:
        """Every episode of the suite in board order: env, then task, then trial."""
        for env in self.envs:
            for t, opts in enumerate(env.tasks):
                for k in range(self.trials):
                    yield EpisodeSpec(env, t, k, episode_seed(self.seed, env.id, opts, k))

    @property
    def subset_of(self) -> dict[str, Any] | None:
        """For a subset (:meth:`subset`): the full suite's ref and the filters; None for a full suite."""
        sub = self.content.get("subset_of")
        return dict(sub) if isinstance(sub, dict) else None

    def subset(self, env_ids: Sequence[str] | None = None, tasks: int | None = None) -> Suite:
        """The episodes of some envs (``env_ids``) and/or the first ``tasks`` tasks of each env.

        A subset is a suite of its own (its own version, seeds unchanged) that names the full
        suite and the filters (``subset_of``), so a submission made for it verifies by replay
        like any other, and the verifier re-derives it from the current full suite. Boards take
        only full suites."""
        if self.subset_of is not None:
            raise ConfigError(f"suite {self.ref} is already a subset of {self.subset_of['suite']}")
        ids = [e.id for e in self.envs]
        if env_ids is not None:
            unknown = [i for i in env_ids if i not in ids]
            if unknown or not env_ids:
                raise ConfigError(f"suite {self.ref} has no env(s) {unknown or '(none given)'}; it has {ids}")
        if tasks is not None and (not isinstance(tasks, int) or tasks < 1):
            raise ConfigError(f"tasks must be a positive int, got {tasks!r}")
        keep = [i for i in ids if env_ids is None or i in env_ids]
        body = {k: v for k, v in self.content.items() if k not in ("version", "description")}
        body["envs"] = [{**e, "tasks": list(e["tasks"])[:tasks] if tasks else list(e["tasks"])}
                        for e in self.content["envs"] if e["id"] in keep]
        body["subset_of"] = {"suite": self.ref, "envs": keep if env_ids is not None else None, "tasks": tasks}
        body["description"] = f"a subset of {self.ref}: envs {keep}" + (f", first {tasks} tasks each" if tasks else "")
        body["version"] = suite_hash(body)
        return suite_from_dict(body, f"a subset of {self.ref}")

    def size(self) -> str:
        """One line: envs, tasks, trials and episodes (what a run of it costs)."""
        n = sum(len(e.tasks) for e in self.envs)
        return (f"{len(self.envs)} envs, {n} tasks x {self.trials} trials = {n * self.trials} episodes, "
                f"temperature {self.temperature}")

    def trial_of_seed(self, env_id: str, task: int, seed: int, search: int = 1000) -> int | None:
        """Which trial index (below ``search``) has this seed for this task, if any."""
        opts = self.env(env_id).tasks[task]
        for k in range(search):
            if episode_seed(self.seed, env_id, opts, k) == seed:
                return k
        return None


def _parse(content: dict[str, Any], where: str) -> Suite:
    if not isinstance(content, dict):
        raise ConfigError(f"{where}: a suite is a YAML mapping, got {type(content).__name__}")
    unknown = set(content) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown suite keys {sorted(unknown)}; known: {sorted(_KEYS)}")
    for key in ("name", "version", "trials", "envs"):
        if key not in content:
            raise ConfigError(f"{where}: the suite lacks {key!r} (see leaderboards/suites/core.yaml)")
    trials = content["trials"]
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ConfigError(f"{where}: trials must be a positive int, got {trials!r}")
    sampling = content.get("sampling") or {}
    if set(sampling) - {"temperature"}:
        raise ConfigError(f"{where}: sampling knows only 'temperature', got {sorted(sampling)}")
    envs = []
    for i, e in enumerate(content["envs"]):
        if not isinstance(e, dict) or set(e) - _ENV_KEYS or "id" not in e or "tasks" not in e:
            raise ConfigError(f"{where}: envs[{i}] must be a mapping with id, tasks and optional kwargs; "
                              f"got {e!r}")
        tasks = e["tasks"]
        if not tasks or not all(isinstance(t, dict) for t in tasks):
            raise ConfigError(f"{where}: envs[{i}].tasks must be a non-empty list of reset-option mappings")
        if len({json.dumps(t, sort_keys=True) for t in tasks}) != len(tasks):
            raise ConfigError(f"{where}: envs[{i}] ({e['id']}) lists a task twice")
        kwargs = dict(e.get("kwargs") or {})
        if "tokenizer" in kwargs:
            raise ConfigError(f"{where}: envs[{i}].kwargs must not fix the tokenizer: it is the submission's")
        envs.append(EnvSpec(str(e["id"]), kwargs, tuple(dict(t) for t in tasks)))
    if len({e.id for e in envs}) != len(envs):
        raise ConfigError(f"{where}: an env id appears twice in envs")
    return Suite(name=str(content["name"]), version=str(content["version"]), trials=trials,
                 envs=tuple(envs), sampling=dict(sampling), seed=int(content.get("seed", 0)),
                 description=str(content.get("description", "")), content=content)


def suite_from_dict(content: dict[str, Any], where: str = "suite", *, check_version: bool = True) -> Suite:
    """A suite from its parsed content (a file, or the copy a submission carries)."""
    suite = _parse(content, where)
    if check_version:
        actual = suite_hash(content)
        if suite.version != actual:
            raise ConfigError(
                f"{where}: declares version {suite.version!r} but its content hashes to {actual!r}. A changed "
                f"suite is a new version: set `version: {actual}` (submissions made for "
                f"{suite.version!r} then no longer match it and must be re-run).")
    return suite


def load_suite(name_or_path: str | Path) -> Suite:
    """A suite by name (``core``: ``leaderboards/suites/core.yaml``) or by path; the version is checked."""
    p = Path(name_or_path)
    if not p.suffix:
        p = SUITES_DIR / f"{name_or_path}.yaml"
    if not p.exists():
        raise ConfigError(f"no suite {str(name_or_path)!r}: {p} does not exist; known suites: {list_suites()}")
    try:
        content = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({e})") from e
    return suite_from_dict(content, str(p))


def list_suites(directory: Path = SUITES_DIR) -> list[str]:
    return sorted(p.stem for p in Path(directory).glob("*.yaml"))
