"""No text from a policy is evaluated by the host: hub scorers run out of process, once per answer.

Code-executing answers are planted in every adapter that scores text with a hub's code
(ReasoningGym across the datasets whose scorers ``eval`` or ``parse_expr`` the answer, SkyRL); the
host must show no side effect (the file is not created), the answer earns 0, and a scorer that an
answer tried to patch must not pay a later episode. The scorer worker's child is tested directly
too (its answer reaches ``eval`` there, with the answer rules bypassed), and an AST scan of the
adapters finds no evaluation of answer text in agentgym's process.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from agentgym.environments.interop.isolation import IsolatedScorer, SessionError
from tests.environments.interop.conftest import require

RG = "agentgym/ReasoningGym-v0"
INTEROP = Path(__file__).resolve().parents[3] / "environments" / "interop"
# datasets whose score_answer evaluates the answer: eval() for the first four, sympy parse_expr after
EVALUATING = ["string_insertion", "spiral_matrix", "binary_matrix", "n_queens", "polynomial_multiplication",
              "simple_integration", "intermediate_integration", "puzzle24", "countdown"]
PATCH_ALL = ("[setattr(c, 'score_answer', lambda *a, **k: 1.0) for c in "
             "__import__('reasoning_gym.dataset', fromlist=['x']).ProceduralDataset.__subclasses__()]")


@pytest.fixture
def open_dir(tmp_path: Path) -> Path:
    """A world-writable directory: only the scorer child's own guards keep a payload from writing here."""
    d = tmp_path / "open"
    d.mkdir()
    os.chmod(d, 0o777)
    os.chmod(tmp_path, 0o755)
    return d


def payloads(d: Path) -> list[str]:
    return [f"__import__('pathlib').Path({str(d / 'a')!r}).write_text('x') and []",
            f"__import__('os').system('touch {d / 'b'}') or []",
            f"open({str(d / 'c')!r}, 'w').write('x') and []",
            f"__import__('subprocess').run(['touch', {str(d / 'd')!r}]) and []",
            PATCH_ALL]


def play(env: gym.Env, text: str, **options: Any) -> tuple[float, dict[str, Any]]:
    env.reset(seed=0, options=options or None)
    u = env.unwrapped
    *_, r, term, trunc, info = env.step(u.codec.final_ids(text))
    assert term and not trunc, info
    return float(r), info


@pytest.mark.slow
@pytest.mark.parametrize("dataset", EVALUATING)
def test_code_answers_earn_nothing_and_leave_no_trace(dataset: str, open_dir: Path) -> None:
    require("reasoning_gym")
    env = gym.make(RG, dataset=dataset, config={"size": 40}, partial_credit=True, no_attempt_guard=True)
    try:
        for p in payloads(open_dir):
            r, info = play(env, p, index=0)
            assert r == 0.0, (p, info["tool_result"])
        assert list(open_dir.iterdir()) == []
        # a later episode answering nothing is not paid by a patched scorer; the right answer still is
        assert play(env, "Done.", index=1)[0] == 0.0
        u = env.unwrapped
        env.reset(seed=0, options={"index": 1})
        if isinstance(u.entry.get("answer"), str):
            *_, r, _, _, info = env.step(u.oracle_action())
            # the source pays it 1; the guard takes off what a non-attempt earns here (partial credit)
            m = re.search(r"source_score 1\b(?:, no_attempt_score ([0-9.]+))?", info["tool_result"]["content"])
            assert m and r == pytest.approx(1.0 - float(m.group(1) or 0)), info["tool_result"]
    finally:
        env.close()


def test_the_scorer_child_keeps_what_eval_runs_to_itself(open_dir: Path) -> None:
    """The answer rules bypassed: the payload reaches reasoning-gym's eval() in the child."""
    require("reasoning_gym")
    import reasoning_gym

    from agentgym.environments.interop.hub_scorers import pack

    entry = reasoning_gym.create_dataset("spiral_matrix", seed=0, size=5)[0]
    answer, key = str(entry["answer"]), pack(entry)
    s = IsolatedScorer("agentgym.environments.interop.hub_scorers:ReasoningGymScorer",
                       {"dataset": "spiral_matrix", "config": {"seed": 0, "size": 5}}, timeout=5.0)
    try:
        for p in [*payloads(open_dir), "__import__('os').kill(__import__('os').getppid(), 9) or []"]:
            assert s.score(key, [p]) == [0.0]
        assert list(open_dir.iterdir()) == []
        assert s.score(key, ["Done.", answer]) == [0.0, 1.0]  # the patch died with its child
        with pytest.raises(SessionError, match="timeout"):
            s.score(key, ["__import__('time').sleep(60) or []"])
        assert s.score(key, [answer]) == [1.0]  # a fresh child after the kill
        assert s.sessions >= 9
    finally:
        s.close()


# ---------------------------------------------------------------------------- the call graph
BUILTIN_EVALUATORS = {"eval", "exec", "compile", "__import__"}  # called by bare name
EVALUATORS = {"parse_expr", "sympify", "parse_latex", "literal_eval"}  # however reached (literal_eval: the
# answer rules' own AST walk is the allowed way to read an answer as Python, never literal_eval's own run)
HUB_SCORING = {"score_answer", "compute_score"}  # hub scorers: only the worker's factories call them
WORKER_SIDE = {"hub_scorers.py", "scorer_worker.py"}


def _calls(tree: ast.AST) -> list[tuple[str, int]]:
    """(name, line) of every call; a bare name as "name", an attribute as ".name"."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else "." + f.attr if isinstance(f, ast.Attribute) else ""
            out.append((name, node.lineno))
    return out


def test_no_adapter_evaluates_answer_text_in_the_host_process() -> None:
    found = []
    for path in sorted(INTEROP.glob("*.py")):
        calls = _calls(ast.parse(path.read_text()))
        found += [f"{path.name}:{line} {name}()" for name, line in calls
                  if name in BUILTIN_EVALUATORS or name.lstrip(".") in EVALUATORS]
        if path.name not in WORKER_SIDE:
            found += [f"{path.name}:{line} {name}() outside the scorer worker" for name, line in calls
                      if name.lstrip(".") in HUB_SCORING]
        text = path.read_text()
        if path.name not in WORKER_SIDE and "import sympy" in text.replace("from sympy", "import sympy"):
            found.append(f"{path.name} imports sympy")
    assert found == [], found


def test_openenv_answers_go_to_the_servers_scorer_not_the_host(openenv_math: str, open_dir: Path) -> None:
    """OpenEnv scores in its server's process: agentgym sends the answer as an action and reads the
    reward. A code answer to an exported Math server earns 0 and writes nothing."""
    require("openenv.core")
    env = gym.make("agentgym/OpenEnv-v0", url=openenv_math, final_field="answer", max_turns=2)
    try:
        for p in payloads(open_dir):
            r, _ = play(env, p)
            assert r == 0.0
        assert list(open_dir.iterdir()) == []
    finally:
        env.close()


def test_a_verifiers_reward_that_evaluates_the_answer_runs_it_in_the_scorer_child(open_dir: Path) -> None:
    require("verifiers.v1")
    from tests.environments.interop.vf_tasksets import eval_taskset

    env = gym.make("agentgym/Verifiers-v0", taskset=eval_taskset())
    patch = "[setattr(c, 'evaluated', lambda *a, **k: 1.0) for c in __import__('gc').get_objects() if isinstance(c, type)]"
    try:
        for p in [*payloads(open_dir), patch]:
            r, _ = play(env, p, index=2)
            assert r == 0.0
        assert list(open_dir.iterdir()) == []
        assert play(env, "Done.", index=2)[0] == 0.0  # no patch outlived its child
        assert play(env, "2 + 2", index=2)[0] == 1.0  # the reward still works (and still evaluates)
        assert env.unwrapped._scorer is not None and env.unwrapped._scorer.sessions >= 7
    finally:
        env.close()
