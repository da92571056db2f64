"""Trials that are copies are refused; deterministic entries score one trial; ``verify --model``
ties the actions to the weights the entry names (tiny GPT-OSS models built here, on CPU)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agentgym.leaderboards.cli import leaderboard_main
from agentgym.leaderboards.suite import Suite
from agentgym.leaderboards.verify import summarize, verify_submission
from agentgym.trajectory import Trajectory

from .conftest import make_submission, read_lines, write_lines, write_suite

pytest.importorskip("transformers")

TRIALS = {"name": "trials", "description": "a test suite", "trials": 2, "seed": 0, "sampling": {"temperature": 1.0},
          "envs": [{"id": "agentgym/Math-v1", "kwargs": {"reward_mode": "sparse", "max_turns": 2,
                                                         "max_action_tokens": 64},
                    "tasks": [{"index": 0}, {"index": 1}]}]}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    return write_suite(tmp_path_factory.mktemp("suite"), TRIALS)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny GPT-OSS models for the byte tokenizer that differ only in their initial seed
    (initializer_range 0.3: peaked distributions, so each model's samples are its own)."""
    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.model.gptoss import build_tiny_for

    root = tmp_path_factory.mktemp("models")
    out = {}
    for name, seed in (("a", 0), ("b", 1)):
        build_tiny_for(ByteTokenizer(), seed=seed, initializer_range=0.3, num_hidden_layers=2).save_pretrained(
            root / name)
        out[name] = root / name
    return out


@pytest.fixture(scope="module")
def sampled(suite: Suite, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A submission sampled from each model at the suite's temperature (1.0)."""
    root = tmp_path_factory.mktemp("subs")
    return {k: make_submission(suite, "hf", root / f"{k}.jsonl", model=str(p)) for k, p in models.items()}


def _refoot(suite: Suite, lines: list[dict[str, Any]]) -> None:
    """Make the footer agree with the (edited) episodes, as a forger would."""
    specs = {s.key: s for s in suite.episodes()}
    eps = lines[1:-1]
    per_env, overall = summarize(suite, [(specs[(e["env_id"], e["task"], e["trial"])],
                                          Trajectory.from_dict(e["trajectory"])) for e in eps])
    cost = {k: sum(e["cost"][k] for e in eps) for k in ("input_tokens", "output_tokens", "turns")}
    lines[-1].update(scores=per_env, overall=overall, cost={**lines[-1]["cost"], **cost})


def _copy_trial0(suite: Suite, src: Path, dst: Path, edit: Any = None) -> Path:
    """Trial 0 of every task copied into trial 1, relabelled with trial 1's seed, footer recomputed."""
    lines = read_lines(src)
    seeds = {s.key: s.seed for s in suite.episodes()}
    first = {e["task"]: e for e in lines[1:-1] if e["trial"] == 0}
    for i, e in enumerate(lines):
        if e.get("kind") == "episode" and e["trial"] == 1:
            c = copy.deepcopy(first[e["task"]])
            c["trial"], c["seed"] = 1, seeds[(e["env_id"], e["task"], 1)]
            c["trajectory"]["seed"] = c["seed"]
            if edit is not None:
                edit(c)
            lines[i] = c
    _refoot(suite, lines)
    return write_lines(dst, lines)


# ------------------------------------------------------------------ copied trials

def test_copied_trials_are_refused_with_the_task_named(tmp_path: Path, suite: Suite, sampled: dict[str, Path]) -> None:
    assert verify_submission(sampled["a"], suite=suite, workers=1).ok  # the genuine file
    forged = _copy_trial0(suite, sampled["a"], tmp_path / "copied.jsonl")
    report = verify_submission(forged, suite=suite, workers=1)
    assert not report.ok
    text = "\n".join(report.problems)
    assert len(report.problems) == 2, text  # the copies, and nothing else: the rest of the forgery is consistent
    assert "agentgym/Math-v1 task 0 (index=0): trials 0 and 1 carry the same" in text, text
    assert "agentgym/Math-v1 task 1 (index=1): trials 0 and 1 carry the same" in text
    assert "sampling at temperature 1.0 with different seeds does not repeat them: copies of one episode" in text


def test_a_likely_stream_may_repeat_but_its_log_probs_must_be_the_models(tmp_path: Path, suite: Suite,
                                                                          sampled: dict[str, Path],
                                                                          models: dict[str, Path]) -> None:
    """A forger who also writes log-probs of 0 (probability 1) passes the copy rule, which trusts
    recorded log-probs; the provenance check then finds they are not the model's."""
    def certain(ep: dict[str, Any]) -> None:
        t = ep["trajectory"]
        t["logprobs"] = [0.0 if m else lp for lp, m in zip(t["logprobs"], t["policy_mask"])]
    lines = read_lines(_copy_trial0(suite, sampled["a"], tmp_path / "certain.jsonl", certain))
    for e in lines[1:-1]:
        certain(e)
    forged = write_lines(tmp_path / "certain.jsonl", lines)
    plain = verify_submission(forged, suite=suite, workers=1)
    assert plain.ok, plain.problems
    report = verify_submission(forged, suite=suite, workers=1, model=str(models["a"]), provenance={"seed": 1})
    assert not report.ok
    assert "the recorded log-probs are not this model's" in "\n".join(report.problems)


def test_temperature_must_be_declared(tmp_path: Path, suite: Suite, sampled: dict[str, Path]) -> None:
    lines = read_lines(sampled["a"])
    del lines[0]["submission"]["describe"]["temperature"]
    report = verify_submission(write_lines(tmp_path / "undeclared.jsonl", lines), suite=suite, workers=1)
    assert "line 1 (header): submission.describe has no 'temperature'" in "\n".join(report.problems)
    lines[0]["submission"]["describe"]["temperature"] = "hot"
    report = verify_submission(write_lines(tmp_path / "hot.jsonl", lines), suite=suite, workers=1)
    assert report.problems == ["line 1 (header): submission.describe.temperature is 'hot': expected a number (the "
                               "suite's temperature, or 0 for greedy decoding) or null (a scripted policy)"]


def test_greedy_entries_declare_it_and_score_one_trial(tmp_path: Path, suite: Suite, models: dict[str, Path]) -> None:
    path = make_submission(suite, "hf", tmp_path / "greedy.jsonl", model=str(models["a"]), temperature=0)
    lines = read_lines(path)
    assert lines[0]["submission"]["describe"]["temperature"] == 0
    by_task: dict[int, list[list[int]]] = {}
    for e in lines[1:-1]:
        by_task.setdefault(e["task"], []).append(e["trajectory"]["tokens"])
    assert all(a == b for a, b in by_task.values())  # greedy: the trials are the same episode
    report = verify_submission(path, suite=suite, workers=1)
    assert report.ok, report.problems
    assert report.trials == 1
    s = report.scores["agentgym/Math-v1"]
    assert (s["tasks"], s["episodes"], s["k"]) == (2, 2, 1)  # one sample per task, not two copies
    assert "pass^1" in report.format()


# ------------------------------------------------------------------ provenance: verify --model

def test_verify_model_accepts_the_models_own_actions(sampled: dict[str, Path], models: dict[str, Path],
                                                      suite: Suite) -> None:
    report = verify_submission(sampled["a"], suite=suite, workers=1, model=str(models["a"]), provenance={"seed": 3})
    assert report.ok, report.problems
    prov = report.provenance
    assert prov.ok and prov.episodes == 4 and prov.tokens > 50
    assert prov.mean_abs_dlogp is not None and prov.mean_abs_dlogp < 1e-3
    assert prov.likelihood_z is not None and prov.likelihood_z > -5


def test_verify_model_rejects_actions_of_another_model(tmp_path: Path, sampled: dict[str, Path],
                                                       models: dict[str, Path], suite: Suite) -> None:
    report = verify_submission(sampled["b"], suite=suite, workers=1, model=str(models["a"]), provenance={"seed": 3})
    assert not report.ok
    text = "\n".join(report.problems)
    assert "the recorded log-probs are not this model's" in text
    assert "less likely under" in text and "than its own samples would be" in text
    # Without recorded log-probs, the likelihood of the sampled tokens alone gives it away.
    lines = read_lines(sampled["b"])
    for e in lines[1:-1]:
        e["trajectory"]["logprobs"] = [None] * len(e["trajectory"]["logprobs"])
    bare = write_lines(tmp_path / "bare.jsonl", lines)
    report = verify_submission(bare, suite=suite, workers=1, model=str(models["a"]), provenance={"seed": 3})
    assert not report.ok and report.provenance.mean_abs_dlogp is None
    assert report.provenance.likelihood_z is not None and report.provenance.likelihood_z < -5
    assert verify_submission(bare, suite=suite, workers=1, model=str(models["b"]), provenance={"seed": 3}).ok


def test_verify_model_on_the_command_line(sampled: dict[str, Path], models: dict[str, Path], suite: Suite,
                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    suite_file = tmp_path / "trials.yaml"
    suite_file.write_text(yaml.safe_dump(suite.content, sort_keys=False))
    rc = leaderboard_main(["verify", "--suite", str(suite_file), "--no-progress", "--model", str(models["b"]),
                           "--sample", "2", "--sample-seed", "5", str(sampled["a"])])
    out = capsys.readouterr().out
    assert rc == 1
    assert "provenance FAILED: 2 episodes" in out and "(sample seed 5)" in out
    assert leaderboard_main(["verify", "--sample", "2", str(sampled["a"])]) == 2  # --sample without --model
    assert "--sample, --sample-seed and --tolerance belong to the provenance check" in capsys.readouterr().err


def test_the_board_marks_entries_claimed_unless_checked(tmp_path: Path, suite: Suite, sampled: dict[str, Path],
                                                         models: dict[str, Path]) -> None:
    import shutil

    import yaml

    from agentgym.leaderboards.board import build_board

    root = tmp_path / "root"
    (root / "suites").mkdir(parents=True)
    (root / "suites" / "trials.yaml").write_text(yaml.safe_dump(suite.content, sort_keys=False))
    subs = root / "submissions" / "trials"
    subs.mkdir(parents=True)
    for k in ("a", "b"):
        lines = read_lines(sampled[k])
        lines[0]["submission"]["name"] = f"model-{k}"
        write_lines(subs / f"{k}.jsonl", lines)
    # b's actions under a header that names a's weights: provenance against a fails, it is left off.
    lines = read_lines(sampled["b"])
    lines[0]["submission"]["name"] = "impostor"
    lines[0]["submission"]["describe"] = read_lines(sampled["a"])[0]["submission"]["describe"]
    write_lines(subs / "impostor.jsonl", lines)
    result = build_board(root, workers=1, models=[str(models["a"])])
    assert [p for p in result.problems if "impostor.jsonl does not verify" in p and "not this model's" in p]
    rows = {e.row()["name"]: e.row() for e in result.entries}
    assert set(rows) == {"model-a", "model-b"}
    assert (rows["model-a"]["provenance"], rows["model-b"]["provenance"]) == ("checked", "claimed")
    md = (root / "LEADERBOARD.md").read_text()
    assert "*(checked)*" in md and "*(claimed)*" in md
    shutil.rmtree(root / "board")
