"""Small verifiers (v1) tasksets written with verifiers' own classes, for the interop tests."""

from __future__ import annotations

import verifiers.v1 as vf


class AddData(vf.TaskData):
    answer: str


class AddTask(vf.Task[AddData]):
    @vf.reward
    async def exact(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)

    @vf.reward(weight=0.0)
    async def brief(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply) < 5)


class Numbers(vf.Toolset[vf.SharedToolsetConfig]):
    @vf.tool
    async def double(self, n: int) -> str:
        """Double a number."""
        return str(2 * n)


class AddTaskset(vf.Taskset[AddTask, vf.TasksetConfig]):
    def load(self) -> list[AddTask]:
        return [AddTask(AddData(prompt=f"What is {i} + {i}?", system_prompt="Add the numbers.", answer=str(2 * i)),
                        self.config.task) for i in range(6)]

    @classmethod
    def toolsets(cls, config: vf.TasksetConfig) -> list[vf.Toolset]:
        return [Numbers(vf.SharedToolsetConfig())]


def add_taskset() -> AddTaskset:
    return AddTaskset(vf.TasksetConfig())


class EvalTask(vf.Task[AddData]):
    """A careless reward that evaluates the answer (what a hub's scorer may do)."""

    @vf.reward
    async def evaluated(self, trace: vf.Trace) -> float:
        try:
            return float(eval(trace.last_reply) == int(self.data.answer))  # noqa: S307
        except Exception:
            return 0.0


class EvalTaskset(vf.Taskset[EvalTask, vf.TasksetConfig]):
    def load(self) -> list[EvalTask]:
        return [EvalTask(AddData(prompt=f"What is {i} + {i}?", answer=str(2 * i)), self.config.task) for i in range(4)]


def eval_taskset() -> EvalTaskset:
    return EvalTaskset(vf.TasksetConfig())
