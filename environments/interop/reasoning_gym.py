"""``agentgym/ReasoningGym-v0``: any reasoning-gym dataset, by name and config, as a token env.

    env = gym.make("agentgym/ReasoningGym-v0", dataset="basic_arithmetic",
                   config={"min_terms": 2, "max_terms": 4}, split="train")

One problem per episode, answered in the final channel and scored by the dataset's own
``score_answer`` (reasoning-gym's semantics: exact strings, parsed numbers, puzzle checkers),
called once per answer, never in agentgym's process: in a fresh child of a scorer worker
(:mod:`.isolation`; ``score_timeout`` seconds per call, past which the answer earns 0), after the
answer rules (:mod:`.answer_rules`: no code reaches a scorer that evaluates its input, and the
forms the built-in math envs ask for apply to the polynomial, integration and factorization
datasets).
The outcome is 1 when ``score_answer`` says 1 and 0 otherwise; ``partial_credit=True`` passes
reasoning-gym's fractional scores through (several datasets pay 0.01-0.2 for any answer, and the
default scorer pays ``len(answer) / len(output)`` to an output that merely contains the answer, so
partial credit pays several answers at once: use it with ``no_attempt_guard=True``). The raw
score is in ``info["tool_result"]``.

Deterministic: a problem is a pure function of (dataset, config, config seed, index), so the env
replays and verifies. ``config["seed"]`` defaults to 0 (reasoning-gym draws a random one when
none is given). Splits: reasoning-gym has none; agentgym splits each dataset by a stable hash of
the problem text (``test`` 10%, ``eval`` 10%, ``train`` 80%), so an eval problem is never a train
problem of the same dataset and config. Reset options: ``index`` (the index-th problem of the
split, counted in dataset order), ``split``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
from typing import Any, ClassVar

import numpy as np

from agentgym.env import Task
from agentgym.environments.interop.answer_rules import code_gate, form_gate
from agentgym.environments.interop.base import HubEnv, Provenance, require
from agentgym.environments.interop.hub_scorers import pack
from agentgym.environments.interop.isolation import (
    IsolatedScorer,
    ScorerFault,
    SessionError,
    release_scorer,
    shared_scorer,
)
from agentgym.errors import ConfigError
from agentgym.tools import ToolResult

__all__ = ["ReasoningGymEnv", "split_of"]

SPLITS: tuple[str, ...] = ("train", "eval", "test")
_BUCKETS = {"test": range(0, 10), "eval": range(10, 20), "train": range(20, 100)}  # % of problems
OPTION_KEYS = ("index", "split")


def split_of(dataset: str, question: str) -> str:
    """The split a problem belongs to: a stable hash of the dataset name and the problem text."""
    bucket = int.from_bytes(hashlib.sha256(f"{dataset}\0{question}".encode()).digest()[:4], "big") % 100
    return next(s for s, r in _BUCKETS.items() if bucket in r)


class ReasoningGymEnv(HubEnv):
    default_id = "agentgym/ReasoningGym-v0"
    hub = "reasoning-gym"
    splits: ClassVar[tuple[str, ...]] = SPLITS
    instructions = "Solve the problem. Answer in the final channel with only the final answer, in the form asked."

    def __init__(self, *, dataset: str = "basic_arithmetic", config: dict[str, Any] | None = None,
                 split: str = "train", partial_credit: bool = False, score_timeout: float = 20.0,
                 **kwargs: Any) -> None:
        rg = require("reasoning_gym", "reasoning-gym")
        from reasoning_gym.factory import DATASETS

        if dataset not in DATASETS:
            near = difflib.get_close_matches(dataset, list(DATASETS), n=1)
            raise ConfigError(f"unknown reasoning-gym dataset {dataset!r}" + (f"; did you mean {near[0]!r}?" if near
                              else "") + f" ({len(DATASETS)} known, e.g. {sorted(DATASETS)[:5]})")
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
        cfg = {"seed": 0, **(config or {})}
        fields = {f.name for f in dataclasses.fields(DATASETS[dataset][1])}
        unknown = sorted(set(cfg) - fields)
        if unknown:
            raise ConfigError(f"{dataset}'s config has no field(s) {unknown}; its fields: {sorted(fields)}")
        try:
            self.source = rg.create_dataset(dataset, **cfg)
        except (ValueError, AssertionError, TypeError) as e:  # reasoning-gym's own config checks
            raise ConfigError(f"reasoning-gym refused the config {cfg} for {dataset!r}: {e}") from None
        super().__init__(**kwargs)
        self.dataset, self.config, self.split, self.partial_credit = dataset, cfg, split, partial_credit
        self._positions: dict[str, list[int]] | None = None  # raw indices per split
        self.entry: dict[str, Any] | None = None
        self.score_timeout = float(score_timeout)
        self._scorer: IsolatedScorer | None = None  # the scorer worker, started at the first answer

    # ------------------------------------------------------------------ HubEnv API
    def provenance(self) -> Provenance:
        version = _version("reasoning-gym")
        has_answer = self.entry is None or isinstance(self.entry.get("answer"), str)
        return Provenance(
            hub=f"reasoning-gym {version}", source=self.dataset, replayable=True,
            replay_note="a problem is a pure function of (dataset, config, seed, index); score_answer runs "
            "isolated, once per answer, in a fresh process",
            oracle=has_answer,
            oracle_note="the dataset's reference answer" if has_answer else
            f"{self.dataset} has no single reference answer (only a checker): no oracle")

    def oracle_action(self) -> list[int]:
        assert self.entry is not None
        if not isinstance(self.entry.get("answer"), str):
            return super().oracle_action()
        return self.codec.final_ids(self.entry["answer"])

    # ------------------------------------------------------------------ ToolEnv API
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        unknown = set(options) - set(OPTION_KEYS)
        if unknown:
            raise ConfigError(f"unknown reset option(s) {sorted(unknown)}; known: {list(OPTION_KEYS)}")
        split = options.get("split", self.split)
        if split not in SPLITS:
            raise ConfigError(f"reset option split must be one of {SPLITS}, got {split!r}")
        index = options.get("index")
        if index is not None and (not isinstance(index, (int, np.integer)) or isinstance(index, bool) or index < 0):
            raise ConfigError(f"reset option 'index' must be a non-negative int, got {index!r}")
        pos = self._split_positions(split)
        if index is None:
            index = int(rng.integers(len(pos)))
        if index >= len(pos):
            raise ConfigError(f"index {index} is out of range: split {split!r} of {self.dataset} has {len(pos)} "
                              f"problems (config size {len(self.source)})")
        raw = pos[int(index)]
        self.entry = entry = self.source[raw]
        return Task(id=f"{self.dataset}/{self.config['seed']}/{raw}", prompt=str(entry["question"]),
                    answer=entry.get("answer"), meta={"split": split, "index": raw})

    def score_source(self, answer: str) -> ToolResult:
        assert self.entry is not None
        problem = pack(self.entry)
        try:
            raw, note = self._score(problem, answer)
            probes: dict[str, float] = {}

            def score(a: str) -> float:
                if a is answer:
                    s = raw
                else:
                    if a not in probes:
                        probes[a] = self._score(problem, a)[0]
                    s = probes[a]
                return s if self.partial_credit else float(s >= 1.0)

            outcome, numbers = self.guarded(score, answer)
        except ScorerFault as e:
            return self.infra_fault(str(e))
        detail = ", ".join(f"{k} {v:g}" for k, v in numbers.items())
        return ToolResult(f"reasoning-gym score_answer: {raw:g} ({detail}){note}", terminal=True, outcome=outcome)

    def degenerate_answers(self) -> list[str]:
        reference = str((self.entry or {}).get("answer", "")).strip()
        return [c for c in ("0", "1") if c != reference]

    def on_close(self) -> None:
        if self._scorer is not None:
            release_scorer(self._scorer)
            self._scorer = None

    def _score(self, problem: str, answer: str) -> tuple[float, str]:
        """reasoning-gym's score of ``answer`` on ``problem`` (the packed entry): the answer rules first
        (:mod:`.answer_rules`), then ``score_answer`` in a fresh child of the scorer worker
        (:mod:`.isolation`), once."""
        assert self.entry is not None
        why = code_gate(self.dataset, answer, self.entry.get("answer")) or form_gate(self.dataset, answer, self.entry)
        if why:
            return 0.0, f"; refused before scoring: {why}"
        if self._scorer is None:
            self._scorer = shared_scorer("agentgym.environments.interop.hub_scorers:ReasoningGymScorer",
                                         {"dataset": self.dataset, "config": self.config}, timeout=self.score_timeout)
        try:
            (value,) = self._scorer.score(problem, [answer])
        except SessionError as e:  # the scorer raised, timed out or died on this answer: it is wrong
            return 0.0, f"; the scorer failed on this answer: {e}"
        return float(value), ""

    # ------------------------------------------------------------------ splits
    def _split_positions(self, split: str) -> list[int]:
        """Raw dataset indices of the problems in ``split``, in order (the dataset is scanned once)."""
        if self._positions is None:
            self._positions = {s: [] for s in SPLITS}
            for i in range(len(self.source)):
                self._positions[split_of(self.dataset, str(self.source[i]["question"]))].append(i)
        if not self._positions[split]:
            raise ConfigError(f"{self.dataset} (size {len(self.source)}) has no problem in split {split!r}; "
                              "raise config['size']")
        return self._positions[split]


@functools.cache  # read once: importlib.metadata parses the METADATA file (~0.7 ms) on every call
def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"
