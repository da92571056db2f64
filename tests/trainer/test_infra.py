"""Infrastructure faults are masked from the PPO update and from evaluations, and counted.

The faults here come from an env whose reset or first step meets an InfraError for some task
seeds (as a container that cannot start, or a sandbox killed mid-episode, would; those real
faults are tested against Docker and the WebAPI server in tests/environments). What is tested
here is the trainer's side: such episodes never reach the batch, and the metrics count them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from agentgym.environments.math.calc import MathCalcEnv
from agentgym.errors import InfraError, SandboxLost, SandboxStartFailed
from agentgym.trainer import episodes as batching_module  # where the step builds its batch
from agentgym.trainer.config import load_config
from agentgym.trainer.episodes import TRAIN_SEED_BASE
from agentgym.trainer.rollout.collector import drop_infra
from agentgym.trainer.train import Trainer

ENV_ID = "agentgym-test/FlakyCalc-v0"


class FlakyCalcEnv(MathCalcEnv):
    """MathCalc where a training seed % 4 == 1 cannot start and any seed % 4 == 2 loses its sandbox
    at its first tool call. (Resets of evaluation seeds always work: the trainer probes them for
    the held-out problems before the run.)"""

    def on_reset(self) -> None:
        super().on_reset()
        if self.trajectory_seed % 4 == 1 and self.trajectory_seed >= TRAIN_SEED_BASE:
            raise SandboxStartFailed("could not start a sandbox container: engine busy")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.trajectory_seed = seed or 0
        return super().reset(seed=seed, options=options)

    def _dispatch(self, *args: Any, **kwargs: Any) -> Any:
        if self.trajectory_seed % 4 == 2:
            raise SandboxLost("the episode's sandbox died")
        return super()._dispatch(*args, **kwargs)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=FlakyCalcEnv, disable_env_checker=True, order_enforce=False)

SMALL = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
         "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16", f"env.id={ENV_ID}",
         "rollout.tasks_per_step=4", "rollout.samples_per_task=2", "log.eval_episodes=8", "env.eval_options={}",
         "env.exclude_held_out=false", "log.eval_seed_start=0"]  # evaluation seeds below TRAIN_SEED_BASE


def test_infra_episodes_never_reach_the_update_and_are_counted(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    assert [(TRAIN_SEED_BASE + i) % 4 for i in range(4)] == [0, 1, 2, 3]  # 2 of 4 tasks fail, x2 samples
    batched: list[Any] = []
    real = batching_module.make_batch

    def spy(trajs: Any, groups: Any, **kw: Any) -> Any:
        batched.append(list(trajs))
        return real(trajs, groups, **kw)

    monkeypatch.setattr(batching_module, "make_batch", spy)
    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "ppo.steps=1"])
    trainer = Trainer(cfg)
    try:
        m = trainer.train_step(0)
        assert m["episodes_infra"] == 4.0
        (trajs,) = batched
        assert len(trajs) == 4 and all(t.infra_error is None for t in trajs)
        assert {t.traj.seed % 4 for t in trajs} == {0, 3}
        lost = sum(1 for seed in trainer.rollouts.held.eval_seeds(8) if seed % 4 == 2)
        assert lost > 0
        e = trainer._evaluate("ppo")
        assert e["episodes"] == 8 - lost and e["episodes_infra"] == float(lost)  # success: real outcomes only
    finally:
        trainer.close()


def test_a_step_where_every_episode_is_lost_stops_the_run_with_the_fault() -> None:
    from agentgym.trainer.algo.episode import Episode
    from agentgym.trajectory import Trajectory

    lost = [Episode(Trajectory("x", i, "t", "byte"), [], infra_error="SandboxLost: gone") for i in range(3)]
    with pytest.raises(InfraError, match="every one of the 3 episodes.*SandboxLost: gone"):
        drop_infra(lost, [0, 1, 2])
    ok = Episode(Trajectory("x", 9, "t", "byte"), [])
    assert drop_infra([*lost, ok], [0, 1, 2, 3]) == ([ok], [3], 3)


def test_an_engine_that_times_out_loses_the_episodes_in_flight_as_infra_faults() -> None:
    """A real socket that accepts and never answers: the openai-http engine times out, and the
    collector records the episodes it was sampling as infrastructure faults (no outcome)."""
    import socket
    import threading

    from agentgym.trainer.rollout.collector import Collector
    from agentgym.trainer.rollout.engines.openai_http import OpenAIHTTPEngine

    deaf = socket.socket()
    deaf.bind(("127.0.0.1", 0))
    deaf.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        deaf.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(deaf.accept()[0])  # read nothing, answer nothing
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    engine = OpenAIHTTPEngine(f"http://127.0.0.1:{deaf.getsockname()[1]}", timeout=0.5)
    col = Collector.from_factory(lambda: gym.make("agentgym/MathCalc-v1"), 2, engine, max_new_tokens=8)
    try:
        trajs, _ = col.collect([0, 1], temperature=1.0, sample_seed=None)
        assert [t.infra_error is not None and t.infra_error.startswith("ServiceLost: request to") for t in trajs] == \
            [True, True]
        assert all(len(t.traj.turns) == 0 and t.traj.prompt_len > 0 for t in trajs)  # the prompts, no outcome
        with pytest.raises(InfraError, match="every one of the 2 episodes"):
            drop_infra(trajs, [0, 1])
    finally:
        col.close()
        engine.close()
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        deaf.close()
