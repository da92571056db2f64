"""EnvPool: seeds must match the pool, and one env's failure keeps the others' results."""

from __future__ import annotations

import numpy as np
import pytest

from agentgym import ConfigError, EnvPool, ToolResult
from agentgym.errors import PoolStepError

from .toy import EchoEnv


def test_reset_with_fewer_seeds_than_envs_is_an_error() -> None:
    with EnvPool(EchoEnv, n=4) as pool:
        with pytest.raises(ConfigError, match="4 environments"):
            pool.reset(seeds=[1])
        with pytest.raises(ConfigError, match="4 environments"):
            pool.reset(seeds=range(5))
        assert len(pool.reset(seeds=range(4))) == 4


class Fragile(EchoEnv):
    def score_final(self, answer: str) -> ToolResult:
        if answer == "boom":
            raise RuntimeError("grader crashed")
        return super().score_final(answer)


def test_one_env_raising_keeps_the_results_of_the_others() -> None:
    with EnvPool(Fragile, n=4) as pool:
        pool.reset(seeds=range(4))
        actions = {i: np.array(e.codec.final_ids("boom" if i == 2 else e.task.answer))
                   for i, e in enumerate(pool.envs)}
        with pytest.raises(PoolStepError, match="1 of 4") as err:
            pool.step(actions)
        exc = err.value
        assert sorted(exc.results) == [0, 1, 3] and list(exc.errors) == [2]
        assert isinstance(exc.errors[2], RuntimeError)
        assert all(r.done and r.reward == 1.0 for r in exc.results.values())
        # the failed env recorded nothing of that turn; the others recorded theirs
        assert [len(e.trajectory.turns) for e in pool.envs] == [1, 1, 0, 1]
        # and the failed env can still be stepped
        r = pool.step({2: np.array(pool.envs[2].codec.final_ids(pool.envs[2].task.answer))})
        assert r[2].reward == 1.0


def test_the_pool_error_survives_pickling() -> None:
    # Ray ships a worker's exception to the driver by pickling it
    import pickle

    with EnvPool(Fragile, n=2) as pool:
        pool.reset(seeds=range(2))
        with pytest.raises(PoolStepError) as err:
            pool.step({i: np.array(e.codec.final_ids("boom" if i else e.task.answer)) for i, e in enumerate(pool.envs)})
    back = pickle.loads(pickle.dumps(err.value))
    assert type(back) is PoolStepError and str(back) == str(err.value)
    assert list(back.results) == [0] and isinstance(back.errors[1], RuntimeError) and back.total == 2
