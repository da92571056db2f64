"""ToolEnv's own behaviour, on the 20-line EchoEnv from toy.py."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym import AgentGymError, ConfigError, EnvStateError, InfraError, Tool
from agentgym.errors import ActionTypeError, SandboxLost, SandboxStartFailed
from agentgym.tokenizers import encode_harmony_text

from .toy import EchoEnv


def _solve(env: EchoEnv) -> list[float]:
    obs, _ = env.reset(seed=3)
    word = env.task.prompt.split()[-1]
    rewards = []
    _, r, *_ = env.step(np.array(env.codec.tool_call_ids("echo", {"word": word})))
    rewards.append(r)
    _, r, term, trunc, _ = env.step(np.array(env.codec.final_ids(word.upper())))
    rewards.append(r)
    assert term and not trunc
    return rewards


def test_check_env() -> None:
    check_env(EchoEnv(), skip_render_check=True)


def test_sparse_and_shaped_rewards() -> None:
    assert _solve(EchoEnv()) == [0.0, 1.0]
    shaped = _solve(EchoEnv(reward_mode="shaped"))
    # process terms settle on the last turn, as a bonus on the correct outcome:
    # 1 + format 0.1 - 2 turns x 0.01
    assert shaped == pytest.approx([0.0, 1.0 + 0.1 - 0.02])


def _play(env: EchoEnv, texts: list[str], seed: int = 3) -> float:
    env.reset(seed=seed)
    total = 0.0
    for text in texts:
        *_, r, term, trunc, _ = env.step(np.array(encode_harmony_text(env.tokenizer, text)))
        total += r
        if term or trunc:
            break
    return total


def _call(word: str) -> str:
    return f'<|channel|>commentary to=functions.echo <|constrain|>json<|message|>{{"word": "{word}"}}<|call|>'


def _final(text: str) -> str:
    return f"<|channel|>final<|message|>{text}<|return|>"


@pytest.mark.parametrize("mode", ["sparse", "shaped"])
def test_no_attempt_never_out_earns_a_failed_attempt(mode: str) -> None:
    env = EchoEnv(reward_mode=mode, max_turns=6)
    env.reset(seed=3)
    word = env.task.prompt.split()[-1]
    no_attempt = {
        "done at once": [_final("Done.")],
        "empty answer": [_final("")],
        "refusal": [_final("I cannot help with that.")],
        "malformed": ["hello"],
        "cut off": ["<|channel|>final<|message|>Done."],
    }
    failed = {
        "calls, answers wrong": [_call(word), _final("nope")],
        "malformed calls, answers wrong": ["<|channel|>commentary to=functions.echo<|message|>{oops<|call|>",
                                           _call(word), "junk", _final("nope")],
        "calls until the budget ends": [_call(word)] * 6,
        "calls, wrong stop": [_call(word).replace("<|call|>", "<|return|>"), _final(word.lower())],
    }
    best_idle = max(_play(env, t) for t in no_attempt.values())
    worst_try = min(_play(env, t) for t in failed.values())
    assert best_idle <= worst_try, (best_idle, worst_try)
    solved = _play(env, [_call(word), _final(word.upper())])
    messy = _play(env, ["junk", _call(word), _final(word.upper())])
    assert solved > messy >= 1.0 > worst_try if mode == "shaped" else solved == messy == 1.0 > worst_try


def test_stream_is_append_only_and_masked() -> None:
    env = EchoEnv()
    obs, _ = env.reset(seed=1)
    stream, mask = list(obs), [0] * len(obs)
    word = env.task.prompt.split()[-1]
    for action in (env.codec.tool_call_ids("echo", {"word": word}), env.codec.final_ids("nope")):
        o, *_ = env.step(np.array(action))
        stream += list(action) + list(o)
        mask += [1] * len(action) + [0] * len(o)
    traj = env.trajectory
    assert traj.tokens == stream and traj.policy_mask == mask
    assert [traj.tokens[t.action_start:t.action_end] for t in traj.turns] == [
        list(env.codec.tool_call_ids("echo", {"word": word})), list(env.codec.final_ids("nope"))]


def test_same_seed_same_tokens() -> None:
    a, b = EchoEnv(), EchoEnv()
    assert np.array_equal(a.reset(seed=7)[0], b.reset(seed=7)[0])


def test_programmer_misuse_raises_from_the_hierarchy() -> None:
    env = EchoEnv()
    with pytest.raises(EnvStateError, match="reset"):
        env.step(np.array([1, 2]))
    env.reset(seed=0)
    env.step(np.array(env.codec.final_ids("x")))
    with pytest.raises(EnvStateError, match="reset"):
        env.step(np.array([1, 2]))
    env.close()
    env.close()  # idempotent
    with pytest.raises(EnvStateError, match="closed"):
        env.reset()
    with pytest.raises(ConfigError, match="reward_mode"):
        EchoEnv(reward_mode="dense")
    with pytest.raises(ConfigError, match="unknown shaping keys"):
        EchoEnv(shaping={"formatt": 1.0})


def test_malformed_actions_are_observations_not_exceptions() -> None:
    env = EchoEnv(reward_mode="shaped", max_turns=50)
    env.reset(seed=0)
    tok = env.tokenizer
    for text in ["hello", "<|channel|>commentary to=functions.nope<|message|>{}<|call|>",
                 '<|channel|>commentary to=functions.echo<|message|>{"word": 3}<|call|>',
                 "<|channel|>commentary to=functions.echo<|message|>{oops<|call|>"]:
        obs, r, term, trunc, info = env.step(np.array(encode_harmony_text(tok, text)))
        # penalised only on a correct outcome (shaped): a failed attempt never earns below 0
        assert not term and not trunc and r == 0.0 and info["error"] or info["tool_result"]["error"]
        assert info["reward_components"]["malformed"] == 1.0
        decoded = tok.decode(obs.tolist())
        assert decoded.endswith("<|start|>assistant")
    assert env.counts["malformed"] == 4


def test_turn_and_token_budgets_truncate() -> None:
    env = EchoEnv(max_turns=2)
    env.reset(seed=0)
    call = np.array(env.codec.tool_call_ids("echo", {"word": "a"}))
    assert env.step(call)[3] is False
    obs, _, term, trunc, _ = env.step(call)
    assert trunc and not term and obs.size == 0
    env = EchoEnv(max_tokens=800)
    first, _ = env.reset(seed=0)
    trunc = False
    for _ in range(10):
        *_, trunc, _ = env.step(call)
        if trunc:
            break
    assert trunc and len(env.trajectory.tokens) <= 800 + len(call)


@pytest.mark.parametrize("action", [
    np.array([], dtype=np.int64),
    np.array([10**9, 5]),
    np.array([-1]),
])
def test_rejected_actions_leave_the_stream_unchanged(action) -> None:
    env = EchoEnv()
    env.reset(seed=0)
    before = list(env.trajectory.tokens)
    obs, r, term, trunc, info = env.step(action)
    assert obs.size == 0 and info["error"] and env.trajectory.tokens == before


@pytest.mark.parametrize(("action", "hint"), [
    ("hello", "TextWrapper"),
    (b"hello", "TextWrapper"),
    ({"role": "assistant", "content": "hi"}, "ChatWrapper"),
    (None, "ChatWrapper"),
    (np.array([[1, 2], [3, 4]]), "1-D integer array"),
    (np.array([1.5, 2.5]), "dtype float64"),
    (["a", "b"], "1-D integer array"),
    ([[1], [2, 3]], "ragged"),
])
def test_an_action_of_the_wrong_python_type_raises_and_uses_no_turn(action, hint: str) -> None:
    """A program's mistake (text, a message, None) is not a policy's: it raises, naming the fix,
    and the episode is untouched (no turn used, nothing counted)."""
    env = EchoEnv(max_turns=1)
    env.reset(seed=0)
    before = list(env.trajectory.tokens)
    with pytest.raises(ActionTypeError, match=hint) as e:
        env.step(action)
    assert isinstance(e.value, AgentGymError) and isinstance(e.value, TypeError)
    assert env.trajectory.tokens == before and env.counts["turns"] == 0 and env.trajectory.turns == []
    _, _, term, _, _ = env.step(np.array(env.codec.final_ids("x")))  # the one turn is still there
    assert term


def test_a_typo_in_a_constructor_argument_gets_a_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r"EchoEnv got unknown keyword argument\(s\) 'max_turn' \(did you "
                                          r"mean 'max_turns'\?\); it takes: tokenizer, reward_mode"):
        EchoEnv(max_turn=3)


def test_huge_action_is_clipped_and_truncates() -> None:
    env = EchoEnv(max_action_tokens=1000)
    env.reset(seed=0)
    n = len(env.trajectory.tokens)
    _, _, term, trunc, info = env.step(np.full(2_000_000, ord("a")))
    assert trunc and "action_too_long" in info["error"]
    assert len(env.trajectory.tokens) == n + 1000


def test_undeclared_reward_components_are_a_programmer_error() -> None:
    from agentgym import ToolResult

    class Leaky(EchoEnv):
        def score_final(self, answer: str) -> ToolResult:
            return ToolResult("", terminal=True, outcome=1.0, components={"bonus": 1.0})

    env = Leaky()
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="extra_shaping"):
        env.step(np.array(env.codec.final_ids("x")))


def test_oversized_tool_errors_are_capped() -> None:
    env = EchoEnv()
    env.reset(seed=0)
    tool = env.tools()[0]
    result = tool({"word": "x" * 500_000})
    assert result.ok and len(result.content) <= tool.max_output_chars + 100
    bad = tool({"word": ["z" * 500_000]})
    assert not bad.ok and len(bad.content) <= tool.max_output_chars + 100


def test_compact_prompt_is_one_short_developer_message() -> None:
    full, compact = EchoEnv(), EchoEnv(prompt="compact")
    obs_full, _ = full.reset(seed=3)
    obs, _ = compact.reset(seed=3)
    text = compact.tokenizer.decode(obs.tolist())
    assert text == ("<|start|>developer<|message|>" + EchoEnv.instructions
                    + "\nTool: functions.echo(word: string)<|end|>"
                    + "<|start|>user<|message|>Echo the word: " + compact.task.prompt.split()[-1]
                    + "<|end|><|start|>assistant")
    assert len(obs) < len(obs_full) / 2
    assert compact.trajectory.meta["prompt"] == "compact" and full.trajectory.meta["prompt"] == "harmony"
    # the episode itself is unchanged: same actions, same rewards
    assert _solve(EchoEnv(prompt="compact", reward_mode="shaped")) == _solve(EchoEnv(reward_mode="shaped"))


def test_unknown_prompt_style_names_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"prompt must be one of \['compact', 'harmony'\], got 'short'"):
        EchoEnv(prompt="short")


def test_prompt_sizes_quoted_in_the_docs_are_true() -> None:
    import agentgym
    from agentgym.env import PROMPT_STYLES
    from agentgym.environments.math.calc import MathCalcEnv

    for style, total, prefix in (("harmony", 648, 612), ("compact", 195, 159)):
        env = MathCalcEnv(prompt=style)
        obs, _ = env.reset(seed=0)
        user = env.codec.render_prompt([agentgym.Message("user", env.task.prompt)])
        assert (len(obs), len(obs) - len(user)) == (total, prefix), style
        assert f"{prefix} byte tokens for MathCalc-v1" in PROMPT_STYLES[style]


@pytest.mark.parametrize("weight", [float("nan"), float("inf")])
def test_a_non_finite_weight_reaches_every_turn_not_floored_away(weight: float) -> None:
    env = EchoEnv(reward_mode="shaped", shaping={"turn": weight})
    env.reset(seed=0)
    _, r, *_ = env.step(np.array(env.codec.final_ids("wrong")))
    assert not np.isfinite(r)  # the trainer refuses it with NonFiniteError


class _FlakyEnv(EchoEnv):
    """EchoEnv whose echo service dies on the word 'stone' and whose reset can fail to start."""

    fail_reset = False

    def on_reset(self) -> None:
        if self.fail_reset:
            raise SandboxStartFailed("could not start a sandbox container: engine busy")

    def tools(self) -> list[Tool]:
        def echo(word: str) -> str:
            if word == "stone":
                raise SandboxLost("the episode's sandbox died")
            return word.upper()

        return [Tool("echo", "Returns the word in upper case.",
                     {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}, echo)]


@pytest.mark.parametrize("mode", ["sparse", "shaped"])
def test_an_infrastructure_fault_ends_the_episode_without_an_outcome(mode: str) -> None:
    env = _FlakyEnv(reward_mode=mode)
    env.reset(seed=0)
    call = np.array(env.codec.tool_call_ids("echo", {"word": "stone"}))
    obs, r, term, trunc, info = env.step(call)
    assert (obs.size, r, term, trunc) == (0, 0.0, False, True)
    assert info["infra_error"] == "SandboxLost: the episode's sandbox died" and info["error"] == "infra_error"
    traj = env.trajectory
    assert traj.infra_error == info["infra_error"] and traj.truncated and not traj.terminated
    assert traj.turns[-1].components == {} and traj.tokens[traj.turns[-1].action_start:] == call.tolist()
    with pytest.raises(EnvStateError):
        env.step(call)
    env.reset(seed=0)  # the next episode starts clean
    assert env.trajectory.infra_error is None


def test_a_reset_that_meets_an_infrastructure_fault_raises_it_and_leaves_no_episode() -> None:
    env = _FlakyEnv()
    env.reset(seed=0)
    env.fail_reset = True
    with pytest.raises(InfraError, match="could not start"):
        env.reset(seed=1)
    with pytest.raises(EnvStateError, match="reset"):
        env.step(np.array([1, 2]))
    env.fail_reset = False
    env.reset(seed=1)


@pytest.mark.parametrize("mode", ["sparse", "shaped"])
def test_reward_paid_holds_what_was_paid_and_components_the_indicators(mode: str) -> None:
    env = EchoEnv(reward_mode=mode)
    env.reset(seed=3)
    word = env.task.prompt.split()[-1]
    _, r1, _, _, info1 = env.step(np.array(env.codec.tool_call_ids("echo", {"word": word})))
    assert info1["reward_components"]["turn"] == 1.0 and info1["reward_paid"] == {} and r1 == 0.0
    _, r2, term, _, info2 = env.step(np.array(env.codec.final_ids(word.upper())))
    assert term and info2["reward_components"]["format"] == 1.0  # an indicator, always reported
    assert sum(info2["reward_paid"].values()) == pytest.approx(r2)
    if mode == "sparse":
        assert info2["reward_paid"] == {"outcome": 1.0}  # turn and format are not paid in sparse mode
    else:
        assert info2["reward_paid"] == pytest.approx({"outcome": 1.0, "process_bonus": 0.1 - 0.02})
