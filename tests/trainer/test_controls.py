"""Controls from one shared warm start: an arm that loads the saved warm start continues exactly
as the run that made it; placebo / RFT / SFT arms run with the same budget; the comparison is
paired on the held-out problems; the warm start stops at its held-out criterion and a warm start
that did not learn its tool loop fails loudly."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from agentgym.errors import ConfigError, WarmStartFailed
from agentgym.trainer.algo.imitation import informative_groups, successful
from agentgym.trainer.cli import main
from agentgym.trainer.config import load_config
from agentgym.trainer.controls import (
    arm_config,
    comparison_lines,
    run_seeds,
    run_with_controls,
    seeds_table,
)
from agentgym.trainer.imitation import imitation_update
from agentgym.trainer.metrics import read_metrics
from agentgym.trainer.sft import BEST_FILE, BestCheck, stop_reason
from agentgym.trainer.train import Trainer

ROOT = Path(__file__).resolve().parents[2]
TINY = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
        "env.max_turns=2", "env.max_action_tokens=24", "rollout.tasks_per_step=2", "rollout.samples_per_task=2",
        "log.eval_episodes=4", "log.eval_episodes_final=0", "log.eval_samples=2", "sft.batch_size=4",
        "sft.check_every=0", "sft.stop_pass_at_k=null", "sft.stop_pass_at_1=null", "sft.min_wellformed=0",
        "controls=[]", "ppo.steps=1", "ppo.lr=1e-2", "ppo.entropy_coef=0.01"]


def _strip(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    noisy = ("t_", "gen_s", "env_s", "loaded_from")
    return [{k: v for k, v in r.items() if not k.startswith(noisy)} for r in rows]


def test_an_arm_from_the_saved_warm_start_continues_exactly_as_the_run_that_made_it(tmp_path: Path) -> None:
    """Weights, the warm start's AdamW moments (carried into RL) and its evaluation come back from
    RUN_DIR/warm_start: the first RL step of an arm that loads them is the run's own, bit for bit."""
    cfg = load_config("cpu-quickstart", [*TINY, f"log.run_dir={tmp_path / 'run'}", "sft.steps=3"])
    Trainer(cfg).run()
    warm = tmp_path / "run" / "warm_start"
    assert (warm / "sft_optimizer.pt").exists() and (warm / "warm_start.json").exists()
    arm = arm_config(cfg, "ppo", warm, tmp_path / "arm")
    assert arm.sft.steps == 0 and arm.sft.load == str(warm)
    Trainer(arm).run()
    a, b = read_metrics(tmp_path / "run"), read_metrics(tmp_path / "arm")
    assert _strip([r for r in a if r["phase"] == "train"]) == _strip([r for r in b if r["phase"] == "train"])
    ws = [r for r in b if r["phase"] == "eval" and r["stage"] == "warm_start"]
    assert len(ws) == 1 and ws[0]["loaded_from"] == str(warm)  # reused, not evaluated again
    assert _strip([r for r in a if r["phase"] == "eval"]) == _strip([r for r in b if r["phase"] == "eval"])


def test_controls_run_from_one_warm_start_and_are_compared_on_the_same_problems(tmp_path: Path) -> None:
    cfg = load_config("cpu-quickstart", [*TINY, f"log.run_dir={tmp_path}", "sft.steps=2",
                                         "controls=[placebo, rft, sft]", "log.eval_every=1", "log.plots=true"])
    _, lines = run_with_controls(cfg)
    assert (tmp_path / "plots" / "controls.png").stat().st_size > 10_000  # the arms against each other
    assert (tmp_path / "plots" / "held_out.png").exists() and (tmp_path / "plots" / "sft.png").exists()
    for arm, algo, placebo in (("placebo", "ppo", True), ("rft", "rft", False), ("sft", "sft", False)):
        d = tmp_path / "controls" / arm
        c = load_config(d / "config.yaml")
        assert (c.algo, c.ppo.placebo, c.sft.load) == (algo, placebo, str(tmp_path / "warm_start"))
        train = read_metrics(d, "train")
        assert len(train) == 1
    rft = read_metrics(tmp_path / "controls" / "rft", "train")[0]
    assert "rft_kept_frac" in rft and "pg_loss" not in rft
    sft = read_metrics(tmp_path / "controls" / "sft", "train")[0]
    assert sft["demo_episodes"] == 4 and sft["imitation_episodes"] == 4.0  # PPO's episode budget
    assert lines[0].startswith("controls, T=1 (primary; 4 held-out problems x 2 samples; same warm start and "
                               "seeds): warm start ")
    assert "| placebo " in lines[0] and "| RFT " in lines[0] and "| SFT " in lines[0]
    # the recipe's update (one epoch, one minibatch, no baseline) is named for what it computed
    me = "REINFORCE on successes"
    assert f"{me} - placebo " in lines[1] and "paired" in lines[1] and f"{me} - SFT" in lines[1]
    alone = comparison_lines(str(tmp_path), {})
    assert len(alone) == 2 and all(me in line and "placebo" not in line for line in alone)
    # resuming the finished run finds the finished arms and keeps them
    mtime = (tmp_path / "controls" / "rft" / "metrics.jsonl").stat().st_mtime
    _, again = run_with_controls(cfg, resume=True)
    assert (tmp_path / "controls" / "rft" / "metrics.jsonl").stat().st_mtime == mtime and again == lines


def test_rft_learns_only_from_successes_and_dynamic_sampling_keeps_informative_groups() -> None:
    from types import SimpleNamespace

    def ep(outcome: float) -> SimpleNamespace:
        return SimpleNamespace(turns=[SimpleNamespace(components={"outcome": outcome})], total_reward=outcome)

    trajs = [ep(1.0), ep(0.0), ep(0.0), ep(0.0), ep(1.0), ep(1.0)]
    assert successful(trajs) == [trajs[0], trajs[4], trajs[5]]
    assert informative_groups(trajs, [0, 0, 1, 1, 2, 2]) == [0, 1]


def test_imitation_update_raises_the_likelihood_of_what_it_imitates(tmp_path: Path) -> None:
    import gymnasium as gym

    from agentgym.trainer.algo.batch import make_batch
    from agentgym.trainer.algo.episode import Episode
    from agentgym.trainer.rollout.demos import demonstrations, find_oracle

    cfg = load_config("cpu-quickstart", [*TINY, f"log.run_dir={tmp_path}", "sft.steps=0", "algo=sft",
                                         "ppo.minibatches=2", "ppo.epochs=2", "ppo.lr=3e-3"])
    t = Trainer(cfg)
    demos = demonstrations(gym.make("agentgym/MathCalc-v1", prompt="compact"), find_oracle("agentgym/MathCalc-v1"),
                           [11, 12, 13, 14], {})
    episodes = [Episode.from_record(d) for d in demos]  # no log-probs: nothing was sampled
    b = make_batch(episodes, [0, 1, 2, 3], pad_id=t.learner.pad_id)

    def nll() -> float:
        with torch.no_grad():
            out = t.learner.forward(t.learner.model, b, entropy=False)
        return float(-(out.logprobs * b.policy_mask).sum() / b.policy_mask.sum())

    before = nll()
    m = imitation_update(t.learner, cfg, episodes, 0)
    assert nll() < before - 0.3 and m["imitation_episodes"] == 4.0
    assert t.learner.optimizer.state[next(iter(t.learner.model.parameters()))]["step"] == 4  # 2 epochs x 2 minibatches
    assert imitation_update(t.learner, cfg, [], 1)["update_skipped"] == 1.0
    t.close()


def test_between_seed_intervals_use_students_t() -> None:
    from agentgym.trainer.controls import between_seeds, t95

    st = between_seeds([0.10, 0.02, 0.06, 0.04, 0.08])
    assert st["n"] == 5 and st["mean"] == pytest.approx(0.06)
    assert st["se"] == pytest.approx(math.sqrt(0.004 / 4 / 5))
    assert st["lo"] == pytest.approx(0.06 - 2.776 * st["se"]) and st["hi"] == pytest.approx(0.06 + 2.776 * st["se"])
    assert st["t"] == pytest.approx(0.06 / st["se"])
    assert t95(1) == 12.706 and t95(30) == 2.042 and 1.96 < t95(200) < 1.98
    one = between_seeds([0.3])
    assert one["se"] == math.inf and one["lo"] == -math.inf  # one seed says nothing about training noise


def test_best_of_group_keeps_each_groups_best_scoring_episode(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from agentgym.trainer.algo.imitation import best_of_group

    ep = [SimpleNamespace(total_reward=r, name=n) for n, r in
          [("a0", 0.2), ("a1", 0.7), ("a2", 0.7), ("b0", 0.0), ("b1", 0.0), ("c0", 1.0), ("c1", 1.0)]]
    assert [e.name for e in best_of_group(ep, [0, 0, 0, 1, 1, 2, 2])] == ["a1", "c0"]  # b: nothing scored
    cfg = load_config("cpu-quickstart", [*TINY, f"log.run_dir={tmp_path}", "sft.steps=0", "algo=raft"])
    assert cfg.arm() == "raft" and arm_config(cfg, "raft", tmp_path / "w", tmp_path / "r").algo == "raft"
    t = Trainer(cfg)
    m = t.train_step(0)
    assert "raft_kept_frac" in m and "pg_loss" not in m
    t.close()


def test_two_seeds_train_on_different_tasks_and_demonstrations(tmp_path: Path) -> None:
    """``seed`` draws every task stream (the warm start's demonstrations, the RL tasks, the
    stopping-check problems); the evaluation block is the same (``log.eval_seed_start`` names it)."""
    import gymnasium as gym

    from agentgym.trainer.episodes import held_out
    from agentgym.trainer.sft import demo_seeds

    env = gym.make("agentgym/MathCalc-v1", prompt="compact")

    def ids(seeds: list[int]) -> set[str]:
        return {env.reset(seed=s, options={"split": "train"})[1]["task_id"] for s in seeds}

    drawn = {}
    for seed in (0, 1):
        cfg = load_config("cpu-quickstart", [*TINY, f"seed={seed}", f"log.run_dir={tmp_path / str(seed)}",
                                             "sft.steps=2", "sft.check_every=1", "sft.check_from=1",
                                             "sft.check_problems=8"])
        t = Trainer(cfg)
        trajs, _, _ = t.rollouts.collect(0)
        held = held_out(cfg, t.rollouts.make_env)
        drawn[seed] = ({tr.traj.task_id for tr in trajs}, ids(demo_seeds(cfg, 0) + demo_seeds(cfg, 1)),
                       {i for _, i in held.check},
                       held.eval_ids())
        t.close()
    (tasks0, demos0, check0, eval0), (tasks1, demos1, check1, eval1) = drawn[0], drawn[1]
    assert tasks0 and not tasks0 & tasks1
    assert len(demos0) > 4 and not demos0 & demos1
    assert check0 and check0 != check1
    assert eval0 == eval1  # the evaluation block is the measurement's, not the seed's


def test_rft_scores_its_loss_at_the_rollout_temperature(tmp_path: Path) -> None:
    """RFT imitates episodes sampled at T: its NLL is that of the policy at T, the distribution
    they came from (one epoch, one minibatch: the loss is the NLL before the step)."""
    import gymnasium as gym

    from agentgym.trainer.algo.batch import make_batch
    from agentgym.trainer.algo.episode import Episode
    from agentgym.trainer.rollout.demos import demonstrations, find_oracle

    cfg = load_config("cpu-quickstart", [*TINY, f"log.run_dir={tmp_path}", "sft.steps=0", "algo=rft",
                                         "rollout.temperature=0.6", "ppo.minibatches=1", "ppo.epochs=1"])
    t = Trainer(cfg)
    demos = [Episode.from_record(d) for d in demonstrations(gym.make("agentgym/MathCalc-v1", prompt="compact"),
                                                            find_oracle("agentgym/MathCalc-v1"), [21, 22], {})]
    b = make_batch(demos, [0, 1], pad_id=t.learner.pad_id)
    with torch.no_grad():
        nll = {T: float(-(t.learner.forward(t.learner.model, b, temperature=T, entropy=False).logprobs
                          * b.policy_mask).sum() / b.policy_mask.sum()) for T in (0.6, 1.0)}
    assert abs(nll[0.6] - nll[1.0]) > 1e-3
    m = t._imitate(demos, [0, 1], 0)  # every demonstration solved its task: RFT keeps them all
    assert m["rft_kept_frac"] == 1.0 and m["loss"] == pytest.approx(nll[0.6], rel=1e-4)
    t.close()


def test_a_step_with_no_gradient_takes_no_optimizer_step_in_any_arm(tmp_path: Path) -> None:
    """RFT with no success skips its optimizer step; PPO with every advantage 0 and no KL,
    entropy or value term does the same (AdamW's momentum and weight decay would still move the
    weights), and steps again as soon as a term has a gradient."""
    base = [*[a for a in TINY if not a.startswith("ppo.entropy_coef")], f"log.run_dir={tmp_path}", "sft.steps=0",
            "ppo.kl_coef=0", "ppo.entropy_coef=0", "ppo.baseline_scale=0", "ppo.group_std_normalize=false",
            "env.kwargs={families: [arithmetic]}"]
    t = Trainer(load_config("cpu-quickstart", base))
    before = [p.detach().clone() for p in t.learner.params]
    trajs, groups, _ = t.rollouts.collect(0)
    assert trajs and all(tr.traj.total_reward == 0 for tr in trajs)  # the untrained policy solves nothing
    t.rollouts.collect = lambda step: (trajs, groups, {})  # type: ignore[method-assign]
    m = t.train_step(0)
    assert m.get("update_skipped") == 1.0 and "ratio_max" not in m
    assert all(torch.equal(a, b) for a, b in zip(before, t.learner.params))
    t.close()
    t = Trainer(load_config("cpu-quickstart", [*base, "ppo.entropy_coef=0.01"]))  # a term with a gradient
    t.rollouts.collect = lambda step: (trajs, groups, {})  # type: ignore[method-assign]
    assert "update_skipped" not in t.train_step(0)
    t.close()


def test_kl_to_warm_start_measures_how_far_an_arm_moved(tmp_path: Path) -> None:
    """An arm's KL to its warm start on its own held-out episodes: above 0 after a step at a large
    lr, exactly 0 once the reference is the arm's own final weights; a dir with no finished run
    is refused with the fix."""
    import shutil

    from agentgym.errors import ConfigError
    from agentgym.trainer.controls import kl_to_warm_start
    from agentgym.trainer.model.files import latest_checkpoint

    run = tmp_path / "run"
    Trainer(load_config("cpu-quickstart", [*TINY, f"log.run_dir={run}", "sft.steps=2", "log.checkpoint_every=1"])).run()
    moved = kl_to_warm_start(run, problems=3, samples=2)
    assert moved["episodes"] == 6 and moved["tokens"] > 0
    assert moved["kl"] > 1e-4 and moved["kl_se"] > 0 and abs(moved["kl_k1"]) > 1e-4
    ckpt = latest_checkpoint(run)
    assert ckpt is not None
    shutil.copy(ckpt / "model" / "model.safetensors", run / "reference" / "model.safetensors")
    same = kl_to_warm_start(run, problems=3, samples=2)
    assert same["kl"] == 0.0 and same["kl_k1"] == 0.0
    with pytest.raises(ConfigError, match="train the arm first"):
        kl_to_warm_start(tmp_path / "nothing")


def test_the_warm_start_stops_at_its_held_out_criterion(tmp_path: Path) -> None:
    from types import SimpleNamespace

    sc = SimpleNamespace(check_samples=8, stop_pass_at_k=0.5, stop_pass_at_1=0.3)
    assert stop_reason(sc, {"pass_at_1": 0.1, "pass_at_8": 0.4}) is None
    assert stop_reason(sc, {"pass_at_1": 0.1, "pass_at_8": 0.55}) == "held-out pass@8 0.550 >= 0.5"
    assert stop_reason(sc, {"pass_at_1": 0.35, "pass_at_8": 0.45}) == "held-out pass@1 0.350 >= 0.3"
    cfg = load_config("cpu-quickstart", [*TINY, f"log.run_dir={tmp_path}", "sft.steps=9", "sft.check_every=3",
                                         "sft.check_from=6", "sft.check_problems=3", "sft.check_samples=2",
                                         "sft.stop_pass_at_1=0.0"])
    Trainer(cfg).run()
    sft = read_metrics(tmp_path, "sft")
    assert len(sft) == 6 and "check_pass_at_2" in sft[-1] and "check_pass_at_1" not in sft[2]
    warm = read_metrics(tmp_path, "warm_start")[0]
    assert warm["steps"] == 6 and warm["stop_reason"].startswith("held-out pass@1 0.000 >= 0")


def test_a_warm_start_at_its_cap_can_keep_its_best_checked_weights(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``sft.keep=best``: a warm start that runs to ``sft.steps`` without meeting its stop rule ends
    with the weights and AdamW state of its best held-out check (here step 2 of 3, scored 0.9
    between 0.5 and 0.1), what every arm then loads; ``last`` keeps step 3's; the file holding
    the best so far is gone once the warm start is saved."""
    from agentgym.trainer.evaluation import Evaluator

    scores = {1: 0.5, 2: 0.9, 3: 0.1}
    weights: dict[str, dict[int, torch.Tensor]] = {}

    def check(self: Evaluator, step: int) -> dict[str, float]:  # scripted scores; the weights as checked
        weights.setdefault(self.cfg.sft.keep, {})[step] = torch.cat(
            [p.detach().flatten().clone() for p in self.rollouts.engine.model.parameters()])
        return {"pass_at_1": scores[step], "pass_at_2": scores[step], "wellformed": 1.0}

    monkeypatch.setattr(Evaluator, "sft_check", check)
    base = [*TINY, "sft.steps=3", "sft.check_every=1", "sft.check_from=1", "sft.check_samples=2", "ppo.steps=0"]
    for keep in ("best", "last"):
        run = tmp_path / keep
        t = Trainer(load_config("cpu-quickstart", [*base, f"log.run_dir={run}", f"sft.keep={keep}"]))
        t.run()
        final = torch.cat([p.detach().flatten() for p in t.learner.model.parameters()])
        warm = read_metrics(run, "warm_start")[0]
        want = weights[keep][2 if keep == "best" else 3]
        torch.testing.assert_close(final, want, rtol=0, atol=0)
        assert not torch.equal(weights[keep][2], weights[keep][3])
        assert warm["steps"] == 3 and not (run / BEST_FILE).exists()
        if keep == "best":
            assert warm["stop_reason"] == "max steps; kept the weights of step 2, the best held-out check (pass@1 0.900)"
            saved = torch.load(run / "warm_start" / "sft_optimizer.pt", weights_only=False)
            assert saved and all(int(st["step"]) == 2 for st in saved.values())  # step 2's AdamW moments
        else:
            assert warm["stop_reason"] == "max steps"
        t.close()
    # the best so far survives a resume (a new warm start in the same dir forgets it)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    BestCheck(tmp_path / BEST_FILE, fresh=True).offer(4, 0.25, model, opt, sched)
    again = BestCheck(tmp_path / BEST_FILE, fresh=False)
    assert (again.step, again.score) == (4, 0.25)
    assert BestCheck(tmp_path / BEST_FILE, fresh=True).step is None and not (tmp_path / BEST_FILE).exists()
    with pytest.raises(ConfigError, match="sft.keep=best keeps the weights of the best held-out check"):
        load_config("cpu-quickstart", [*TINY, "sft.steps=3", "sft.keep=best"])
    # An arm loads its warm start and takes no warm-start step: nothing to keep, nothing refused,
    # whether it runs as its own process (the bench passes sft.keep to every run) or as a control.
    load_config("cpu-quickstart", [*TINY, "sft.steps=0", f"sft.load={tmp_path / 'best' / 'warm_start'}",
                                   "sft.keep=best"])
    cfg = load_config("cpu-quickstart", [*base, "sft.keep=best"])
    assert arm_config(cfg, "rft", tmp_path / "best" / "warm_start", tmp_path / "rft").sft.keep == "best"


def test_the_stopping_check_samples_at_its_own_temperature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sft.check_temperature`` sets the check's sampling temperature apart from training's: near
    zero, the k samples of a problem are the same episode; unset, the check samples at
    rollout.temperature and they differ."""
    import agentgym.trainer.evaluation as evaluation

    seen: list[tuple[float, list[list[int]]]] = []
    real = evaluation.collect_fixed

    def spy(*args, **kw):  # the real collector; records what the check sampled
        trajs = real(*args, **kw)
        if kw.get("sample_seed") == 777_000:
            seen.append((kw["temperature"], [list(e.traj.tokens) for e in trajs]))
        return trajs

    monkeypatch.setattr(evaluation, "collect_fixed", spy)
    base = [*TINY, "sft.steps=2", "sft.check_every=2", "sft.check_from=2", "sft.check_problems=3",
            "sft.check_samples=4", "ppo.steps=0"]
    Trainer(load_config("cpu-quickstart", [*base, f"log.run_dir={tmp_path / 'a'}", "sft.check_temperature=1e-4"])).run()
    Trainer(load_config("cpu-quickstart", [*base, f"log.run_dir={tmp_path / 'b'}"])).run()
    (t_cold, cold), (t_warm, warm) = seen
    assert t_cold == 1e-4 and t_warm == 1.0
    groups = lambda eps: [eps[i:i + 4] for i in range(0, len(eps), 4)]  # noqa: E731  (k samples of a problem)
    assert len(cold) == 12 and all(all(e == g[0] for e in g) for g in groups(cold))
    assert any(len({tuple(e) for e in g}) > 1 for g in groups(warm))
    with pytest.raises(ConfigError, match="sft.check_temperature: expected > 0"):
        load_config("cpu-quickstart", [*TINY, "sft.check_temperature=0"])


def test_a_warm_start_that_did_not_learn_its_tool_loop_fails_loudly(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    args = [*TINY, f"log.run_dir={tmp_path}", "sft.steps=2", "sft.min_wellformed=0.9", "log.eval_every=1",
            "controls=[placebo]"]
    with pytest.raises(WarmStartFailed, match="tool loop did not learn"):
        Trainer(load_config("cpu-quickstart", args)).run()
    code = main(["--config", "cpu-quickstart", *args[:-1], f"log.run_dir={tmp_path / 'cli'}", "controls=[placebo]"])
    out, err = capsys.readouterr()
    assert code == 3 and "WARM START FAILED" in err and "Traceback" not in err
    assert "WARM START FAILED: teacher oracle" in out
    assert not (tmp_path / "cli" / "controls").exists()  # no arm runs from a failed warm start
    assert read_metrics(tmp_path / "cli", "train") == []


@pytest.mark.slow
def test_run_seeds_runs_every_arm_of_every_seed_as_processes(tmp_path: Path) -> None:
    """The seeds bench's engine: per seed a warm-start process, then each arm from it, two at a
    time; the table pairs every arm with PPO on the same problems. ~1 min: 2 seeds x (warm start +
    2 arms) = 6 processes (the placebo arm runs in test_controls_run_from_one_warm_start_...)."""
    arms = {"ppo": ["algo=ppo"], "rft": ["algo=rft"]}
    res = run_seeds("cpu-quickstart", [5, 6], arms, tmp_path, jobs=2, extra=[*TINY, "sft.steps=2", "log.eval_every=1"],
                    say=lambda _: None)
    assert all(r["status"] == "ok" and not r.get("arm_errors") for r in res.values()), res
    table = seeds_table(res, list(arms), "ppo", "sampled_")
    assert table[0].split()[:4] == ["seed", "warm", "ppo", "rft"]
    assert len(table) == 3 and all("±" in row for row in table[1:])
    at_k = seeds_table(res, list(arms), "ppo", "sampled_", pass_at_k=True)  # pass@2: 2 samples a problem
    assert len(at_k) == 3 and all("±" in row and " - " not in row.split("|")[0] for row in at_k[1:])
    for r in res.values():  # each arm started from its own seed's warm start and trained its step
        for arm in arms:
            run = yaml.safe_load((Path(r["dirs"][arm]) / "config.yaml").read_text())
            assert run["seed"] == r["seed"] and run["sft"]["load"] == f"{r['dirs']['warm']}/warm_start", run["sft"]
            assert len(read_metrics(r["dirs"][arm], "train")) == 1
    # bench/controls.py reads these dirs again; an arm asked for but never run is reported, not a traceback
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "controls.py"), "--seeds", "5", "6", "--out",
                          str(tmp_path), "--analyse-only", "--arms", "ppo", "placebo", "rft"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.count("NO   unfinished: placebo, vs RFT") == 2, out.stdout
    # across seeds: every arm minus the warm start, PPO minus each arm, with the between-seed interval
    assert out.stdout.count("between seeds, held-out success") == 3, out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith(("ppo - rft", "rft - warm start"))]
    assert len(rows) == 6 and all(re.search(r"\| +[+-]\d\.\d{3} +\d\.\d{3} .*\[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", r)
                                  for r in rows), rows
    assert re.search(r"ppo - placebo: .*not decided \(0 seed", out.stdout), out.stdout
    # an arm alone is not checked against itself
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "controls.py"), "--seeds", "5", "--out",
                          str(tmp_path), "--analyse-only", "--arms", "rft"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert "bar (no alerts)" in out.stdout and "no control arm" in out.stdout and "vs RFT" not in out.stdout, out.stdout
    # a warm start stopped part way (no warm_start/ yet) makes its seed unfinished, not a comparison
    shutil.rmtree(Path(res[6]["dirs"]["warm"]) / "warm_start")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "controls.py"), "--seeds", "5", "6", "--out",
                          str(tmp_path), "--analyse-only", "--arms", "ppo", "rft"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in out.stderr, out.stderr
    assert re.search(r"^ +6 +NO +warm start unfinished", out.stdout, re.M), out.stdout


def test_the_warm_start_and_the_sft_arm_demonstrate_the_kind_sft_options_name(tmp_path: Path) -> None:
    """cpu-lookup: the demonstrations are chains without faults (``sft.options``: depth 1-3), the
    RL tasks have faults (``env.train_options``); the SFT control continues the warm start's kind."""
    import gymnasium as gym

    from agentgym.trainer.rollout.demos import demonstrations, find_oracle
    from agentgym.trainer.sft import demo_seeds

    cfg = load_config("cpu-lookup", ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false",
                                     f"log.run_dir={tmp_path}", "sft.steps=0", "algo=sft", "controls=[]",
                                     "rollout.tasks_per_step=2", "rollout.samples_per_task=2"])
    t = Trainer(cfg)
    arm = t.rollouts._demos(0)
    assert arm and all(d.traj.task_id.startswith(("lookup/d1/", "lookup/d2/", "lookup/d3/")) for d in arm)
    env = gym.make("agentgym/Lookup-v1", prompt="compact", max_turns=8)
    warm = demonstrations(env, find_oracle("agentgym/Lookup-v1"), demo_seeds(cfg, 0)[:8],
                          {**t.rollouts.train_options(), **cfg.sft.options})
    assert {d.task_id.split("/")[1] for d in warm} <= {"d1", "d2", "d3"}
    # no faults: each demonstration calls lookup exactly once per link (a fault would add a retry)
    assert all(sum(1 for u in d.turns if u.tool) == int(d.task_id.split("/")[1][1:]) for d in warm)
    t.close()


def test_env_sample_option_gives_each_sample_of_a_task_its_own_faults(tmp_path: Path) -> None:
    """cpu-lookup: ``env.sample_option: fault_seed`` resets the samples of a task on one chain with
    fault_seed 0..k-1 (their own faults), so a group can hold a success and a failure; without it
    every sample meets the same faults. An option the env does not declare is refused."""
    base = ["threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", f"log.run_dir={tmp_path}",
            "sft.steps=0", "controls=[]", "rollout.tasks_per_step=2", "rollout.samples_per_task=3",
            "env.max_turns=2", "env.max_action_tokens=8", "log.eval_episodes=2"]
    cfg = load_config("cpu-lookup", base)
    assert cfg.env.sample_option == "fault_seed"  # the recipe's
    t = Trainer(cfg)
    episodes, groups, _, _ = t.rollouts._gather(0)
    t.close()
    assert groups == [0, 0, 0, 1, 1, 1]
    seen = [(e.traj.task_id, e.traj.seed, e.traj.meta["options"].get("fault_seed")) for e in episodes]
    for g in (0, 1):
        mine = [s for s, gi in zip(seen, groups) if gi == g]
        assert len({(task, seed) for task, seed, _ in mine}) == 1, mine  # one task per group
        assert [f for _, _, f in mine] == [0, 1, 2], mine
    t = Trainer(load_config("cpu-lookup", [*base, "env.sample_option=null"]))
    episodes, _, _, _ = t.rollouts._gather(0)
    t.close()
    assert all("fault_seed" not in e.traj.meta["options"] for e in episodes)
    with pytest.raises(ConfigError, match="env.sample_option='fault_sede': not a reset option"):
        load_config("cpu-lookup", [*base, "env.sample_option=fault_sede"])


def test_run_seeds_goes_seed_by_seed_and_skips_the_arms_of_a_failed_warm_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler alone (each process replaced by a stand-in that records its start): a free
    job takes the first run, in seed order, whose warm start is done; ``after`` follows each
    finished run; a seed whose warm start failed runs no arm."""
    import threading
    import time

    import agentgym.trainer.controls as controls

    started: list[tuple[str, str]] = []
    lock = threading.Lock()

    def stand_in(cmd: list[str], run_dir: Path) -> tuple[int, float, bool]:
        with lock:
            started.append((run_dir.parent.name, run_dir.name))
        time.sleep(0.2 if run_dir.name == "warm" else 0.05)
        failed = run_dir.parent.name == "seed-2" and run_dir.name == "warm"
        return (controls.FAILED_WARM_START if failed else 0), 0.0, False

    monkeypatch.setattr(controls, "_start_or_resume", stand_in)
    monkeypatch.setattr(controls, "_failed_warm", lambda run_dir, min_wellformed: False)
    finished: list[tuple[int, str]] = []
    res = run_seeds("cpu-quickstart", [1, 2, 3], {"ppo": [], "rft": []}, tmp_path, jobs=2, say=lambda _: None,
                    after=lambda s, a, d: finished.append((s, a)))
    assert {s: r["status"] for s, r in res.items()} == {1: "ok", 2: "failed warm start", 3: "ok"}
    assert started[:2] == [("seed-1", "warm"), ("seed-2", "warm")]  # seed 1's arms wait for its warm start
    assert started[2:4] == [("seed-1", "ppo"), ("seed-1", "rft")] or started[2] == ("seed-3", "warm")
    assert sorted(started) == sorted([("seed-1", "warm"), ("seed-1", "ppo"), ("seed-1", "rft"), ("seed-2", "warm"),
                                      ("seed-3", "warm"), ("seed-3", "ppo"), ("seed-3", "rft")])
    assert sorted(finished) == [(1, "ppo"), (1, "rft"), (1, "warm"), (3, "ppo"), (3, "rft"), (3, "warm")]
    assert [a for _, a in finished if _ == 1][0] == "warm"


def test_a_run_stopped_part_way_has_no_result_until_its_closing_evaluation(tmp_path: Path) -> None:
    """A periodic evaluation (``log.eval_every``) of a run stopped part way is not its result: the
    bench would otherwise take the run as finished, skip the rest of its steps and compare arms on
    it. The closing evaluation is the one at the run's ``ppo.steps``; a warm start's run (no
    steps) closes with the warm start's."""
    from agentgym.trainer.controls import final_eval, trained_eval, warm_start_done
    from agentgym.trainer.grid import grid_eval

    def run(name: str, steps: int, evals: list[tuple[str, int]]) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "config.yaml").write_text(yaml.safe_dump({"ppo": {"steps": steps}}))
        (d / "metrics.jsonl").write_text("".join(json.dumps({"phase": "eval", "stage": stage, "step": step,
                                                             "success": 0.5}) + "\n" for stage, step in evals))
        return d

    part = run("part", 40, [("warm_start", 0), ("ppo", 10), ("ppo", 20)])
    assert final_eval(part) is None and trained_eval(part) is None
    with pytest.raises(ConfigError, match="has not finished"):
        grid_eval(part, [{"depth": 1}], problems=1, samples=1, seed_start=0)
    assert final_eval(run("before", 40, [("warm_start", 0)])) is None  # stopped before its first step
    done = run("done", 40, [("warm_start", 0), ("ppo", 10), ("ppo", 40)])
    assert final_eval(done)["step"] == 40 and trained_eval(done) == final_eval(done)
    warm = run("warm", 0, [("init", 0), ("warm_start", 0)])
    assert final_eval(warm)["stage"] == "warm_start" and trained_eval(warm) is None
    # a warm start is finished once it saved the warm_start/ every arm loads, not before
    assert not warm_start_done(warm)
    (warm / "warm_start").mkdir()
    (warm / "warm_start" / "warm_start.json").write_text("{}")
    assert warm_start_done(warm) and not warm_start_done(part)


@pytest.mark.slow
def test_a_killed_bench_continues_its_runs_from_their_checkpoints_exactly(tmp_path: Path) -> None:
    """kill -9 of bench/controls.py (its process group) while an arm is between RL steps, after its
    first periodic evaluation; the next
    run_seeds reuses the finished warm start and resumes the arm from its last checkpoint, and
    the arm's record is the uninterrupted one's (timings aside)."""
    import os
    import signal
    import time

    extra = [*TINY, "sft.steps=2", "ppo.steps=4", "log.checkpoint_every=1", "log.eval_every=2"]
    whole = run_seeds("cpu-quickstart", [5], {"ppo": ["algo=ppo"]}, tmp_path / "whole", extra=extra,
                      say=lambda _: None)
    assert whole[5]["status"] == "ok" and not whole[5].get("arm_errors"), whole
    cut = tmp_path / "cut"
    arm_dir = cut / "seed-5" / "ppo"
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "controls.py"), "--seeds", "5", "--out", str(cut),
                             "--arms", "ppo", "--", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    # killed after its periodic evaluation at step 2: a run stopped part way has evaluations too,
    # and the bench must not take the last one for the run's result
    while not [e for e in read_metrics(arm_dir, "eval") if e.get("stage") == "ppo"]:
        assert proc.poll() is None and time.monotonic() < deadline, "the bench ended before it could be killed"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(read_metrics(arm_dir, "train")) < 4  # killed part way
    said: list[str] = []
    res = run_seeds("cpu-quickstart", [5], {"ppo": ["algo=ppo"]}, cut, extra=extra, say=said.append)
    assert res[5]["status"] == "ok" and not res[5].get("arm_errors"), res
    assert said[0].startswith("seed 5: warm start reused") and said[1].startswith("seed 5: ppo (resumed) done"), said
    assert [r["step"] for r in read_metrics(arm_dir, "train")] == [1, 2, 3, 4]
    assert _strip(read_metrics(arm_dir)) == _strip(read_metrics(whole[5]["dirs"]["ppo"]))


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["ppo", "placebo", "rft", "raft", "sft"])
def test_every_arm_of_cpu_lookup_resumes_exactly_and_checkpoints_change_nothing(
        tmp_path: Path, arm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """cpu-lookup's arms (its per-sample fault seeds, 2 epochs x 2 minibatches, the placebo's
    shuffle, RFT's and best-of-group's selection): 3 RL steps never checkpointed equal 2 steps
    checkpointed every step and resumed for the third, bit for bit. A tiny model this briefly
    trained never solves a chain, so every reward would be 0 and RFT, best-of-group and the
    placebo would have nothing to select or shuffle: here each episode ends at its first action
    with an outcome read off the text sampled (the parity of its bytes' sum), which gives every arm
    successes and failures that depend on the sampling."""
    from agentgym.env import ToolEnv
    from agentgym.tools import ToolResult

    def coin(self: ToolEnv, parsed: object, info: dict[str, str], comps: object,
             counts: object) -> tuple[ToolResult, None]:
        return ToolResult("scored", terminal=True, outcome=float(sum(info["text"].encode()) % 2)), None

    monkeypatch.setattr(ToolEnv, "_dispatch", coin)
    small = [*TINY, "env.max_turns=4", "env.max_action_tokens=48", "sft.steps=2", "ppo.lr=1e-3"]
    warm = tmp_path / "warm"
    Trainer(load_config("cpu-lookup", [*small, f"log.run_dir={warm}", "ppo.steps=0"])).run()

    def arm_run(run_dir: Path, steps: int, every: int, *, resume: bool = False) -> None:
        cfg = load_config("cpu-lookup", [*small, f"ppo.steps={steps}", f"log.checkpoint_every={every}"])
        Trainer(arm_config(cfg, arm, warm / "warm_start", run_dir), resume=resume).run()

    arm_run(tmp_path / "whole", 3, 0)
    arm_run(tmp_path / "part", 2, 1)
    arm_run(tmp_path / "part", 3, 1, resume=True)
    whole, part = read_metrics(tmp_path / "whole", "train"), read_metrics(tmp_path / "part", "train")
    assert [r["step"] for r in part] == [1, 2, 3]
    assert _strip(part) == _strip(whole)
    if arm == "sft":  # new demonstrations, no rollouts
        assert all(r["demo_episodes"] > 0 for r in whole)
    else:
        assert any(0 < r["reward_mean"] < 1 for r in whole), [r["reward_mean"] for r in whole]  # mixed groups
    if arm in ("rft", "raft"):
        assert any(r["imitation_episodes"] > 0 for r in whole)  # something imitated
