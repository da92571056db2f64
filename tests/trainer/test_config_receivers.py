"""The mapping-valued config keys are checked against what receives them, when the config is read.

``env.kwargs`` against the env's constructor, ``env.train_options`` / ``env.eval_options`` /
``sft.options`` against the reset options the env declares, ``rollout.engine_kwargs`` against the
engine class, ``sft.teacher_kwargs`` against the teacher's factory, ``rollout.ray.init`` against
``ray.init``: a typo is one line that names the key, what is accepted and the closest name; a right
name passes; a receiver that takes anything (another hub's code, vLLM's engine arguments) is not
second-guessed. Values are plain JSON/YAML, finite numbers.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import agentgym
from agentgym.errors import ConfigError
from agentgym.registration import capabilities, constructor_kwargs
from agentgym.trainer.cli import main
from agentgym.trainer.config import load_config

HAS_RAY = importlib.util.find_spec("ray") is not None
RAY = "rollout.backend=ray"

# (recipe, overrides with a typo, the hint the error must give)
TYPOS = [
    ("cpu-quickstart", ["env.kwargs.familes=[arithmetic]"], "did you mean 'env.kwargs.families'?"),
    ("cpu-lookup", ["env.kwargs.dept=2"], "did you mean 'env.kwargs.depth'?"),
    ("cpu-lookup", ["env.train_options.fail_rat=0.1"], "did you mean 'env.train_options.fail_rate'?"),
    ("cpu-lookup", ["env.eval_options.dept=3"], "did you mean 'env.eval_options.depth'?"),
    ("cpu-lookup", ["sft.options.depht=[1]"], "did you mean 'sft.options.depth'?"),
    ("cpu-quickstart", ["env.train_options.levl=easy"], "did you mean 'env.train_options.level'?"),
    ("cpu-quickstart", ["rollout.engine_kwargs.max_batch_sise=8"],
     "did you mean 'rollout.engine_kwargs.max_batch_size'?"),
    ("cpu-quickstart", ["rollout.engine=openai-http", "rollout.engine_kwargs.base_ur=http://127.0.0.1:1"],
     "did you mean 'rollout.engine_kwargs.base_url'?"),
    ("cpu-quickstart", ["sft.teacher=defect-guesser", "sft.teacher_kwargs.skip_tol=0.5"],
     "did you mean 'sft.teacher_kwargs.skip_tool'?"),
    ("cpu-quickstart", ["curriculum.levels=[easy,medium]", "curriculum.option=levle"],
     "did you mean curriculum.option=level?"),
    pytest.param("cpu-quickstart", [RAY, "rollout.ray.init={num_cpu: 2}"], "did you mean 'rollout.ray.init.num_cpus'?",
                 marks=pytest.mark.skipif(not HAS_RAY, reason="ray.init's arguments need Ray")),
]

# (recipe, overrides naming only what the receiver takes)
VALID = [
    ("cpu-quickstart", ["env.kwargs.families=[arithmetic]", "env.kwargs.max_episode_steps=8"]),
    ("cpu-lookup", ["env.kwargs.depth=2", "env.train_options.fail_rate=0.1", "env.eval_options.index=3",
                    "sft.options.depth=[1]"]),
    ("cpu-quickstart", ["env.train_options.level=easy", "env.eval_options.family=arithmetic"]),
    ("cpu-quickstart", ["rollout.engine_kwargs.max_batch_size=8"]),
    ("cpu-quickstart", ["rollout.engine=openai-http", "rollout.engine_kwargs={base_url: 'http://127.0.0.1:1', timeout: 5}"]),
    ("cpu-quickstart", ["rollout.engine=vllm", "rollout.engine_kwargs.enable_prefix_caching=true"]),  # **llm_kwargs
    ("cpu-quickstart", ["sft.teacher=defect-guesser", "sft.teacher_kwargs.skip_tool=0.5"]),
    ("cpu-quickstart", ["curriculum.levels=[easy,medium]"]),
    pytest.param("cpu-quickstart", [RAY, "rollout.ray.init={num_cpus: 2, _temp_dir: /tmp/agentgym-ray}"],
                 marks=pytest.mark.skipif(not HAS_RAY, reason="ray.init's arguments need Ray")),
]


@pytest.mark.parametrize("recipe, overrides, hint", TYPOS)
def test_a_misspelt_key_of_a_mapping_is_refused_with_the_closest_name(
        recipe: str, overrides: list[str], hint: str, defect_teachers: None) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(recipe, overrides)
    msg = str(e.value)
    key = hint.split("'")[1].rsplit(".", 1)[0] if "'" in hint else "curriculum.option"
    assert hint in msg and key in msg and "\n" not in msg, msg
    assert "expected one of" in msg  # what is accepted


@pytest.mark.parametrize("recipe, overrides", VALID)
def test_the_names_a_receiver_takes_pass(recipe: str, overrides: list[str], defect_teachers: None) -> None:
    load_config(recipe, overrides)


def test_the_dry_run_refuses_a_misspelt_option_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = f"log.run_dir={tmp_path / 'run'}"
    for mode in (["--dry-run"], ["--print-config"], []):
        assert main([*mode, "--config", "cpu-lookup", "sft.options.depht=[1]", run]) == 2
        err = capsys.readouterr().err
        assert "did you mean 'sft.options.depth'?" in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_teacher_without_options_takes_none() -> None:
    with pytest.raises(ConfigError, match=r"sft.teacher_kwargs.skip_tool: .*it takes none"):
        load_config("cpu-quickstart", ["sft.teacher_kwargs.skip_tool=0.5"])


def test_the_engine_arguments_the_trainer_sets_are_not_the_users() -> None:
    with pytest.raises(ConfigError, match=r"rollout.engine_kwargs.pad_id: .*expected one of"):
        load_config("cpu-quickstart", ["rollout.engine_kwargs.pad_id=3"])


def test_the_split_goes_in_its_own_keys() -> None:
    with pytest.raises(ConfigError, match="env.train_split and env.eval_split"):
        load_config("cpu-quickstart", ["env.kwargs.split=eval"])
    load_config("cpu-quickstart", ["env.kwargs.split=eval", "env.train_split=null", "env.eval_split=null",
                                   "env.exclude_held_out=true"])


@pytest.mark.parametrize("override, needle", [
    ("env.kwargs.when=2024-01-01", "env.kwargs.when: expected a string, number, true/false, null, list or mapping, got date"),
    ("env.kwargs.config={rate: .nan}", "env.kwargs.config.rate: expected a finite number, got nan"),
    ("env.train_options.depth=[1, .inf]", "env.train_options.depth[1]: expected a finite number"),
    ("sft.options={depth: !!set {1: null}}", "sft.options.depth: expected a string, number"),
    ("env.kwargs={1: 2}", "env.kwargs: expected names (strings) as keys"),
])
def test_mapping_values_are_plain_json_and_yaml(override: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config("cpu-lookup", [override])
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_an_override_into_a_mapping_keeps_its_other_entries() -> None:
    cfg = load_config("cpu-lookup", ["sft.options.depth=[1]", "model.tiny.hidden_size=32",
                                     "model.tiny.num_hidden_layers=1"])
    assert cfg.sft.options == {"depth": [1], "fail_rate": 0.0}  # the recipe's fail_rate stays
    assert cfg.model.tiny["hidden_size"] == 32 and cfg.model.tiny["num_hidden_layers"] == 1
    assert load_config("cpu-lookup", ["sft.options={depth: [1]}"]).sft.options == {"depth": [1]}  # replaced


def test_the_declared_reset_options_are_the_ones_the_envs_read() -> None:
    from agentgym.environments.math.env import OPTION_KEYS

    for env_id in ("agentgym/Math-v1", "agentgym/MathCalc-v1", "agentgym/MathTool-v1"):
        assert set(capabilities(env_id).reset_options or ()) == set(OPTION_KEYS)
    env = gym.make("agentgym/Lookup-v1")
    try:
        for name in capabilities("agentgym/Lookup-v1").reset_options or ():
            value = {"depth": 2, "fail_rate": 0.0, "split": "eval", "index": 1, "fault_seed": 3}[name]
            env.reset(seed=0, options={name: value})  # each declared option is read
        with pytest.raises(ConfigError, match="unknown option"):
            env.reset(seed=0, options={"depht": 2})
    finally:
        env.close()


class _OpenEnv(gym.Env):  # type: ignore[type-arg]
    """A user env whose constructor passes its keywords on: any name goes."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_receivers_that_take_anything_are_not_second_guessed() -> None:
    agentgym.register("cfgtest/Open-v0", entry_point=f"{__name__}:_OpenEnv")
    assert constructor_kwargs("cfgtest/Open-v0") is None and capabilities("cfgtest/Open-v0").reset_options is None
    load_config("cpu-quickstart", ["env.id=cfgtest/Open-v0", "env.kwargs.anything=1", "env.train_options.any=2",
                                   "env.train_split=null", "env.eval_split=null", "env.exclude_held_out=true",
                                   "sft.steps=0"])
    # the interop envs: the hub's own configuration goes through as it is; OpenEnv's reset options
    # are the server's; ReasoningGym's constructor is agentgym's, so a typo there is still caught
    load_config("cpu-quickstart", ["env.id=agentgym/OpenEnv-v0", "env.kwargs.url=http://127.0.0.1:1",
                                   "env.train_options.difficulty=3", "env.train_split=null", "env.eval_split=null",
                                   "env.exclude_held_out=true", "sft.steps=0"])
    load_config("cpu-quickstart", ["env.id=agentgym/ReasoningGym-v0", "env.kwargs.dataset=leg_counting",
                                   "env.kwargs.config={min_animals: 1, anything: [1, 2]}", "sft.steps=0"])
    with pytest.raises(ConfigError, match="did you mean 'env.kwargs.dataset'"):
        load_config("cpu-quickstart", ["env.id=agentgym/ReasoningGym-v0", "env.kwargs.datset=leg_counting",
                                       "sft.steps=0"])
