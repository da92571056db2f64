"""agentgym's envs exported to verifiers, run by verifiers' own eval CLI (``vf-eval``: its
interception server, its null harness's chat loop installed by uv, MCP for the env's tools)
against agentgym's chat server on loopback; the rewards verifiers records are checked against
agentgym's own token env stepping the same answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from tests.environments.interop.conftest import MATH_ID, MATHCALC_ID, require

require("verifiers.v1")  # imported where used: ~5 s that the other xdist workers need not pay

SKY_ROWS = [{"prompt": [{"role": "system", "content": "Think, then answer."},
                        {"role": "user", "content": f"What is {i} + {i}? End with '#### ANSWER'."}],
             "reward_spec": {"ground_truth": str(2 * i)}, "extra_info": {"max_turns": 2}} for i in range(2)]


def vf_eval(out: Path, base_url: str, env_id: str, num_tasks: int, *extra: str,
            env_kwargs: dict[str, Any] | None = None) -> list[Any]:
    """Run verifiers' own ``vf-eval`` (the console script's entry point, this interpreter) and read
    the traces back with verifiers' own trace store."""
    import verifiers.v1 as vf
    from verifiers.v1.utils.trace_store import read_episodes

    from agentgym.environments.interop.verifiers_export import AgentGymData

    name = env_id.split("/")[-1]
    cmd = [sys.executable, "-c", "import sys; from verifiers.v1.cli.eval.main import main; sys.exit(main())",
           "agentgym-verifiers", "--env.taskset.env", env_id, "--env.taskset.num-tasks", str(num_tasks),
           "--env.taskset.env-kwargs", json.dumps(env_kwargs or {}),
           "-m", "agentgym", "--client.base-url", base_url, "--client.api-key-var", "NO_API_KEY",
           "--no-push", "--no-rich", "-c", "2", "-o", str(out), "--run.name", name, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    episodes = read_episodes(out / name, vf.Trace[AgentGymData])
    assert len(episodes) == num_tasks and all(e.ok for e in episodes), [e.errors for e in episodes]
    return [t for e in sorted(episodes, key=lambda e: e.task.data.seed) for t in e.traces]


def agentgym_verdict(trace: Any) -> float:
    """agentgym's token env, reset to the trace's task, stepping the trace's tool calls and answers
    with the codec's own renderers; each tool result must be the one the model was shown."""
    data = trace.task.data
    env = gym.make(data.env, **data.env_kwargs)
    u = env.unwrapped
    env.reset(seed=data.seed, options=data.options or None)
    shown = {m.tool_call_id: m.content for m in trace.messages if m.role == "tool"}
    total = 0.0
    for m in trace.assistant_messages:
        for call in m.tool_calls or []:
            _, r, *_, info = env.step(u.codec.tool_call_ids(call.name, json.loads(call.arguments)))
            assert info["tool_result"]["content"] == shown[call.id]
            total += r
        if not m.tool_calls:
            _, r, term, trunc, _ = env.step(u.codec.final_ids(m.content or ""))
            total += r
            if term or trunc:
                break
    env.close()
    return total


def test_taskset_holds_the_envs_tasks_and_tools_only_where_the_env_has_some() -> None:
    from agentgym.environments.interop.verifiers_export import AgentGymTaskset, AgentGymTasksetConfig

    for env_id, tools in ((MATH_ID, []), (MATHCALC_ID, ["AgentGymTools"])):
        tasks = list(AgentGymTaskset(AgentGymTasksetConfig(env=env_id, seed=5, num_tasks=3)))
        local = gym.make(env_id)
        for k, t in enumerate(tasks):
            local.reset(seed=5 + k)
            assert (t.data.prompt, t.data.system_prompt, t.data.seed) == (local.unwrapped.task.prompt,
                                                                         local.unwrapped.instructions, 5 + k)
            assert t.data.id == local.unwrapped.task.id
        assert [type(s).__name__ for s in type(tasks[0]).toolsets(tasks[0].config)] == tools
    with pytest.raises(ValueError, match="did you mean 'agentgym/Math-v1'"):
        AgentGymTasksetConfig(env="agentgym/Maths-v1")


def test_replay_pays_what_agentgym_pays_and_counts_tool_results_the_model_was_not_shown() -> None:
    import verifiers.v1 as vf

    from agentgym.environments.interop.verifiers_export import AgentGymTaskset, AgentGymTasksetConfig, replay

    (task,) = AgentGymTaskset(AgentGymTasksetConfig(env=MATHCALC_ID, num_tasks=1))  # 10 * 7 - 6
    call = vf.ToolCall(id="c1", name="calculator", arguments='{"expression": "10 * 7 - 6"}')

    def convo(tool_result: str, answer: str) -> list[Any]:
        return [vf.SystemMessage(content=task.data.system_prompt), vf.UserMessage(content=task.data.prompt),
                vf.AssistantMessage(tool_calls=[call]), vf.ToolMessage(tool_call_id="c1", content=tool_result),
                vf.AssistantMessage(content=answer)]

    ok = replay(task.data, convo("64", "64"))
    assert (ok.reward, ok.turns, ok.done, ok.tool_mismatch) == (1.0, 2, True, 0)
    assert ok.components["outcome"] == 1.0
    wrong = replay(task.data, convo("65", "65"))  # a tool result the env never gave, then a wrong answer
    assert (wrong.reward, wrong.tool_mismatch) == (0.0, 1)
    cut = replay(task.data, convo("64", "64")[:3])  # a call and no answer: the episode is not over
    assert (cut.reward, cut.done, cut.user_reply) == (0.0, False, None)


@pytest.mark.slow
def test_math_runs_under_vf_eval_and_its_rewards_are_agentgyms_verdicts(memorized_server: str, offline_uv: dict,
                                                                         tmp_path: Path) -> None:
    """MathCalc-v1 seed 0: the memorizing model calls agentgym's calculator over verifiers' MCP,
    reads 64 and answers 64 (reward 1). Math-v1 seeds 0 and 1, which it does not know: no tools, no
    tool server, wrong answers (0)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:  # two vf-eval processes side by side
        runs = [pool.submit(vf_eval, tmp_path, memorized_server, env_id, n, "--sampling.temperature", "0")
                for env_id, n in ((MATHCALC_ID, 1), (MATH_ID, 2))]
        traces = [t for run in runs for t in run.result()]
    calc = traces[0]
    assert [c.name for m in calc.assistant_messages for c in m.tool_calls or []] == ["calculator"]
    assert [m.content for m in calc.messages if m.role == "tool"] == ["64"] and calc.last_reply == "64"
    assert calc.metrics["agentgym/tool_mismatch"] == 0.0
    rewards = [t.reward for t in traces]
    assert rewards == [agentgym_verdict(t) for t in traces]
    assert rewards == [1.0, 0.0, 0.0]
    assert all(set(t.rewards) == {"agentgym"} for t in traces)


@pytest.mark.slow
def test_a_multi_turn_agentgym_env_is_played_as_verifiers_plays_a_user(tiny_server: tuple[str, Any],
                                                                       offline_uv: dict, tmp_path: Path) -> None:
    """SkyRL's gsm8k_multi_turn through agentgym/SkyRL-v0, exported: each wrong answer gets SkyRL's
    reply as the next user turn (verifiers resumes its chat loop on it), two answers at most."""
    pytest.importorskip("skyrl_gym", reason="pip install 'agentgym-suite[interop]'")
    kwargs = {"env_class": "gsm8k_multi_turn", "tasks": SKY_ROWS[:1]}
    (trace,) = vf_eval(tmp_path, tiny_server[0], "agentgym/SkyRL-v0", 1, "--sampling.temperature", "0", env_kwargs=kwargs)
    answers = trace.assistant_messages
    users = [m.content for m in trace.messages if m.role == "user"][1:]
    assert len(answers) == 2 and len(users) == 1, [m.content for m in trace.messages]
    env = gym.make("agentgym/SkyRL-v0", **kwargs)
    u = env.unwrapped
    env.reset(seed=0)
    total = 0.0
    for i, m in enumerate(answers):
        obs, r, term, trunc, _ = env.step(u.codec.final_ids(m.content or ""))
        total += r
        if i < len(users):  # the user turn verifiers sent is the one agentgym renders
            assert u.tokenizer.decode(obs).startswith(f"<|start|>user<|message|>{users[i]}<|end|>")
    assert trace.reward == total
