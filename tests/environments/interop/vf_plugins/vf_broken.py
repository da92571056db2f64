"""A verifiers (v1) env whose run() fails after the policy's first answer (taskset id ``vf-broken``)."""

from __future__ import annotations

import verifiers.v1 as vf
from vf_guess import GuessTaskset

__all__ = ["BrokenEnv", "BrokenTaskset"]


class BrokenTaskset(GuessTaskset):
    pass


class BrokenEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class BrokenEnv(vf.Env[BrokenEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as chat:
            await chat.turn()
            raise ConnectionError("the game server went away")
