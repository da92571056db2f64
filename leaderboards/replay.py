"""Replay one recorded episode against a real environment and say where the record differs.

The replay resets the env with the *suite's* seed and options (never the recorded ones), feeds
the recorded action tokens turn by turn, and takes the env's own trajectory as the truth. The
record must then equal it in every field the env computes: the prompt and every observation
token, the policy mask, turn boundaries, every reward and reward component, the tool and error
of each turn, terminated/truncated, env id, seed, task id, tokenizer name and env settings.
Only the behaviour log-probs are the policy's own and cannot be recomputed without the model.

An env that consulted an outside service while scoring (an LLM judge) is handed the record first
(``env.unwrapped.load_record(record)``) and re-scores from the calls recorded there.

Actions the env rejected (nothing appended: empty, out-of-vocabulary or not 1-D) are replayed
as an action of the same kind, and an action the env cut at ``max_action_tokens`` is replayed
one token longer so that the env cuts it again.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from agentgym.trajectory import Trajectory

__all__ = ["check_structure", "compare", "replay"]


def check_structure(t: Trajectory) -> str | None:
    """Internal consistency of a record, checked before replaying it (None when fine)."""
    n = len(t.tokens)
    if len(t.policy_mask) != n or len(t.logprobs) != n:
        return (f"the trajectory has {n} tokens but {len(t.policy_mask)} policy-mask entries and "
                f"{len(t.logprobs)} log-probs")
    if not 0 < t.prompt_len <= n:
        return f"prompt_len {t.prompt_len} is outside the token stream (1..{n})"
    pos = t.prompt_len
    for i, turn in enumerate(t.turns):
        if not (turn.action_start == pos <= turn.action_end <= turn.obs_end <= n):
            return (f"turn {i} spans tokens {turn.action_start}..{turn.action_end}..{turn.obs_end}, which does "
                    f"not continue the stream at token {pos} (of {n})")
        pos = turn.obs_end
    if pos != n:
        return f"the turns end at token {pos} but the stream has {n} tokens"
    if not t.turns:
        return "the episode has no turns"
    return None


def _action(t: Trajectory, i: int, vocab_size: int, max_action_tokens: int) -> Any:
    turn = t.turns[i]
    ids = t.tokens[turn.action_start:turn.action_end]
    err = turn.error or ""
    if not ids:  # rejected by the env: reproduce the kind of rejection
        if err.startswith("out_of_vocab"):
            return np.asarray([vocab_size], dtype=np.int64)
        if err.startswith("bad_action"):
            return np.zeros((1, 1), dtype=np.int64)
        return np.asarray([], dtype=np.int64)
    if err.startswith("action_too_long") and len(ids) == max_action_tokens:
        ids = ids + ids[-1:]  # the env keeps the first max_action_tokens: the extra token is dropped again
    return np.asarray(ids, dtype=np.int64)


def replay(env: Any, record: Trajectory, *, seed: int, options: dict[str, Any]) -> tuple[Trajectory, list[str]]:
    """Play ``record``'s actions on ``env`` at ``seed``/``options``; returns the env's own trajectory
    and the problems found on the way (turns after the end, an episode left unfinished)."""
    u = env.unwrapped
    load = getattr(u, "load_record", None)
    if callable(load):  # an env that scored with an outside service (a judge) re-scores from the record
        load(record)
    env.reset(seed=seed, options=options)
    problems: list[str] = []
    done = False
    for i in range(len(record.turns)):
        if done:
            problems.append(f"the record has {len(record.turns)} turns but the environment ended the episode "
                            f"after turn {i - 1}")
            break
        _, _, terminated, truncated, _ = env.step(_action(record, i, u.tokenizer.vocab_size, u.max_action_tokens))
        done = terminated or truncated
    if not done:
        problems.append(f"the record stops after {len(record.turns)} turns but the environment has not ended "
                        "the episode (an unfinished episode)")
    return copy.deepcopy(u.trajectory), problems


def _where(t: Trajectory, i: int) -> str:
    if i < t.prompt_len:
        return f"the prompt (token {i})"
    for k, turn in enumerate(t.turns):
        if i < turn.action_end:
            return f"turn {k}'s action (token {i - turn.action_start} of it)"
        if i < turn.obs_end:
            return f"turn {k}'s observation (token {i - turn.action_end} of it)"
    return f"token {i}, past the end of the stream"


def _snippet(tok: Any, ids: list[int], i: int) -> str:
    try:
        return repr(tok.decode(ids[max(0, i - 8): i + 24]))
    except Exception:  # ids a tampered record made up may not decode
        return repr(ids[max(0, i - 8): i + 24])


def compare(record: Trajectory, truth: Trajectory, tokenizer: Any) -> list[str]:
    """Every way ``record`` differs from the replayed ``truth`` (empty when they agree)."""
    out: list[str] = []
    for name in ("env_id", "seed", "task_id", "tokenizer", "terminated", "truncated", "prompt_len"):
        a, b = getattr(record, name), getattr(truth, name)
        if a != b:
            out.append(f"{name}: recorded {a!r}, replay gives {b!r}")
    if record.tokens != truth.tokens:
        n = min(len(record.tokens), len(truth.tokens))
        i = next((j for j in range(n) if record.tokens[j] != truth.tokens[j]), n)
        out.append(f"tokens differ first in {_where(truth, i)}: recorded {_snippet(tokenizer, record.tokens, i)}, "
                   f"the environment gives {_snippet(tokenizer, truth.tokens, i)} ({len(record.tokens)} recorded "
                   f"tokens, {len(truth.tokens)} replayed): the action or the observation was altered")
    elif record.policy_mask != truth.policy_mask:
        i = next(j for j in range(len(truth.policy_mask)) if record.policy_mask[j] != truth.policy_mask[j])
        out.append(f"policy_mask differs at {_where(truth, i)}: recorded {record.policy_mask[i]}, replay "
                   f"{truth.policy_mask[i]} (tokens the environment wrote are marked as sampled, or back)")
    for k, (a, b) in enumerate(zip(record.turns, truth.turns)):
        for name in ("reward", "components", "tool", "error", "action_start", "action_end", "obs_end"):
            va, vb = getattr(a, name), getattr(b, name)
            if name == "error" and a.action_start == a.action_end and va and vb:
                # A rejected action is not stored; its message may quote the rejected array's shape.
                va, vb = va.split(":")[0], vb.split(":")[0]
            if va != vb:
                out.append(f"turn {k} {name}: recorded {va!r}, replay gives {vb!r}")
    if len(record.turns) != len(truth.turns):
        out.append(f"turns: {len(record.turns)} recorded, the replay has {len(truth.turns)}")
    if record.meta != truth.meta:
        keys = sorted(k for k in set(record.meta) | set(truth.meta) if record.meta.get(k) != truth.meta.get(k))
        out.append(f"env settings (meta) differ in {keys}: recorded "
                   f"{ {k: record.meta.get(k) for k in keys} }, replay { {k: truth.meta.get(k) for k in keys} }")
    return out
