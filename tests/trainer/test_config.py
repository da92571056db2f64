"""The typed config: recipes load, overrides apply, mistakes are rejected with a fix."""

from __future__ import annotations

import pytest

from agentgym.errors import ConfigError
from agentgym.trainer.config import RECIPES_DIR, TrainConfig, config_help, find_recipe, load_config


def test_defaults_validate_and_derive() -> None:
    cfg = load_config()
    d = cfg.derived()
    assert d["episodes_per_step"] == cfg.rollout.tasks_per_step * cfg.rollout.samples_per_task
    assert d["exact_on_policy"] is True


@pytest.mark.parametrize("name", sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))
def test_every_shipped_recipe_loads(name: str) -> None:
    cfg = load_config(name)
    assert isinstance(cfg, TrainConfig)


def test_quickstart_recipe_is_the_multi_turn_tool_task() -> None:
    cfg = load_config("cpu-quickstart")
    assert cfg.env.id == "agentgym/MathCalc-v1" and cfg.model.name == "tiny"
    assert cfg.sft.steps > 0 and cfg.ppo.steps > 0 and cfg.env.prompt == "compact"


def test_overrides_are_typed_and_nested() -> None:
    cfg = load_config("cpu-quickstart", ["ppo.lr=1e-3", "rollout.samples_per_task=8",
                                         "env.kwargs={levels: [easy]}", "correction.lo=0.5",
                                         "log.tensorboard=false"])
    assert cfg.ppo.lr == 1e-3 and isinstance(cfg.ppo.lr, float)
    assert cfg.rollout.samples_per_task == 8
    assert cfg.env.kwargs == {"levels": ["easy"]}
    assert cfg.correction.lo == 0.5 and cfg.log.tensorboard is False


def test_unknown_key_gets_a_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'ppo.lrr'.*did you mean 'ppo.lr'"):
        load_config(None, ["ppo.lrr=1e-3"])
    with pytest.raises(ConfigError, match=r"did you mean 'rollout'"):
        load_config(None, ["rolout.temperature=1.0"])


def test_unknown_key_in_yaml_is_rejected(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "bad.yaml"
    p.write_text("ppo:\n  epochz: 2\n")
    with pytest.raises(ConfigError, match="did you mean 'ppo.epochs'"):
        load_config(p)


@pytest.mark.parametrize("override, pattern", [
    ("ppo.lr=fast", "ppo.lr: expected a number"),
    ("ppo.steps=1.5", "ppo.steps: expected an integer"),
    ("log.plots=maybe", "expected true or false"),
    ("correction.mode=seqtis", r"expected one of .*fix: correction.mode=seq_tis"),
    ("ppo.advantage=critic", "ppo.advantage"),
    ("rollout.temperature=0", "temperature"),
    ("rollout.samples_per_task=1", "samples_per_task >= 2"),
    ("ppo.minibatches=0", "positive"),
    ("ppo=3", "expected a section"),
    ("noequals", "KEY=VALUE"),
    ("ppo.kl_estimator=k1", r"k1 with ppo.kl_in=loss.*zero in expectation.*fix: ppo.kl_estimator=k2"),
    ("ppo.kl_target=0.05", r"ppo.kl_target=0.05 adapts.*got kl_coef=0.0.*fix: e.g. ppo.kl_coef=0.1"),
    ("sft.teacher=orcale", r"sft.teacher: agentgym/MathCalc-v1 declares the teachers \['oracle'\], got 'orcale'; "
                           "fix: sft.teacher=oracle"),
    ("sft.teacher=defect-guesser", r"declares the teachers \['oracle'\], got 'defect-guesser'"),
    ("sft.skip_tool=0.5", r"sft.skip_tool=0.5: an option of the defect teachers.*fix: drop it"),
    ("sft.skip_tool=0.0", None),  # what a run dir saved before they left holds: it still resumes
    ("env.train_options={split: train}", r"fix: env.train_split=train"),
    ("rollout.sync_every=2", r"engine_weights=copy"),
    ("controls=[placebo, rtf]", r"unknown arm 'rtf'.*did you mean 'rft'"),
    ("controls=[ppo]", "not this run's own arm"),
    ("algo=rft", None),
    ("sft.stop_pass_at_k=0.5", "need the held-out check"),
    ("sft.load=somewhere", None),
])
def test_bad_values_say_what_was_expected(override: str, pattern: str | None) -> None:
    if pattern is None:  # valid alone
        load_config(None, [override])
        return
    with pytest.raises(ConfigError, match=pattern):
        load_config(None, [override])


def test_evidence_combinations_are_refused_with_a_fix() -> None:
    with pytest.raises(ConfigError, match="ppo.placebo=true permutes PPO's rewards, but algo=rft"):
        load_config(None, ["algo=rft", "ppo.placebo=true"])
    with pytest.raises(ConfigError, match="fix: sft.steps=0 with sft.load"):
        load_config(None, ["sft.load=somewhere", "sft.steps=10"])
    with pytest.raises(ConfigError, match="engine_weights / engine_dtype are for the hf engine"):
        load_config(None, ["rollout.engine=vllm", "rollout.engine_dtype=bfloat16"])
    with pytest.raises(ConfigError, match="expected kl_target > 0, kl_coef > 0 and kl_in=loss"):
        load_config(None, ["ppo.kl_coef=0.1", "ppo.kl_target=0.05", "ppo.kl_in=reward"])
    assert load_config(None, ["ppo.kl_coef=0.1", "ppo.kl_target=0.05"]).ppo.kl_target == 0.05
    with pytest.raises(ConfigError, match="with ppo.advantage=batch those still carry signal"):
        load_config(None, ["ppo.advantage=batch", "ppo.drop_uniform_groups=true"])
    with pytest.raises(ConfigError, match="cannot be divided by that group's std.*with ppo.group_std_normalize; "
                                          "fix: ppo.advantage=group ppo.group_std_normalize=false"):
        load_config(None, ["ppo.baseline_scale=0.5"])
    with pytest.raises(ConfigError, match=r"GAE \(or prefix\) has no group baseline to scale; got ppo.advantage=gae"):
        load_config(None, ["ppo.baseline_scale=0.5", "ppo.group_std_normalize=false", "ppo.advantage=gae"])
    with pytest.raises(ConfigError, match="no group baseline to scale; got ppo.advantage=prefix"):
        load_config(None, ["ppo.baseline_scale=0.5", "ppo.group_std_normalize=false", "ppo.advantage=prefix"])
    with pytest.raises(ConfigError, match="a KL penalty in the reward would be left out; fix: ppo.kl_in=loss"):
        load_config(None, ["ppo.advantage=prefix", "ppo.kl_coef=0.1", "ppo.kl_in=reward", "ppo.kl_estimator=k1"])
    with pytest.raises(ConfigError, match="ppo.advantage=prefix needs rollout.samples_per_task >= 2"):
        load_config(None, ["ppo.advantage=prefix", "rollout.samples_per_task=1"])
    with pytest.raises(ConfigError, match=r"expected a fraction of the mean score in \[0, 1\], got 1.5"):
        load_config(None, ["ppo.baseline_scale=1.5", "ppo.group_std_normalize=false"])
    assert load_config(None, ["ppo.baseline_scale=0", "ppo.group_std_normalize=false"]).ppo.baseline_scale == 0
    cfg = load_config(None, ["ppo.kl_estimator=k1", "ppo.kl_in=reward"])  # k1 as a reward penalty is fine
    assert cfg.ppo.kl_estimator == "k1"
    cfg = load_config(None, ["rollout.engine_weights=copy", "rollout.sync_every=3", "ppo.kl_estimator=k2"])
    assert cfg.rollout.sync_every == 3 and cfg.arm() == "ppo"
    assert load_config(None, ["ppo.placebo=true"]).arm() == "placebo"
    assert load_config(None, ["algo=sft"]).arm() == "sft"


def test_the_default_teacher_is_the_oracle_and_no_defect_is_in_the_product() -> None:
    import dataclasses

    import agentgym
    from agentgym.trainer.config import SFTConfig

    assert load_config().sft.teacher == "oracle" and load_config("cpu-quickstart").sft.teacher == "oracle"
    # defect teachers are research fixtures (tests/trainer/defect_teachers.py): no built-in env
    # declares one, and the config has no knob of theirs
    assert {t for i in agentgym.registered_ids() for t in agentgym.capabilities(i).teachers} <= {"oracle"}
    assert not {f.name for f in dataclasses.fields(SFTConfig)} & {"skip_tool", "guess_right", "sign_error"}


def test_missing_recipe_suggests_a_shipped_one() -> None:
    with pytest.raises(ConfigError, match="did you mean 'cpu-quickstart'"):
        find_recipe("cpu-quickstar")


def test_help_documents_every_field_once() -> None:
    text = config_help()
    assert "ppo.clip_high=0.28" in text and "Upper clip of the ratio" in text
    keys = [line.split("=")[0].strip() for line in text.splitlines() if not line.startswith("      ")]
    assert len(keys) == len(set(keys))
    # every key has its documentation line right under it
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("      "):
            assert i + 1 < len(lines) and lines[i + 1].startswith("      "), line


def test_env_kwargs_may_not_shadow_env_keys() -> None:
    with pytest.raises(ConfigError, match=r"env.kwargs: \['prompt'\] are env.\* keys of their own; "
                                          r"set them as env.prompt=\.\.\."):
        load_config("cpu-quickstart", ["env.kwargs={prompt: compact}"])
    with pytest.raises(ConfigError, match="env.prompt: expected one of"):
        load_config("cpu-quickstart", ["env.prompt=short"])
