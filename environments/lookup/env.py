"""``agentgym/Lookup-v1``: follow a chain of dependent look-ups through a service that fails at
random, then answer the code the chain ends at.

An episode hides a chain of ``depth`` links between distinct three-digit codes, ``c0 -> c1 ->
... -> c_depth``. The prompt names ``c0`` and the depth; the ``lookup`` tool maps a code of the
chain to the next one. Each call's input is the previous call's result, so the only way to the
end is ``depth`` successful calls in order, and an episode can fail at any link after getting the
others right (a wrong code read, a call skipped, an answer one link short).

The service is flaky: each call fails with probability ``fail_rate`` (a transient ``unavailable``
message, drawn from the episode's seed, so a replay sees the same faults), and the right move is
to call again with the same code; giving up, or answering from the error text, earns 0. A code
that is not in the chain gets a permanent ``unknown code`` error.

Sparse reward: 1.0 when the final answer is exactly ``c_depth`` (three digits, nothing else),
else 0.0. Shaped reward adds ToolEnv's process terms on a correct answer only.

Options (constructor or ``reset(options=...)``): ``depth`` (an int or a list to draw from;
default 1-3), ``fail_rate`` (default 0.0), ``split`` (``train`` / ``eval``: disjoint chains, by
a hash of the chain); ``reset`` also takes ``index`` (the index-th chain of its depth and split,
whatever the seed; the seed still draws the faults) and ``fault_seed`` (an int: the same task with
its own draw of faults, from the seed and ``fault_seed``; a trainer gives each sample of a task its
own, ``env.sample_option: fault_seed``, so the samples of a group do not all meet the same faults).
A run with faults needs turns for the
retries: ``max_turns`` of at least ``depth + 1`` plus the expected failures. ``task_id`` is ``lookup/d<depth>/<12 hex digits>``. Depth 4 and above,
and any fail rate, are always available: evaluate beyond what a policy trained on.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym.env import Task, ToolEnv
from agentgym.errors import ConfigError
from agentgym.tools import Tool, ToolResult

__all__ = ["MAX_DEPTH", "LookupEnv", "UNAVAILABLE"]

MAX_DEPTH = 8
UNAVAILABLE = "unavailable: the lookup service did not answer this time (transient); call lookup again"
_CODE = re.compile(r"\d{3}")
_EVAL_SHARE = 5  # one chain in 5 is an eval chain


def _depths(depth: int | Sequence[int]) -> tuple[int, ...]:
    ds = (depth,) if isinstance(depth, int) else tuple(depth)
    if not ds or any(not isinstance(d, int) or isinstance(d, bool) or not 1 <= d <= MAX_DEPTH for d in ds):
        raise ConfigError(f"depth: expected an int in [1, {MAX_DEPTH}] or a non-empty list of them, got {depth!r}; "
                          "e.g. depth=3 or depth=[1, 2, 3]")
    return ds


def _rate(fail_rate: Any) -> float:
    if not isinstance(fail_rate, (int, float)) or isinstance(fail_rate, bool) or not 0.0 <= fail_rate < 1.0:
        raise ConfigError(f"fail_rate: expected a probability in [0, 1), got {fail_rate!r}; e.g. fail_rate=0.3")
    return float(fail_rate)


def chain_split(codes: Sequence[str]) -> str:
    """The split a chain belongs to: ``eval`` for one chain in five, by a hash of its codes."""
    h = int(hashlib.sha256("-".join(codes).encode()).hexdigest()[:8], 16)
    return "eval" if h % _EVAL_SHARE == 0 else "train"


class LookupEnv(ToolEnv):
    """Follow a chain of dependent look-ups through a flaky service; answer the code it ends at."""

    default_id = "agentgym/Lookup-v1"
    splits = ("train", "eval")
    instructions = ("Follow the chain: call the lookup tool with the start code, then with each code it "
                    "returns, as many times as the task says. If a call fails, call it again. Then reply in "
                    "the final channel with only the last code.")

    def __init__(self, *, depth: int | Sequence[int] = (1, 2, 3), fail_rate: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.depths = _depths(depth)
        self.fail_rate = _rate(fail_rate)
        self.links: dict[str, str] = {}  # this episode's chain: code -> next code
        self.position: str | None = None  # the code the oracle looks up next
        self.hops = 0  # successful look-ups along the chain, in order
        self.last_failed = False
        self._episode_rate = 0.0
        self._faults: np.random.Generator | None = None
        self._tool = Tool(
            "lookup", "Returns the code that follows the given code in the chain.",
            {"type": "object", "properties": {"code": {"type": "string", "description": "a three-digit code",
                                                       "maxLength": 16}},
             "required": ["code"], "additionalProperties": False},
            self._lookup)

    def tools(self) -> list[Tool]:
        return [self._tool]

    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        unknown = set(options) - {"depth", "fail_rate", "split", "index", "fault_seed"}
        if unknown:
            raise ConfigError(f"{self.env_id}: unknown option(s) {sorted(unknown)}; expected depth, fail_rate, "
                              "split, index, fault_seed")
        depths = _depths(options["depth"]) if "depth" in options else self.depths
        self._episode_rate = _rate(options["fail_rate"]) if "fail_rate" in options else self.fail_rate
        split = options.get("split", "train")
        if (index := options.get("index")) is not None:  # a fixed task: the index-th chain of its depth and split
            if not isinstance(index, int) or index < 0:
                raise ConfigError(f"index: expected an int >= 0, got {index!r}")
            depth = depths[index % len(depths)]
            rng = np.random.default_rng([index, depth, self.splits.index(split)])
        else:
            depth = depths[int(rng.integers(len(depths)))]
        while True:  # rejection: a chain of the asked split (deterministic in the seed)
            codes = [str(c) for c in rng.choice(np.arange(100, 1000), size=depth + 1, replace=False)]
            if chain_split(codes) == split:
                break
        self._faults = None  # faults drawn from the episode's seed (np_random)
        if (fault_seed := options.get("fault_seed")) is not None:  # the same task, its own faults
            if not isinstance(fault_seed, int) or isinstance(fault_seed, bool) or fault_seed < 0:
                raise ConfigError(f"fault_seed: expected an int >= 0, got {fault_seed!r}")
            self._faults = np.random.default_rng([int(rng.integers(2**32)), fault_seed])
        digest = hashlib.sha256("-".join(codes).encode()).hexdigest()[:12]
        calls = "1 lookup" if depth == 1 else f"{depth} lookups in a row"
        prompt = (f"Start at code {codes[0]}. Follow the chain with {calls} (each lookup takes the code "
                  f"the previous one returned) and answer the code you reach.")
        return Task(id=f"lookup/d{depth}/{digest}", prompt=prompt, answer=codes[-1],
                    meta={"codes": codes, "depth": depth, "fail_rate": self._episode_rate})

    def on_reset(self) -> None:
        assert self.task is not None
        codes = self.task.meta["codes"]
        self.links = dict(zip(codes[:-1], codes[1:]))
        self.position, self.hops, self.last_failed = codes[0], 0, False

    def _lookup(self, code: str) -> ToolResult:
        code = code.strip()
        faults = self.np_random if self._faults is None else self._faults
        if faults.random() < self._episode_rate:  # one draw per call: a replay sees the same faults
            self.last_failed = True
            return ToolResult(UNAVAILABLE)
        self.last_failed = False
        nxt = self.links.get(code)
        if nxt is None:
            return ToolResult.failure("unknown_code", f"no code {code[:16]!r} in this chain; look up the start "
                                                      "code or a code the tool returned")
        if code == self.position:
            self.position, self.hops = nxt, self.hops + 1
        return ToolResult(nxt)

    def score_final(self, answer: str) -> ToolResult:
        assert self.task is not None
        text = answer.strip().removesuffix(".").strip()
        if not _CODE.fullmatch(text):
            return ToolResult("wrong: expected only the three-digit code the chain ends at", terminal=True, outcome=0.0)
        ok = text == self.task.answer
        return ToolResult("correct" if ok else "wrong", terminal=True, outcome=1.0 if ok else 0.0)
