"""An LLM judge as a reward component (RLAIF): any OpenAI-compatible ``/chat/completions`` endpoint.

    judge = Judge(JudgeConfig(base_url="http://127.0.0.1:8000/v1", model="agentgym",
                              rubric="Question: {question}\\nAnswer: {answer}\\nReference: {reference}\\n"
                                     "Is the answer correct? Reply with 'score: 1' or 'score: 0'."))
    verdict = judge.score(question="2+2?", answer="4", reference="4")    # JudgeCall(score=1.0, ...)

Environments take it as ``judge={...}`` (the fields of :class:`JudgeConfig`); the interop
envs (``agentgym.environments.interop``) do, and any env can call :meth:`Judge.score`.

* **Cached.** A call is keyed by (model, the rendered prompt, sampling): asking the same thing
  twice asks the endpoint once.
* **Recorded.** Every call (key, prompt, reply, score) is returned as a :class:`JudgeCall`;
  envs store them in ``trajectory.meta["judge_calls"]``. Replay re-scores from the record:
  :meth:`Judge.from_record` is a judge that answers only from recorded calls and never from the
  network (a call the record lacks is a fault, never a guess). Verification therefore trusts the
  recorded replies; re-ask the endpoint (:meth:`Judge.rejudge`) to audit them.
* **Failures are infrastructure faults.** An endpoint that does not answer, an HTTP error, or a
  reply with no parsable score raises :class:`JudgeError` (a ``ServiceError``); envs report it as
  ``info["infra_error"]`` and the episode is void, never a 0 for the policy.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

from agentgym.errors import ConfigError, ServiceError

__all__ = ["Judge", "JudgeCall", "JudgeConfig", "JudgeError", "parse_score"]

# "score: 0.5", "Score = 1", "verdict: 0": the first such number in [0, 1] is the score.
_SCORE = re.compile(r"(?i)\b(?:score|verdict|grade)\s*[:=]\s*(-?\d+(?:\.\d+)?)")
ROLES = ("outcome", "shaped")


class JudgeError(ServiceError):
    """The judge could not give a score (endpoint down, HTTP error, unparsable reply): an
    infrastructure fault, not an outcome."""


@dataclass(frozen=True)
class JudgeConfig:
    base_url: str  # OpenAI-compatible, ending in /v1 (``POST {base_url}/chat/completions``)
    model: str
    rubric: str  # the judge's prompt; {question}, {answer} and {reference} are filled in
    system: str = "You are a strict grader. Follow the rubric and end with 'score: X' where X is in [0, 1]."
    max_tokens: int = 64
    temperature: float = 0.0
    timeout: float = 60.0
    api_key_env: str | None = None  # the API key's environment variable (never the key itself)
    role: str = "outcome"  # "outcome": the judge's score is the task outcome; "shaped": a shaped term
    weight: float = 1.0  # the weight of the "judge" term when role is "shaped"

    @classmethod
    def from_dict(cls, d: dict[str, Any] | JudgeConfig) -> JudgeConfig:
        if isinstance(d, JudgeConfig):
            return d
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown judge field(s) {unknown}; known: {sorted(known)}")
        missing = [k for k in ("base_url", "model", "rubric") if k not in d]
        if missing:
            raise ConfigError(f"the judge config lacks {missing} (base_url, model and rubric are required)")
        cfg = cls(**d)
        if cfg.role not in ROLES:
            raise ConfigError(f"judge role must be one of {ROLES}, got {cfg.role!r}")
        for name in ("{answer}",):
            if name not in cfg.rubric:
                raise ConfigError(f"the judge rubric must contain {name} (it also may use {{question}}, {{reference}})")
        return cfg


@dataclass(frozen=True)
class JudgeCall:
    key: str  # sha256 of (model, messages, sampling): the cache key
    prompt: str
    reply: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_score(reply: str) -> float | None:
    """The judge's score in [0, 1] from its reply (``score: 1``), or None when there is none."""
    m = _SCORE.search(reply)
    if m is None:
        return None
    v = float(m.group(1))
    return v if 0.0 <= v <= 1.0 else None


@dataclass
class Judge:
    config: JudgeConfig
    offline: bool = False  # answer only from the cache (replay): never call the endpoint
    cache: dict[str, JudgeCall] = field(default_factory=dict)
    calls_made: int = 0  # requests actually sent to the endpoint
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_record(cls, config: JudgeConfig, calls: list[dict[str, Any]]) -> Judge:
        """A judge that re-scores from recorded calls only (leaderboard replay)."""
        return cls(config, offline=True, cache={c["key"]: JudgeCall(**c) for c in calls})

    def messages(self, *, question: str, answer: str, reference: str) -> list[dict[str, str]]:
        prompt = self.config.rubric.format(question=question, answer=answer, reference=reference)
        return [{"role": "system", "content": self.config.system}, {"role": "user", "content": prompt}]

    def key(self, messages: list[dict[str, str]]) -> str:
        c = self.config
        body = [c.model, messages, c.max_tokens, c.temperature]
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def score(self, *, question: str, answer: str, reference: str = "") -> JudgeCall:
        """The judge's verdict on ``answer`` (cached); raises :class:`JudgeError` when it has none."""
        msgs = self.messages(question=question, answer=answer, reference=reference)
        key = self.key(msgs)
        with self._lock:
            hit = self.cache.get(key)
        if hit is not None:
            return hit
        if self.offline:
            raise JudgeError("the record holds no judge reply for this call (the answer or the rubric differs "
                             "from the recorded one): it cannot be re-scored offline")
        reply = self._ask(msgs)
        value = parse_score(reply)
        if value is None:
            raise JudgeError(f"the judge's reply has no 'score: X' with X in [0, 1]: {reply[:200]!r}")
        call = JudgeCall(key, msgs[-1]["content"], reply, value)
        with self._lock:
            self.cache[key] = call
        return call

    def rejudge(self, call: JudgeCall) -> float | None:
        """Ask the endpoint again for a recorded call (an audit of a recorded reply)."""
        msgs = [{"role": "system", "content": self.config.system}, {"role": "user", "content": call.prompt}]
        return parse_score(self._ask(msgs))

    def _ask(self, messages: list[dict[str, str]]) -> str:
        import os

        import httpx

        c = self.config
        headers = {}
        if c.api_key_env and os.environ.get(c.api_key_env):
            headers["Authorization"] = f"Bearer {os.environ[c.api_key_env]}"
        body = {"model": c.model, "messages": messages, "max_tokens": c.max_tokens, "temperature": c.temperature}
        self.calls_made += 1
        try:
            r = httpx.post(f"{c.base_url.rstrip('/')}/chat/completions", json=body, headers=headers, timeout=c.timeout)
        except httpx.HTTPError as e:
            raise JudgeError(f"the judge at {c.base_url} did not answer: {type(e).__name__}: {e}") from None
        if r.status_code != 200:
            raise JudgeError(f"the judge at {c.base_url} answered HTTP {r.status_code}: {r.text[:200]}")
        try:
            return str(r.json()["choices"][0]["message"]["content"] or "")
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise JudgeError(f"the judge's response is not a chat completion ({e}): {r.text[:200]}") from None
