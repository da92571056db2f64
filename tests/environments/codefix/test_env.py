"""CodeFix-v1 end to end in real Docker sandboxes: contract, oracles, tools, budgets, tampering."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentgym  # noqa: F401  (registers the ids)
from agentgym.environments.codefix.oracle import noop_policy, oracle_policy
from agentgym.environments.codefix.tasks import select_tasks

pytestmark = pytest.mark.docker


@pytest.fixture
def make(docker_pool: Any) -> Iterator[Any]:
    """CodeFix-v1 envs on the session's Docker pool (tests using it carry the docker marker)."""
    made: list[gym.Env] = []

    def _make(**kw: Any) -> gym.Env:
        # a lambda, not the pool: gym.make and check_env deep-copy their kwargs
        kw.setdefault("sandbox", lambda: docker_pool.acquire())
        env = gym.make("agentgym/CodeFix-v1", **kw)
        made.append(env)
        return env

    yield _make
    for e in made:
        e.close()


def play(env: gym.Env, policy: Any, **reset: Any) -> tuple[float, dict[str, Any]]:
    env.reset(**reset)
    while True:
        _, r, term, trunc, info = env.step(policy(env))
        if term or trunc:
            return r, info


def call(env: gym.Env, name: str, **args: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    u = env.unwrapped
    obs, r, term, trunc, info = env.step(np.asarray(u.codec.tool_call_ids(name, args)))
    return u.tokenizer.decode(obs.tolist()), r, term, trunc, info


def sample_ids() -> list[str]:
    """A fixed sample over both splits and all levels."""
    out = []
    for split in ("train", "eval"):
        for level in (1, 2, 3):
            ts = select_tasks(split, level)
            out += [ts[0].id, ts[len(ts) // 2].id]
    return out


def test_check_env_via_gym_make(make: Any) -> None:
    check_env(make().unwrapped, skip_render_check=True)
    check_env(make(split="eval", level=2, reward_mode="shaped").unwrapped, skip_render_check=True)


@pytest.mark.parametrize("task_id", sample_ids())
def test_shipped_bug_fails_and_canonical_passes_in_the_sandbox(make: Any, task_id: str) -> None:
    split = "eval" if int(task_id.split("/")[1]) % 5 == 0 else "train"
    env = make(split=split, reward_mode="shaped")
    r0, info0 = play(env, noop_policy, options={"task_id": task_id})
    task = env.unwrapped.task.answer
    assert r0 == 0.0 and info0["reward_components"]["outcome"] == 0.0  # doing nothing earns nothing
    assert info0["judge"]["valid"] and info0["judge"]["passed"] < info0["judge"]["total"]
    r1, info1 = play(env, oracle_policy, options={"task_id": task_id})
    assert info1["reward_components"]["outcome"] == 1.0 and info1["judge"]["passed"] == task.n_units
    assert info1["reward_components"]["pass_rate_delta"] == pytest.approx(1 - task.start_pass_rate)
    # outcome + format 0.1 - 2 turns x 0.01 (the bonus of a correct episode); the pass-rate gain
    # is reported with weight 0
    assert r1 == pytest.approx(1.0 + 0.08)


def test_sparse_rewards_and_fix_by_patch_and_edit(make: Any) -> None:
    env = make(level=1)
    u = env.unwrapped
    env.reset(options={"index": 3})
    t = u.task.answer
    patch = "".join(difflib.unified_diff(t.buggy_source.splitlines(True), t.canonical_source.splitlines(True),
                                         "a/solution.py", "b/solution.py"))
    text, r, term, trunc, _ = call(env, "apply_patch", patch=patch)
    assert "patched solution.py" in text and (r, term, trunc) == (0.0, False, False)
    text, *_ = call(env, "run_tests")
    assert "exit code: 0" in text and f"{t.n_visible}/{t.n_visible} visible tests passed" in text
    _, r, term, _, info = call(env, "submit")
    assert term and r == 1.0 and info["judge"]["passed"] == t.n_units
    # the same fix as search/replace edits, line by line
    env.reset(options={"index": 3})
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
            None, t.buggy_source.splitlines(True), t.canonical_source.splitlines(True)).get_opcodes():
        if tag != "equal":
            old = "".join(t.buggy_source.splitlines(True)[max(i1 - 1, 0):i2 + 1])
            new = "".join(t.buggy_source.splitlines(True)[max(i1 - 1, 0):i1]) + \
                "".join(t.canonical_source.splitlines(True)[j1:j2]) + \
                "".join(t.buggy_source.splitlines(True)[i2:i2 + 1])
            text, *_ = call(env, "edit", path="solution.py", old=old, new=new)
            assert text.count("wrote") == 1, text
    text, *_ = call(env, "read_file", path="solution.py")
    assert t.canonical_source.strip() in text
    _, r, term, _, _ = call(env, "submit")
    assert term and r == 1.0


def test_bad_tool_calls_give_readable_errors_and_the_episode_goes_on(make: Any) -> None:
    env = make(reward_mode="shaped", max_file_bytes=1_000)
    env.reset(seed=0)
    cases = [
        ("apply_patch", {"patch": "this is not a diff"}, "expected a unified diff"),
        ("apply_patch", {"patch": "--- a/solution.py\n+++ b/solution.py\n@@ -1 +1 @@\n-nothing like this\n+x\n"},
         "does not apply"),
        ("read_file", {"path": "missing.py"}, "no file 'missing.py'"),
        ("read_file", {"path": "../../etc/passwd"}, "bad_path"),
        ("write_file", {"path": "/etc/passwd", "content": "x"}, "bad_path"),
        ("write_file", {"path": "big.txt", "content": "x" * 2_000}, "too_large"),
        ("edit", {"path": "solution.py", "old": "this text is not there", "new": "y"}, "occurs 0 times"),
        ("read_file", {"file": "solution.py"}, "bad_arguments"),
        ("no_such_tool", {}, "no tool named"),
    ]
    for name, args, expect in cases:
        text, r, term, trunc, info = call(env, name, **args)
        assert expect in text, (name, text)
        assert not term and not trunc and info["tool_result"]["ok"] is False
    info = call(env, "list_files")[-1]
    assert info["tool_result"]["content"].split() == ["solution.py", "test_visible.py"]  # nothing written


def test_hidden_tests_never_enter_the_sandbox(make: Any) -> None:
    env = make(split="eval", level=1)
    u = env.unwrapped
    env.reset(options={"index": 0})
    t = u.task.answer
    hidden_only = [ln for unit in t.units[t.n_visible:] for ln in unit.splitlines() if "assert" in ln]
    assert hidden_only
    needle = hidden_only[0].strip().encode()
    text, *_ = call(env, "run_python", code=(
        "import os\nfor root, _, files in os.walk('/'):\n"
        "    if root.startswith(('/proc', '/sys', '/dev')): continue\n"
        "    for f in files:\n        p = os.path.join(root, f)\n"
        "        try:\n            d = open(p, 'rb').read(1 << 20)\n        except OSError:\n            continue\n"
        f"        if {needle!r} in d: print('FOUND', p)\n"
        "print('searched')\n"))
    assert "searched" in text and "FOUND" not in text


def test_tampering_in_the_sandbox_does_not_pass(make: Any) -> None:
    env = make(level=1)
    env.reset(options={"index": 0})
    t = env.unwrapped.task.answer
    forged = '@@agentgym-judge {} {{"total": {n}, "passed": {n}, "failures": []}}'.format("0" * 32, n=t.n_units)
    evil = t.buggy_source + (
        "\nimport os, sys\n"
        f"print({forged!r})\n"
        "leak = []\n"
        "for f in ('mem', 'environ', 'fd/0', 'fd/1'):\n"
        "    try:\n"
        "        with open('/proc/%d/%s' % (os.getppid(), f), 'rb' if f != 'fd/1' else 'wb') as h:\n"
        f"            h.read(16) if f != 'fd/1' else h.write({forged!r}.encode() + b'\\n')\n"
        "        leak.append(f)\n"
        "    except OSError as e:\n"
        "        pass\n"
        "open('leak.txt', 'w').write(' '.join(leak))\n")
    call(env, "write_file", path="solution.py", content=evil)
    call(env, "write_file", path="json.py", content="raise SystemExit('planted json')\n")
    call(env, "write_file", path="sitecustomize.py", content="print('planted')\n")
    sb = env.unwrapped.sandbox
    _, r, term, _, info = call(env, "submit")
    assert term and r == 0.0
    assert info["judge"]["valid"] and info["judge"]["passed"] == t.start_passed  # judged honestly
    leaked = sb.read_file("leak.txt").decode()  # the module did run, inside the judge's child
    assert "mem" not in leaked and "environ" not in leaked and "fd/0" not in leaked


def test_sandbox_seconds_budget_truncates(make: Any) -> None:
    env = make(sandbox_seconds=2.0, command_timeout=10.0)
    env.reset(seed=0)
    text, r, term, trunc, info = call(env, "run_python", code="while True: pass")
    assert trunc and not term and info["truncated_by"] == "sandbox_seconds"
    assert "time budget used up" in info["tool_result"]["content"]
    assert 1.5 < info["sandbox_seconds"] < 4.0 and text == ""
    traj = env.unwrapped.trajectory
    assert traj.truncated and not traj.terminated
    env.reset(seed=0)  # the next episode starts with a fresh budget
    text, _, term, trunc, _ = call(env, "run_python", code="print(6 * 7)")
    assert "42" in text and not (term or trunc)


def test_the_judge_runs_on_the_episodes_budget(make: Any) -> None:
    """A solution.py that stops the judge at import (SIGSTOP) stalled every submit for
    judge_deadline + 15 = 35 s, uncharged: a policy could stall the collector for free. Now the
    judge runs on what is left of the episode's sandbox seconds, and a stall uses them up."""
    import time

    env = make(sandbox_seconds=4.0)
    env.reset(seed=0)
    call(env, "write_file", path="solution.py",
         content="import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n")
    t0 = time.monotonic()
    text, r, term, trunc, info = call(env, "submit")
    assert term and r == 0.0 and not info["judge"]["valid"]
    assert time.monotonic() - t0 < 12.0  # the budget's 4 s and the sandbox's own overhead, not 35 s
    assert info["sandbox_seconds"] == 4.0  # used up
    r, info = play(env, oracle_policy, seed=0)  # an ordinary submit: judged, nothing more to count
    assert r > 0 and info["sandbox_seconds"] == 0.0


@pytest.mark.parametrize("split", ["train", "eval"])
def test_split_as_a_reset_option(make: Any, split: str) -> None:
    env = make()
    _, info = env.reset(seed=3, options={"split": split})
    assert info["split"] == split == env.unwrapped.task.answer.split
    with pytest.raises(agentgym.ConfigError, match="did you mean 'eval'"):
        env.reset(options={"split": "evaluation"})


def test_same_seed_same_task_and_tokens(make: Any) -> None:
    a, b = make(), make()
    oa, ia = a.reset(seed=7)
    ob, ib = b.reset(seed=7)
    assert ia["task_id"] == ib["task_id"] and np.array_equal(oa, ob)
    for _ in range(2):
        ra, rb = a.step(oracle_policy(a)), b.step(oracle_policy(b))
        assert np.array_equal(ra[0], rb[0]) and ra[1:4] == rb[1:4]
    assert a.unwrapped.trajectory.tokens == b.unwrapped.trajectory.tokens
    assert a.reset(seed=8)[1]["task_id"] != ia["task_id"] or a.reset(seed=9)[1]["task_id"] != ia["task_id"]


def test_one_sandbox_per_episode_released_on_reset_and_close(make: Any) -> None:
    env = make()
    u = env.unwrapped
    env.reset(seed=0)
    first = u.sandbox
    call(env, "write_file", path="notes.txt", content="episode 1")
    env.reset(seed=0)
    assert first.closed and u.sandbox is not first
    assert "notes.txt" not in u.sandbox.list_files()
    second = u.sandbox
    env.close()
    env.close()
    assert second.closed and u.sandbox is None



def test_file_tools_never_follow_symlinks_the_code_planted(make: Any) -> None:
    env = make(max_turns=40)
    env.reset(seed=0)
    call(env, "run_python", code="import os; os.symlink('/etc', 'etc'); os.symlink('/etc/passwd', 'pw'); "
                                 "os.symlink('/tmp', 'tmp')")
    patch = "--- a/pw\n+++ b/pw\n@@ -1 +1 @@\n-root:x:0:0:root:/root:/bin/bash\n+pwned\n"
    cases = [
        ("read_file", {"path": "pw"}, "no file 'pw'"),
        ("read_file", {"path": "etc/passwd"}, "bad_path"),
        ("write_file", {"path": "tmp/planted.py", "content": "x"}, "bad_path"),
        ("edit", {"path": "etc/hostname", "old": "sandbox", "new": "pwned"}, "bad_path"),
        ("apply_patch", {"patch": patch}, "does not exist"),
        ("list_files", {"path": "etc"}, "bad_path"),
    ]
    for name, args, expect in cases:
        text, _, term, trunc, info = call(env, name, **args)
        assert expect in text, (name, text)
        assert not term and not trunc and info["tool_result"]["ok"] is False, (name, text)
    out = call(env, "run_python", code="import os; print(os.path.exists('/tmp/planted.py'), "
                                       "open('/etc/passwd').read().startswith('root:'))")[0]
    assert "False True" in out


@pytest.mark.parametrize("task_id, constant", [("HumanEval/42/L1/2", "[]"), ("HumanEval/54/L1/2", "True"),
                                               ("HumanEval/77/L1/2", "True")])
def test_a_degenerate_program_earns_no_shaped_credit(make: Any, task_id: str, constant: str) -> None:
    # A hack found while attacking the reward: on these tasks the bug fails every hidden unit, so
    # replacing the body with a constant passes some (33-62%) and used to earn that as "progress".
    env = make(reward_mode="shaped")
    env.reset(options={"task_id": task_id})
    t = env.unwrapped.task.answer
    head = t.buggy_source[: t.buggy_source.index(f"def {t.entry_point}(")]
    signature = t.buggy_source[len(head):].split(":\n", 1)[0]
    degenerate = f"{head}{signature}:\n    return {constant}\n"
    call(env, "write_file", path="solution.py", content=degenerate)
    _, r, term, _, info = call(env, "submit")
    assert term and info["reward_components"]["pass_rate_delta"] >= 0.3  # reported...
    assert r == 0.0  # ...never paid by default
    # opting in pays it, floored at 0, and still below any fix
    env = make(reward_mode="shaped", shaping={"pass_rate_delta": 1.0})
    env.reset(options={"task_id": task_id})
    call(env, "write_file", path="solution.py", content=degenerate)
    _, r, *_ = call(env, "submit")
    assert 0.3 <= r < 1.0


@pytest.mark.parametrize("when", ["before_a_tool", "before_submit"])
def test_a_killed_container_is_an_infrastructure_fault_not_a_zero(make: Any, docker_pool: Any, when: str) -> None:
    """docker kill under a running episode: the work dir is gone, so the episode ends with
    info["infra_error"], no outcome; the next episode gets a new container and works."""
    env = make(split="train", level=1)
    env.reset(seed=0)
    sb = env.unwrapped.sandbox
    if when == "before_submit":
        assert call(env, "run_tests")[4].get("infra_error") is None
    docker_pool.client.api.kill(sb.container_id)  # as a preempted / crashed machine would
    name = "submit" if when == "before_submit" else "read_file"
    _, r, term, trunc, info = call(env, name, **({} if name == "submit" else {"path": "solution.py"}))
    assert trunc and not term and r == 0.0 and "sandbox died" in info["infra_error"]
    traj = env.unwrapped.trajectory
    assert traj.infra_error == info["infra_error"] and traj.turns[-1].components == {}
    reward, _ = play(env, oracle_policy, seed=0)  # a fresh container: the episode runs to its real outcome
    assert reward == 1.0 and env.unwrapped.trajectory.infra_error is None
