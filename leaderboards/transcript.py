"""Readable transcripts of episodes for the web board: messages, tool calls and results, rewards.

A trajectory is cut at its turn boundaries; every piece is split into Harmony messages by the
codec's own parser (token level, so a model that *writes* ``<|end|>`` as text cannot forge a
message boundary). The system and developer messages, identical across the episodes of one env
setting, are stored once per env.
"""

from __future__ import annotations

from typing import Any

from agentgym.harmony import HarmonyCodec, Message
from agentgym.trajectory import Trajectory

__all__ = ["episode_transcript", "messages_of"]


def _msg(m: Message) -> dict[str, Any]:
    return {"role": m.role, "channel": m.channel, "recipient": m.recipient, "content": m.content, "end": m.end}


def messages_of(codec: HarmonyCodec, ids: list[int]) -> list[dict[str, Any]]:
    """The complete messages in a prompt or observation (a dangling generation prompt is dropped)."""
    i = 0
    while i < len(ids) and ids[i] == codec.END:  # the env closing a cut-off action
        i += 1
    if i < len(ids) and ids[i] == codec.START:
        i += 1
    if i >= len(ids):
        return []
    return [_msg(m) for m in codec.parse(ids[i:], role="").messages]


def episode_transcript(codec: HarmonyCodec, traj: Trajectory, shared: list[dict[str, Any]] | None
                       ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(prompt messages, transcript)``; the prompt's system/developer messages are left out of the
    transcript when they equal ``shared`` (then ``transcript["shared_prefix"]`` is true)."""
    prompt = messages_of(codec, traj.tokens[: traj.prompt_len])
    head = [m for m in prompt if m["role"] in ("system", "developer")]
    rest = [m for m in prompt if m["role"] not in ("system", "developer")]
    use_shared = shared is not None and head == shared
    sparse = traj.meta.get("reward_mode") == "sparse"
    turns = []
    for k, t in enumerate(traj.turns):
        action = traj.tokens[t.action_start:t.action_end]
        parsed = codec.parse(action) if action else None
        turns.append({
            "turn": k,
            "action": [_msg(m) for m in parsed.messages] if parsed else [],
            "tool_call": ({"name": parsed.tool_call.name, "arguments": parsed.tool_call.arguments,
                           "raw": parsed.tool_call.raw} if parsed and parsed.tool_call else None),
            "final": parsed.final if parsed else None,
            "parse_errors": [str(e) for e in parsed.errors] if parsed else [],
            "action_tokens": t.action_end - t.action_start,
            "observation": messages_of(codec, traj.tokens[t.action_end:t.obs_end]),
            "reward": t.reward, "components": t.components, "tool": t.tool, "error": t.error,
            # What was paid, when the record alone tells: in sparse mode the outcome only (the
            # other components are indicators and counts); shaped weights live in the env.
            "paid": {"outcome": t.reward} if sparse else None,
        })
    return head, {"task_id": traj.task_id, "seed": traj.seed, "prompt": rest if use_shared else prompt,
                  "shared_prefix": use_shared, "turns": turns, "terminated": traj.terminated,
                  "truncated": traj.truncated}
