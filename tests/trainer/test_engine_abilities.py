"""Every engine declares its optional abilities (sleep, routing, collective calls, a visible
model, sync reports); wrappers report their inner engine's; the trainer reads the declaration
and refuses what an engine lacks with a ConfigError."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

import agentgym  # noqa: F401  (registers the environments)
from agentgym.errors import ConfigError
from agentgym.trainer.config import load_config
from agentgym.trainer.distributed import DistInfo
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.model.routing import engine_routing
from agentgym.trainer.rollout import tp_collector
from agentgym.trainer.rollout.engines.base import EngineAbilities, Sample, engine_abilities
from agentgym.trainer.rollout.engines.hf import HFEngine
from agentgym.trainer.rollout.engines.openai_http import OpenAIHTTPEngine
from agentgym.trainer.rollout.engines.replay import ReplayEngine
from agentgym.trainer.rollout.engines.vllm import VLLMEngine
from agentgym.trainer.rollout.staleness import VersionedEngine
from agentgym.trainer.rollout.tp_collector import GroupEngine

SMALL = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "controls=[]",
         "log.eval_every=0", "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16",
         "rollout.tasks_per_step=2", "rollout.samples_per_task=2", "log.eval_episodes=8", "ppo.steps=1",
         "log.eval_episodes_final=0", "sft.check_every=0", "sft.stop_pass_at_k=null", "sft.stop_pass_at_1=null"]


class PlainEngine:
    """An engine that declares nothing: generate, sync_weights and close only."""

    def __init__(self) -> None:
        self.model = build_tiny_gptoss(264, seed=0)  # a model attribute alone declares nothing

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 stop_ids: Sequence[int], seed: int | None = None) -> list[Sample]:
        return [Sample([1], [0.0], "stop") for _ in prompts]

    def sync_weights(self, model: torch.nn.Module) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def moe() -> torch.nn.Module:
    return build_tiny_gptoss(264, seed=0)


def _vllm(in_process: bool) -> VLLMEngine:
    """A VLLMEngine as its constructor leaves ``in_process`` (vLLM itself is not started: the
    abilities depend on that flag alone; tests/trainer/test_vllm.py runs the real engine)."""
    eng = object.__new__(VLLMEngine)
    eng.in_process = in_process
    return eng


def test_each_engine_declares_what_it_has(moe: torch.nn.Module) -> None:
    hf = HFEngine(moe)
    assert engine_abilities(hf) == EngineAbilities(model=moe) and engine_abilities(hf).model is hf.model
    http = OpenAIHTTPEngine("http://127.0.0.1:1", transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    assert engine_abilities(http) == EngineAbilities()  # its `model` is the served name, not a module
    http.close()
    assert engine_abilities(ReplayEngine({}, [0])) == EngineAbilities()
    assert engine_abilities(_vllm(False)) == EngineAbilities(sleeps=True, routing=True, reports_sync=True)
    assert engine_abilities(_vllm(True)).collective  # external_launcher: one engine over the ranks


def test_an_engine_that_declares_nothing_has_nothing() -> None:
    assert engine_abilities(PlainEngine()) == EngineAbilities()


def test_a_wrong_declaration_is_a_config_error() -> None:
    class Odd(PlainEngine):
        abilities = {"sleeps": True}

    with pytest.raises(ConfigError, match=r"Odd.abilities must be an EngineAbilities, got dict; fix: declare"):
        engine_abilities(Odd())


def test_versioned_engine_reports_its_inner_engines_abilities(moe: torch.nn.Module) -> None:
    assert engine_abilities(VersionedEngine(HFEngine(moe))).model is moe
    assert engine_abilities(VersionedEngine(_vllm(False))) == engine_abilities(_vllm(False))
    assert engine_abilities(VersionedEngine(PlainEngine())) == EngineAbilities()


def test_group_engine_reports_its_inner_engines_abilities(moe: torch.nn.Module, tmp_path: Path) -> None:
    """A GroupEngine always has a routing method (it mirrors the call), yet around hf it does
    not claim vLLM's routing: it reports what the engine inside has."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        info = DistInfo(rank=0, world=1, local_rank=0, device=torch.device("cpu"), rollout_tp=1)
        around_hf = GroupEngine(HFEngine(moe), info, mirror=False)
        assert engine_abilities(around_hf) == EngineAbilities(model=moe)
        assert not engine_abilities(around_hf).routing and hasattr(around_hf, "routing")
        assert engine_abilities(GroupEngine(_vllm(True), info)) == EngineAbilities(
            sleeps=True, routing=True, collective=True, reports_sync=True)
        assert engine_abilities(GroupEngine(PlainEngine(), info)) == EngineAbilities()
    finally:
        tp_collector._GROUPS.clear()  # its groups belong to the process group destroyed here
        dist.destroy_process_group()


def test_routing_comes_from_the_declared_model_and_not_from_an_undeclared_one(moe: torch.nn.Module) -> None:
    seqs = [[1, 2, 3], [4, 5]]
    routes = engine_routing(HFEngine(moe), seqs)
    assert [r.shape[1] for r in routes] == [3, 2]
    with pytest.raises(ConfigError, match=r"routing replay needs an engine whose experts can be observed .* "
                                          r"got PlainEngine.*set rollout.routing_replay=false"):
        engine_routing(PlainEngine(), seqs)
    http = OpenAIHTTPEngine("http://127.0.0.1:1", transport=httpx.MockTransport(lambda r: httpx.Response(500)))
    with pytest.raises(ConfigError, match=r"got OpenAIHTTPEngine: a server's routing is not visible"):
        engine_routing(http, seqs)  # its `model` is a name: a clear refusal, not an AttributeError
    http.close()


def test_sleep_needs_an_engine_that_declares_it(tmp_path: Path) -> None:
    from agentgym.trainer.episodes import Rollouts
    from agentgym.trainer.learner import Learner

    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}", "rollout.sleep_level=1"])
    with pytest.raises(ConfigError, match=r"rollout.sleep_level=1: the hf engine cannot sleep \(PlainEngine "
                                          r"declares no sleep/wake_up.*set rollout.sleep_level=0"):
        Rollouts(cfg, Learner(cfg), engine=PlainEngine())


def test_sync_reports_come_only_from_an_engine_that_declares_them(tmp_path: Path) -> None:
    from agentgym.trainer.episodes import Rollouts
    from agentgym.trainer.learner import Learner

    class Reporting(PlainEngine):
        abilities = EngineAbilities(reports_sync=True)
        last_sync: dict[str, Any] = {"seconds": 0.5, "bytes": 2.0 * 2**20}

    class Undeclared(PlainEngine):
        last_sync: dict[str, Any] = {"seconds": 0.5, "bytes": 2.0 * 2**20}

    cfg = load_config("cpu-quickstart", [*SMALL, f"log.run_dir={tmp_path}"])
    learner = Learner(cfg)
    rollouts = Rollouts(cfg, learner, engine=Reporting())
    assert rollouts.sync(1) == {"t_sync": 0.5, "sync_mb": 2.0}
    rollouts.close()
    rollouts = Rollouts(cfg, learner, engine=Undeclared())
    assert rollouts.sync(1) == {}
    rollouts.close()
