from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest

import agentgym
from agentgym import EnvPool, TextWrapper

from .toy import EchoEnv


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120).stdout.strip()


def test_import_is_light() -> None:
    assert _run("import sys, agentgym; print('torch' in sys.modules, 'sympy' in sys.modules)") == "False False"


def test_make_with_module_prefix_needs_no_import() -> None:
    out = _run("import gymnasium as gym; e = gym.make('agentgym:agentgym/Math-v1'); "
               "print(type(e.unwrapped).__name__)")
    assert out == "MathEnv"


def test_builtin_ids_are_registered_and_versioned() -> None:
    ids = agentgym.registered_ids()
    for name in ("Math-v1", "MathCalc-v1", "MathTool-v1", "CodeFix-v1", "WebAPI-v1"):
        assert f"agentgym/{name}" in ids


@pytest.mark.filterwarnings("ignore:.*is out of date")
@pytest.mark.parametrize("name", ["Math", "MathCalc", "MathTool", "CodeFix", "WebAPI"])
def test_an_old_version_names_the_new_one(name: str) -> None:
    """v0 scored answers by equivalence alone (an echoed question earned 1), refusals by their
    wording, and the CodeFix judge outside the budget: its ids are gone, and say what replaced them."""
    assert f"agentgym/{name}-v0" not in gym.registry
    with pytest.raises(gym.error.DeprecatedEnv, match=f"Please use `agentgym/{name}-v1` instead"):
        gym.make(f"agentgym/{name}-v0")


def test_unknown_id_suggests_a_close_match() -> None:
    with pytest.raises(gym.error.Error, match="Math"):
        gym.make("agentgym/Mathh-v0")


@pytest.mark.parametrize("env_id", ["agentgym/Math-v1", "agentgym/MathCalc-v1", "agentgym/MathTool-v1"])
def test_step_before_reset_through_gym_make_raises_agentgyms_own_error(env_id: str) -> None:
    env = gym.make(env_id)
    with pytest.raises(agentgym.EnvStateError, match="call reset"):
        env.step(np.array([1, 2, 3]))
    env.close()


def test_a_constructor_typo_through_gym_make_names_the_env_and_suggests() -> None:
    with pytest.raises(agentgym.ConfigError, match=r"MathEnv got unknown keyword argument\(s\) 'famlies' "
                                                   r"\(did you mean 'families'\?\)"):
        gym.make("agentgym/Math-v1", famlies=["arithmetic"])
    with pytest.raises(agentgym.ConfigError, match=r"unknown family 'arithmetc'; did you mean 'arithmetic'"):
        gym.make("agentgym/Math-v1", families=["arithmetc"])


def test_register_rejects_ids_outside_the_namespace() -> None:
    with pytest.raises(agentgym.ConfigError, match="namespace"):
        agentgym.register("Echo-v0", "x:y")


def test_public_surface_is_pinned() -> None:
    assert set(agentgym.__all__) == {
        "ActionTypeError", "AgentGymError", "ByteTokenizer", "Capabilities", "ChatWrapper", "CheckpointError", "ConfigError", "DatasetError", "EnvPool",
        "EnvStateError", "HFTokenizer", "HarmonyCodec", "InfraError", "Message", "NonFiniteError", "ParsedAction",
        "SandboxError", "SandboxStateError", "SandboxUnavailable", "ServiceError", "StepResult",
        "SubmissionError", "Task", "TextWrapper", "TokenizerError", "Tool", "ToolCall", "ToolEnv",
        "ToolResult", "Tokenizer", "TrainerError", "Trajectory", "Turn", "__version__", "as_tokenizer",
        "capabilities", "read_jsonl", "register", "registered_ids", "write_jsonl"}
    for name in agentgym.__all__:
        assert hasattr(agentgym, name)
    assert issubclass(agentgym.ConfigError, agentgym.AgentGymError)


def test_env_pool_steps_many_envs_concurrently() -> None:
    with EnvPool(EchoEnv, n=8) as pool:
        first = pool.reset(seeds=range(8))
        assert len(first) == 8
        actions = {i: np.array(e.codec.final_ids(e.task.answer)) for i, e in enumerate(pool.envs)}
        results = pool.step(actions)
        assert sorted(results) == list(range(8))
        assert all(r.done and r.reward == 1.0 for r in results.values())


def test_text_wrapper_speaks_strings_over_the_token_api() -> None:
    env = TextWrapper(EchoEnv())
    obs, _ = env.reset(seed=2)
    assert obs.startswith("<|start|>system") and obs.endswith("<|start|>assistant")
    word = env.unwrapped.task.prompt.split()[-1]
    obs, r, term, _, _ = env.step(
        f'<|channel|>commentary to=functions.echo <|constrain|>json<|message|>{{"word": "{word}"}}<|call|>')
    assert word.upper() in obs and not term
    _, r, term, _, _ = env.step(f"<|channel|>final<|message|>{word.upper()}<|return|>")
    assert term and r == 1.0
    # the record is still the token stream
    assert env.unwrapped.trajectory.num_policy_tokens > 0


@pytest.fixture(autouse=True)
def _forget_test_ids() -> Iterator[None]:
    """Ids a test registers are removed again: registered_ids() is global state other tests read."""
    from agentgym import registration

    before = set(gym.registry)
    yield
    for env_id in set(gym.registry) - before:
        del gym.registry[env_id]
        registration._REGISTERED.pop(env_id, None)
        registration._CAPABILITIES.pop(env_id, None)


def test_register_accepts_a_users_own_namespace() -> None:
    agentgym.register("myorg/Echo-v0", "tests.agentgym.toy:EchoEnv")
    env = gym.make("myorg/Echo-v0")
    assert type(env.unwrapped).__name__ == "EchoEnv" and env.unwrapped.env_id == "myorg/Echo-v0"
    assert "myorg/Echo-v0" in agentgym.registered_ids()
    env.close()


def test_register_without_a_version_is_refused() -> None:
    with pytest.raises(agentgym.ConfigError, match="-v0"):
        agentgym.register("myorg/Echo", "tests.agentgym.toy:EchoEnv")


def test_re_registering_an_id_same_entry_point_is_a_no_op_another_is_an_error() -> None:
    agentgym.register("myorg/Twice-v0", "tests.agentgym.toy:EchoEnv")
    agentgym.register("myorg/Twice-v0", "tests.agentgym.toy:EchoEnv")  # same: fine
    with pytest.raises(agentgym.ConfigError, match="already registered"):
        agentgym.register("myorg/Twice-v0", "tests.agentgym.test_env_contract:DescribedEnv")
    with pytest.raises(agentgym.ConfigError, match="already registered"):
        agentgym.register("agentgym/Math-v1", "my_module:MyMath")


def test_capabilities_are_declared_at_registration_and_agree_with_the_env_class() -> None:
    from agentgym.oracles import load_callable
    from agentgym.registration import _REGISTERED

    for env_id, entry in _REGISTERED.items():
        caps = agentgym.capabilities(env_id)
        cls = load_callable(entry, "entry point")
        assert caps.splits == tuple(getattr(cls, "splits", ())), env_id
        for spec in [caps.oracle, *caps.teachers.values()]:
            if spec is not None:
                assert callable(load_callable(spec)), (env_id, spec)
    assert agentgym.capabilities("agentgym/CodeFix-v1").sandbox and not agentgym.capabilities("agentgym/Math-v1").sandbox
    webapi = agentgym.capabilities("agentgym/WebAPI-v1")
    assert webapi.replayable_with({"split": "all"}) and not webapi.replayable_with({"database_url": "postgresql://x"})
    assert agentgym.capabilities("agentgym/Remote-v0") == agentgym.Capabilities()


def test_a_users_env_declares_its_own_capabilities() -> None:
    from agentgym.oracles import get_oracle
    from agentgym.registration import ids_with

    with pytest.raises(agentgym.ConfigError, match="no oracle for 'myorg/Echo-v0'"):
        agentgym.register("myorg/Echo-v0", "tests.agentgym.toy:EchoEnv")
        get_oracle("myorg/Echo-v0")
    caps = agentgym.Capabilities(oracle="tests.agentgym.toy:EchoEnv", replayable=True)
    agentgym.register("myorg/Echo-v0", "tests.agentgym.toy:EchoEnv", capabilities=caps)
    assert agentgym.capabilities("myorg/Echo-v0") is caps and "myorg/Echo-v0" in ids_with("oracle")
    with pytest.raises(agentgym.ConfigError, match="capabilities must be"):
        agentgym.register("myorg/Other-v0", "tests.agentgym.toy:EchoEnv", capabilities={"oracle": "x:y"})  # type: ignore[arg-type]
