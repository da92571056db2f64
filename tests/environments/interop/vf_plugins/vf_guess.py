"""A multi-turn verifiers (v1) environment written with verifiers' own classes: the env's code
plays the user (``higher`` / ``lower``), as verifiers' TextArena env does. A verifiers plugin: the
taskset id ``vf-guess`` is this top-level module (the interop tests put its folder on sys.path)."""

from __future__ import annotations

import verifiers.v1 as vf

__all__ = ["GuessEnv", "GuessTaskset"]


class GuessData(vf.TaskData):
    answer: str


class GuessTask(vf.Task[GuessData]):
    @vf.reward
    async def solved(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)


class GuessTaskset(vf.Taskset[GuessTask, vf.TasksetConfig]):
    def load(self) -> list[GuessTask]:
        return [GuessTask(GuessData(prompt="I am thinking of a number from 1 to 9. Guess it.",
                                    system_prompt="Reply with one number.", answer=str(n)), self.config.task)
                for n in (3, 7, 5, 1, 9)]


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    max_guesses: int = 3


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        secret = int(task.data.answer)
        async with agents.player.interaction(task) as chat:
            segment = await chat.turn()
            for _ in range(self.config.max_guesses - 1):
                reply = segment.last_reply
                if segment.terminated or reply == task.data.answer:
                    break
                hint = ("higher" if int(reply) < secret else "lower") if reply.isdigit() else "a number, please"
                segment = await chat.turn(hint)
        chat.trace.record_metric("guesses", float(chat.trace.num_turns))
