"""The base class of every agentgym environment: a multi-turn tool environment over tokens.

``ToolEnv`` owns everything that is the same across environments: the append-only token
stream, parsing actions with the Harmony codec, tool dispatch, turn and token budgets,
terminated vs truncated, reward bookkeeping (sparse or shaped, components in ``info``) and
the trajectory record. A concrete environment defines only:

* ``sample_task(rng, options) -> Task``: the task for this episode (seeded);
* ``splits``: the task splits it honours (``("train", "eval")``); ``options["split"]`` then
  always holds the episode's split (the reset option, else the constructor's ``split``);
* ``tools() -> list[Tool]``: the tools of the current episode (default: none);
* ``score_final(answer) -> ToolResult``: the outcome of a final answer;
* optionally ``instructions``, ``on_reset()`` and ``on_close()`` for resources.

Observation and action are 1-D ``int64`` arrays of token ids. ``reset`` returns the whole
prompt (system, developer with tool schemas, user task, generation prompt); ``step`` takes
the sampled tokens and returns only the tokens the environment appends.

Infrastructure faults: a tool or ``score_final`` that raises :class:`InfraError` (a sandbox that
died, a service that stopped answering) ends the episode as truncated with
``info["infra_error"]`` and ``trajectory.meta["infra_error"]`` (a short string); the reward of
that step is 0.0 only because Gymnasium needs a number: it is not an outcome, and the trainer
and ``agentgym-eval`` leave such episodes out. ``on_reset`` may raise it too (a container that
cannot start); ``reset`` then raises it and the env waits for the next ``reset``.
"""

from __future__ import annotations

import difflib
import enum
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from agentgym.errors import ActionTypeError, ConfigError, EnvStateError, InfraError, infra_note
from agentgym.harmony import HarmonyCodec, Message, ParsedAction, render_tool_signatures
from agentgym.splits import check_split
from agentgym.tokenizers import Tokenizer, as_tokenizer
from agentgym.tools import Tool, ToolResult
from agentgym.trajectory import Trajectory, Turn

__all__ = ["DEFAULT_SHAPING", "PROMPT_STYLES", "Task", "ToolEnv", "as_action_array", "harmony_preamble",
           "token_space"]

# ToolEnv's own shaped terms: *process* terms, paid only as a bonus on a correct outcome
# (outcome * max(0, sum of weight * count)), never on a failed or unfinished episode, so that
# no penalty makes an attempt earn less than doing nothing. Environments add their own
# *progress* terms through ToolResult.components (declared in extra_shaping), paid as they
# are reported, with the episode's total kept at zero or more. Sparse mode pays only
# "outcome"; every term is always reported in info["reward_components"] (indicators and counts:
# turn 1, format 1, malformed 1, ...), and what was actually paid, by term, in info["reward_paid"]
# (its values sum to the step's reward).
DEFAULT_SHAPING: dict[str, float] = {
    "format": 0.1,  # the action that ended the episode (final answer, submit) parsed with no errors
    "malformed": -0.1,  # per action that failed to parse or called a tool badly
    "turn": -0.01,  # per turn: among correct episodes, the shorter one earns more
}

SYSTEM_PROMPT = (
    "You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n\n"
    "Reasoning: {effort}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
)
TOOLS_LINE = "\nCalls to these tools must go to the commentary channel: 'functions'."
# How reset() renders the prompt before the user message.
PROMPT_STYLES: dict[str, str] = {
    "harmony": "GPT-OSS's system message + a developer message with instructions and the "
               "TypeScript tool namespace (612 byte tokens for MathCalc-v1); what real GPT-OSS "
               "checkpoints expect",
    "compact": "one developer message: the instructions and one line per tool, name(args) "
               "(159 byte tokens for MathCalc-v1); for tiny models trained from scratch on the "
               "byte tokenizer",
}


@dataclass(slots=True)
class Task:
    id: str  # stable across versions of the same env id: what leaderboards cite
    prompt: str  # the user message
    answer: Any = None  # whatever score_final needs
    meta: dict[str, Any] = field(default_factory=dict)


_PREFIX_CACHE_SIZE = 64  # distinct prompt prefixes kept per env (most envs have one)


class _State(enum.Enum):
    NEW = "new"  # constructed, not reset
    RUNNING = "running"
    DONE = "done"  # terminated or truncated: reset before stepping again
    CLOSED = "closed"


def _compact_signature(tool: Tool) -> str:
    """``calculator(expression: string)``: a tool's name and arguments on one line."""
    props = tool.parameters.get("properties") or {}
    req = set(tool.parameters.get("required", []))
    args = ", ".join(f"{k}{'' if k in req else '?'}: {v.get('type', 'any')}" for k, v in props.items())
    return f"{tool.name}({args})"


def harmony_preamble(instructions: str, tools: Sequence[Any], reasoning_effort: str) -> list[Message]:
    """The system and developer messages of a ``prompt="harmony"`` episode.

    ``tools``: objects with ``name``/``description``/``parameters``. agentgym's chat server
    renders a chat request's system message and tools with this same function, so a
    conversation played through :class:`agentgym.chat.ChatWrapper` gets the env's exact tokens.
    """
    system = SYSTEM_PROMPT.format(effort=reasoning_effort) + (TOOLS_LINE if tools else "")
    dev = "# Instructions\n\n" + instructions
    if tools:
        dev += "\n\n" + render_tool_signatures(tools)
    return [Message("system", system), Message("developer", dev)]


def token_space(vocab_size: int) -> gym.spaces.Sequence:
    """Variable-length 1-D int64 arrays of ids in [0, vocab_size)."""
    return gym.spaces.Sequence(gym.spaces.Discrete(vocab_size), stack=True)


def as_action_array(action: Any) -> np.ndarray:
    """``action`` as a 1-D array of token ids, or :class:`ActionTypeError` for what no policy samples.

    Text, chat messages, None, floats and 2-D arrays are mistakes of the program driving the env
    and raise; ids the policy got wrong (out of the vocabulary, an empty action) pass here and
    become error observations in ``step``.
    """
    got = type(action).__name__
    if isinstance(action, (str, bytes)):
        raise ActionTypeError(f"step() takes token ids (a 1-D integer array), got a {got}; to send text, "
                              "wrap the env: agentgym.TextWrapper(env), or encode it with the env's tokenizer")
    if action is None or isinstance(action, Mapping):
        raise ActionTypeError(f"step() takes token ids (a 1-D integer array), got {got}; to send chat "
                              "messages, wrap the env: agentgym.ChatWrapper(env)")
    try:
        arr = np.asarray(action)
    except Exception:  # ragged lists, objects that refuse conversion
        raise ActionTypeError(f"step() takes token ids (a 1-D integer array), got a {got} numpy cannot "
                              "read as one (ragged or nested?)") from None
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ActionTypeError(f"step() takes token ids (a 1-D integer array), got shape {arr.shape} dtype "
                              f"{arr.dtype}; pass the sampled ids of one action, e.g. np.asarray(ids, "
                              "dtype=np.int64)")
    return arr


def _constructor_args(cls: type) -> list[str]:
    """The keyword arguments ``cls(...)`` accepts along its ``__init__`` chain."""
    names: list[str] = []
    for c in cls.__mro__:
        init = c.__dict__.get("__init__")
        if init is None or c is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in names:
                names.append(p.name)
        if c is ToolEnv:
            break
    return names


class ToolEnv(gym.Env[np.ndarray, np.ndarray]):
    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012  (gymnasium declares it an instance var)
    default_id: ClassVar[str] = "agentgym/ToolEnv-v0"
    instructions: ClassVar[str] = ""
    extra_shaping: ClassVar[dict[str, float]] = {}  # an env's own shaped terms and weights
    reasoning_effort: ClassVar[str] = "low"
    # A final answer ends the episode (score_final returns terminal=True). Envs whose user speaks
    # again (multi-turn text envs from other hubs) set False: a non-terminal score_final result is
    # then the user's next message.
    final_ends_episode: ClassVar[bool] = True
    # The splits this env honours, the default first; () = none: then a split is refused.
    splits: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        *,
        tokenizer: Tokenizer | Any = None,
        reward_mode: str = "sparse",
        max_turns: int = 8,
        max_tokens: int = 8192,
        max_action_tokens: int = 4096,
        shaping: dict[str, float] | None = None,
        prompt: str = "harmony",
        render_mode: str | None = None,
        split: str | None = None,
        **unexpected: Any,
    ) -> None:
        if unexpected:  # a typo in gym.make(ENV_ID, ...) lands here through the subclasses' **kwargs
            known = _constructor_args(type(self))
            hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, known, n=1))
                     else repr(k) for k in sorted(unexpected)]
            raise ConfigError(f"{type(self).__name__} got unknown keyword argument(s) {', '.join(hints)}; "
                              f"it takes: {', '.join(known)}")
        if prompt not in PROMPT_STYLES:
            raise ConfigError(f"prompt must be one of {sorted(PROMPT_STYLES)}, got {prompt!r}: "
                              + "; ".join(f"{k}: {v}" for k, v in PROMPT_STYLES.items()))
        if reward_mode not in ("sparse", "shaped"):
            raise ConfigError(f"reward_mode must be 'sparse' or 'shaped', got {reward_mode!r}")
        for name, v in (("max_turns", max_turns), ("max_tokens", max_tokens),
                        ("max_action_tokens", max_action_tokens)):
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name} must be a positive int, got {v!r}")
        if render_mode not in (None, "ansi"):
            raise ConfigError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        defaults = {**DEFAULT_SHAPING, **self.extra_shaping}
        unknown = set(shaping or {}) - set(defaults)
        if unknown:
            raise ConfigError(f"unknown shaping keys {sorted(unknown)}; known: {sorted(defaults)}")
        self.tokenizer = as_tokenizer(tokenizer)
        self.codec = HarmonyCodec(self.tokenizer)
        self.reward_mode = reward_mode
        self.max_turns, self.max_tokens, self.max_action_tokens = max_turns, max_tokens, max_action_tokens
        self.shaping = {**defaults, **(shaping or {})}
        self.prompt_style = prompt
        self.render_mode = render_mode
        # The default split of reset(); options={"split": ...} overrides it for one episode.
        self.split: str | None = (check_split(split, self.splits, type(self).__name__) if split is not None
                                  else self.splits[0] if self.splits else None)
        self.observation_space = token_space(self.tokenizer.vocab_size)  # type: ignore[assignment]
        self.action_space = token_space(self.tokenizer.vocab_size)  # type: ignore[assignment]
        self._state = _State.NEW
        self._tools: dict[str, Tool] = {}
        self._prefix_cache: dict[tuple[str, ...], list[int]] = {}
        self.task: Task | None = None
        self.trajectory: Trajectory | None = None
        self.counts: dict[str, int] = {}
        self._sums: dict[str, float] = {}  # the episode's reward components so far, summed

    # ------------------------------------------------------------------ subclass API
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        raise NotImplementedError

    def tools(self) -> list[Tool]:
        return []

    def score_final(self, answer: str) -> ToolResult:
        """Score a final-channel answer. Must return ``terminal=True`` with an ``outcome``."""
        raise NotImplementedError

    def on_reset(self) -> None:
        """Acquire per-episode resources (sandbox, database). Called after sample_task."""

    def on_close(self) -> None:
        """Release resources. Called once by close()."""

    def budget_exhausted(self) -> bool:
        """An env's own budget (e.g. sandbox seconds) ran out: the episode truncates this step."""
        return False

    # ------------------------------------------------------------------ gym API
    @property
    def env_id(self) -> str:
        return self.spec.id if self.spec is not None else self.default_id

    @property
    def episode_tools(self) -> list[Tool]:
        """The tools of the current episode (those the developer message lists); set by reset."""
        return list(self._tools.values())

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        if self._state is _State.CLOSED:
            raise EnvStateError(f"{self.env_id} is closed; make a new environment")
        super().reset(seed=seed)
        opts = dict(options or {})
        if "split" in opts or self.splits:
            opts["split"] = check_split(opts.get("split", self.split), self.splits, self.env_id)
        self.task = self.sample_task(self.np_random, opts)
        try:
            self.on_reset()
        except InfraError:
            self._state = _State.NEW  # no episode: step() asks for a reset
            raise
        self._tools = {t.name: t for t in self.tools()}
        prompt = self._prompt_ids(self.task.prompt)
        self.trajectory = Trajectory(
            env_id=self.env_id, seed=seed, task_id=self.task.id,
            tokenizer=getattr(self.tokenizer, "name", type(self.tokenizer).__name__),
            meta={"reward_mode": self.reward_mode, "max_turns": self.max_turns,
                  "max_tokens": self.max_tokens, "prompt": self.prompt_style,
                  "options": dict(options or {}), **({"split": opts["split"]} if "split" in opts else {})},
        )
        self.trajectory.append(prompt, policy=False)
        self.trajectory.prompt_len = len(prompt)
        self.counts = {"turns": 0, "malformed": 0, "tool_calls": 0, "tool_errors": 0}
        self._sums = {}
        self._state = _State.RUNNING
        info: dict[str, Any] = {"task_id": self.task.id, "prompt": self.task.prompt}
        if "split" in opts:
            info["split"] = opts["split"]
        return np.asarray(prompt, dtype=np.int64), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._state is not _State.RUNNING:
            raise EnvStateError(
                f"step() called on a {self._state.value} environment; call reset() first"
                if self._state is not _State.CLOSED else f"{self.env_id} is closed")
        traj = self.trajectory
        assert traj is not None and self.task is not None
        # The turn is built on the side and committed at the end: if the env raises (a bug in
        # score_final, an undeclared reward term), the record holds none of the turn. Side
        # effects a tool already had in the world (a file written, a row inserted) stay.
        counts = dict(self.counts)
        counts["turns"] += 1
        comps: dict[str, float] = {"outcome": 0.0, "turn": 1.0}
        info: dict[str, Any] = {"text": "", "tool_call": None, "tool_result": None, "error": None}
        ids, reject = self._validate(action)
        start = len(traj.tokens)
        terminated = truncated = False
        tool_name = None
        if reject is not None:
            # Nothing is appended: ids that are not tokens cannot be trained on or replayed.
            info["error"] = reject
            comps["malformed"] = 1.0
            counts["malformed"] += 1
            ids = []
            obs: list[int] = []
        else:
            clipped = len(ids) > self.max_action_tokens
            if clipped:
                ids = ids[: self.max_action_tokens]
            parsed = self.codec.parse(ids)
            info["text"] = self.tokenizer.decode(ids)
            try:
                result, tool_name = self._dispatch(parsed, info, comps, counts)
            except InfraError as e:
                return self._infra_fault(ids, parsed, info, counts, e)
            if clipped:
                info["error"] = f"action_too_long: more than {self.max_action_tokens} tokens"
                truncated = True
            if result.terminal:
                terminated = True
                comps["outcome"] = float(result.outcome or 0.0)
                if parsed.ok:  # the action that ended the episode (answer or submit) was clean Harmony
                    comps["format"] = 1.0
                obs = []
            else:
                obs = self._observation(ids, result, tool_name)
            info["tool_result"] = {"content": result.content, "ok": result.ok, "error": result.error}
            for k, v in result.components.items():
                comps[k] = comps.get(k, 0.0) + v
        self._check_components(comps)
        action_end = start + len(ids)
        if not terminated and not truncated:
            truncated = (counts["turns"] >= self.max_turns
                         or action_end + len(obs) >= self.max_tokens or self.budget_exhausted())
        if truncated and not terminated:
            obs = []  # nothing more will be sampled: no dangling generation prompt
        sums = {k: self._sums.get(k, 0.0) + v for k, v in comps.items()}
        sums.update({k: v for k, v in self._sums.items() if k not in sums})
        paid: dict[str, float] = {}
        reward = self._reward(comps, sums, last=terminated or truncated, paid=paid)
        # Commit: nothing below raises.
        traj.append(ids, policy=True)
        traj.append(obs, policy=False)
        traj.turns.append(Turn(start, action_end, len(traj.tokens), reward, comps, tool_name,
                               info["error"] if isinstance(info["error"], str) else None))
        self.counts, self._sums = counts, sums
        if terminated or truncated:
            traj.terminated, traj.truncated = terminated, truncated
            self._state = _State.DONE
        info.update(reward_components=comps, reward_paid=paid, counts=dict(counts), turn=counts["turns"])
        return np.asarray(obs, dtype=np.int64), reward, terminated, truncated, info

    def _infra_fault(self, ids: list[int], parsed: ParsedAction, info: dict[str, Any], counts: dict[str, int],
                     error: InfraError) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """End the episode on an infrastructure fault: the action is kept (it was sampled), no
        outcome is recorded, and ``info`` / the trajectory say what failed (module doc)."""
        traj = self.trajectory
        assert traj is not None
        note = infra_note(error)
        tool = parsed.tool_call.name if parsed.tool_call is not None else None
        start = len(traj.tokens)
        traj.append(ids, policy=True)
        traj.turns.append(Turn(start, len(traj.tokens), len(traj.tokens), 0.0, {}, tool, "infra_error"))
        traj.truncated, traj.meta["infra_error"] = True, note
        self.counts = counts
        self._state = _State.DONE
        info.update(error="infra_error", infra_error=note, reward_components={}, reward_paid={}, counts=dict(counts),
                    turn=counts["turns"])
        return np.zeros(0, dtype=np.int64), 0.0, False, True, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.trajectory is None:
            return None
        return self.tokenizer.decode(self.trajectory.tokens)

    def close(self) -> None:
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        self.on_close()
        super().close()

    # ------------------------------------------------------------------ internals
    def _prompt_ids(self, user: str) -> list[int]:
        tools = list(self._tools.values())
        # The cache is keyed on the exact text it tokenizes, so an env whose instructions or
        # tool descriptions change per task gets each episode's own prefix.
        messages: tuple[Message, ...]
        if self.prompt_style == "compact":
            dev = self.instructions + "".join(f"\nTool: functions.{_compact_signature(t)}" for t in tools)
            messages = (Message("developer", dev),)
        else:
            messages = tuple(harmony_preamble(self.instructions, tools, self.reasoning_effort))
        key = tuple(m.content for m in messages)
        prefix = self._prefix_cache.get(key)
        if prefix is None:
            prefix = self.codec.render_many(messages)
            if len(self._prefix_cache) >= _PREFIX_CACHE_SIZE:
                del self._prefix_cache[next(iter(self._prefix_cache))]  # oldest first
            self._prefix_cache[key] = prefix
        return prefix + self.codec.render_prompt([Message("user", user)])

    def _validate(self, action: Any) -> tuple[list[int], str | None]:
        """Turn an action into a list of ids, or say why the policy's ids are rejected (a
        program's wrong type raises :class:`ActionTypeError`)."""
        arr = as_action_array(action)
        if arr.size == 0:
            return [], "empty_action: the action contained no tokens"
        if arr.min() < 0 or arr.max() >= self.tokenizer.vocab_size:
            return [], f"out_of_vocab: ids must be in [0, {self.tokenizer.vocab_size})"
        return arr.tolist(), None

    def _dispatch(self, parsed: ParsedAction, info: dict[str, Any], comps: dict[str, float],
                  counts: dict[str, int]) -> tuple[ToolResult, str | None]:
        errors = [str(e) for e in parsed.errors]
        if errors:
            info["error"] = "; ".join(errors)

        def malformed() -> None:
            comps["malformed"] = 1.0
            counts["malformed"] += 1

        call = parsed.tool_call
        if call is not None:
            info["tool_call"] = {"name": call.name, "arguments": call.arguments}
            tool = self._tools.get(call.name)
            if tool is None:
                malformed()
                known = ", ".join(sorted(self._tools)) or "none"
                return ToolResult.failure("unknown_tool", f"no tool named {call.name!r}; tools: {known}"), call.name
            if call.arguments is None:
                malformed()
                return ToolResult.failure("bad_json", errors[-1] if errors else "bad arguments"), call.name
            if errors:  # wrong stop token, text after the stop...: the call runs, and is penalised
                malformed()
            counts["tool_calls"] += 1
            result = tool(call.arguments)
            if not result.ok:
                counts["tool_errors"] += 1
                if result.error == "bad_arguments" and not errors:
                    malformed()
            return result, call.name
        if parsed.final is not None:
            result = self.score_final(parsed.final)
            if not result.terminal and self.final_ends_episode:
                raise ConfigError(
                    f"{type(self).__name__}.score_final returned terminal=False; a final answer ends the "
                    "episode: return ToolResult(..., terminal=True, outcome=...)")
            if not parsed.ok:
                malformed()
            return result, None
        malformed()
        reason = "; ".join(errors) or "no tool call and no final answer"
        return ToolResult.failure("unparsed", reason), None

    def _observation(self, ids: list[int], result: ToolResult, tool_name: str | None) -> list[int]:
        # An action cut off inside a message is closed by the env before anything follows.
        prefix = [] if ids[-1] in (self.codec.END, *self.codec.stop_ids) else [self.codec.END]
        if tool_name is not None:
            return prefix + self.codec.render_tool_result(tool_name, result.content)
        if result.ok and not self.final_ends_episode:  # the user's reply to a final answer
            return prefix + self.codec.render_prompt([Message("user", result.content)])
        # No tool to answer for the model: the notice comes from the user side.
        notice = Message("user", f"[agentgym] {result.content}\nReply with a tool call or a final answer.")
        return prefix + self.codec.render_prompt([notice])

    def _check_components(self, comps: dict[str, float]) -> None:
        undeclared = set(comps) - set(self.shaping) - {"outcome"}
        if undeclared:  # a bug in the env, not in the policy: every term needs a declared weight
            raise ConfigError(
                f"{type(self).__name__} reported reward components {sorted(undeclared)} with no weight; "
                f"declare them in {type(self).__name__}.extra_shaping (known: {sorted(self.shaping)})")

    def _reward(self, comps: dict[str, float], sums: dict[str, float], *, last: bool,
                paid: dict[str, float] | None = None) -> float:
        """This turn's reward; ``sums`` are the episode's components including this turn.

        Sparse: the outcome. Shaped: the env's progress terms as they are reported, and on the
        episode's last turn the outcome, a top-up that keeps the episode's progress total at
        zero or more, and ToolEnv's process terms as a bonus on a correct outcome only
        (``outcome * max(0, format - turns - malformed)``, weighted). So an episode that does
        nothing earns 0, and no penalty can push an attempt below it (docs/api/reward-modes.md).
        ``paid`` (if given) receives the nonzero amounts the reward is the sum of, by term
        (``progress_floor``: the top-up; ``process_bonus``: the bonus on a correct outcome).
        """
        pieces: dict[str, float] = {}
        outcome = comps["outcome"]
        w = self.shaping
        if self.reward_mode == "sparse":
            reward = outcome
            pieces["outcome"] = outcome
        elif not all(math.isfinite(v) for v in w.values()):
            # A NaN/inf weight is passed through to every turn rather than floored away, so that
            # consumers (the trainer's finite check) refuse it loudly instead of training on it.
            reward = outcome + sum(w[k] * v for k, v in comps.items() if k != "outcome")
            pieces.update({k: (outcome if k == "outcome" else w[k] * v) for k, v in comps.items()})
        else:
            progress = [k for k in w if k not in DEFAULT_SHAPING]
            reward = sum((w[k] * comps.get(k, 0.0) for k in progress), 0.0)
            pieces.update({k: w[k] * comps.get(k, 0.0) for k in progress})
            if last:
                floor = max(0.0, -sum((w[k] * sums.get(k, 0.0) for k in progress), 0.0))
                process = sum(w[k] * sums.get(k, 0.0) for k in DEFAULT_SHAPING)
                reward += floor
                reward += outcome + outcome * max(0.0, process)
                pieces.update(progress_floor=floor, outcome=outcome, process_bonus=outcome * max(0.0, process))
        if paid is not None:
            paid.update({k: v for k, v in pieces.items() if v != 0.0})
        return reward
