"""Wall time of one PPO step (and warm-start step) of a CPU recipe, this checkout against a git revision.

Both sides run the same measurement in their own subprocess, interleaved (A B A B ...), so
the machine's load hits both alike; the script prints each side's median step time, its
update time (the learner part) and the ratio. The baseline revision is unpacked into a
temporary folder (``git archive``) and imported through ``PYTHONPATH`` (a symlink tree that maps the
repository's folders onto the ``agentgym`` namespace, as the editable install does).

    python bench/trainer_step_time.py --against c982f5d            # before/after of the learner
    python bench/trainer_step_time.py --against c982f5d --rounds 3 --steps 3
    python bench/trainer_step_time.py --against c982f5d --sft-steps 6   # + warm-start steps
    python bench/trainer_step_time.py --against 390d5d6 --config cpu-lookup --steps 0 --sft-steps 6 seed=902

One measurement = ``cpu-quickstart``, one torch thread: ``--sft-steps`` warm-start steps of 32
demonstrations (the quickstart's wall time is mostly warm start), then, as ``Trainer.run``
goes on, the KL reference (``ppo.kl_coef`` 0.05) and ``--steps`` PPO steps of 32 episodes
(4 tasks x 8 samples); the first step of each is dropped (warm-up). ``--config`` measures
another recipe the same way (``--steps 0``: its warm start alone). With ``--sft-steps 0``
the sides differ: the baseline had no KL reference without a warm start (one of the bugs
fixed here), so this checkout's update also runs the reference's forward.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = {"agentgym": "agentgym", "environments": "environments", "sandboxes": "sandboxes",
             "trainer": "trainer", "leaderboards": "leaderboards"}


def measure(config: str, steps: int, sft_steps: int, overrides: list[str]) -> dict[str, float]:
    """Run in the child: ``sft_steps`` warm-start steps, then ``steps`` PPO steps; timings of
    all but the first of each."""
    import torch

    from agentgym.trainer.config import load_config
    from agentgym.trainer.sft import run_sft
    from agentgym.trainer.train import Trainer

    torch.set_num_threads(1)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as run_dir:
        # the warm start runs all its steps: no held-out stopping check inside the measurement
        stopping = ["sft.check_every=0", "sft.stop_pass_at_k=null", "sft.stop_pass_at_1=null"] if sft_steps else []
        cfg = load_config(config, [*stopping, f"sft.steps={sft_steps}", "log.eval_every=0", "log.progress=false",
                                             "log.plots=false", "log.tensorboard=false",
                                             "log.checkpoint_every=0", f"log.run_dir={run_dir}", *overrides])
        trainer = Trainer(cfg)
        s = getattr(trainer, "s", None)  # older revisions: one Setup; now a Learner and its Rollouts
        learner = getattr(trainer, "learner", None)
        if sft_steps and learner is not None:  # as Trainer.run does it: warm start, then the KL reference
            with learner.compute():
                run_sft(cfg, learner, trainer.rollouts, trainer.log)
            learner.save_warm_start()
            learner.start_reference(resumed=False)
        elif sft_steps:
            with getattr(s, "compute", contextlib.nullcontext)():
                run_sft(cfg, s, trainer.log)
            s.after_warm_start()  # the baseline takes its reference here
            if hasattr(s, "start_reference"):
                s.start_reference(resumed=False)
        if sft_steps:
            with open(Path(run_dir) / "metrics.jsonl") as f:
                sft = [r["t_step"] for r in map(json.loads, f) if r["phase"] == "sft"][1:]
            out["t_sft_step"] = statistics.median(sft) if sft else float("nan")
        rows = [trainer.train_step(i) for i in range(steps)]
        (s if learner is None else trainer).close()
    rows = rows[1:]
    if not rows:
        return out
    out.update({"t_step": statistics.median(r["t_step"] for r in rows),
                "t_update": statistics.median(r["t_update"] for r in rows),
                "t_rollout": statistics.median(r["t_rollout"] for r in rows),
                "reward_mean": rows[-1]["reward_mean"]})
    return out


def namespace_tree(checkout: Path, into: Path) -> Path:
    """A folder whose ``agentgym`` package is ``checkout`` laid out as the installed namespace."""
    pkg = into / "agentgym"
    pkg.mkdir(parents=True)
    for item in (checkout / "agentgym").iterdir():
        (pkg / item.name).symlink_to(item)
    for sub, folder in NAMESPACE.items():
        if sub != "agentgym" and (checkout / folder).exists():
            (pkg / sub).symlink_to(checkout / folder)
    return into


def run_child(pythonpath: Path | None, config: str, steps: int, sft_steps: int,
              overrides: list[str]) -> dict[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run([sys.executable, __file__, "--child", "--config", config, "--steps", str(steps),
                          "--sft-steps", str(sft_steps), *overrides],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child failed ({pythonpath or 'this checkout'}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", default=None, help="git revision to compare with (omit: this checkout only)")
    ap.add_argument("--config", default="cpu-quickstart", help="recipe to measure")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per side")
    ap.add_argument("--steps", type=int, default=3, help="PPO steps per measurement (first dropped)")
    ap.add_argument("--sft-steps", type=int, default=0, help="warm-start steps per measurement (first dropped)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="extra config overrides (KEY=VALUE)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.config, args.steps, args.sft_steps, args.overrides)))
        return
    print(f"load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        base_path = None
        if args.against:  # the revision's files, unpacked (no git worktree, nothing to clean up)
            wt = Path(tmp) / "base"
            wt.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.against],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(wt)], input=archive, check=True)
            base_path = namespace_tree(wt, Path(tmp) / "path")
        res: dict[str, list[dict[str, float]]] = {"this": [], "base": []}
        for r in range(args.rounds):
            res["this"].append(run_child(None, args.config, args.steps, args.sft_steps, args.overrides))
            print(f"round {r + 1} this checkout: {res['this'][-1]}", flush=True)
            if base_path is not None:
                res["base"].append(run_child(base_path, args.config, args.steps, args.sft_steps, args.overrides))
                print(f"round {r + 1} {args.against}: {res['base'][-1]}", flush=True)
    print(f"load average {os.getloadavg()}")
    for key in ("t_sft_step", "t_step", "t_update", "t_rollout"):
        if key not in res["this"][0]:
            continue
        this = statistics.median(x[key] for x in res["this"])
        line = f"{key:10s} this checkout {this:7.3f} s"
        if res["base"]:
            base = statistics.median(x[key] for x in res["base"])
            line += f" | {args.against} {base:7.3f} s | ratio this/base {this / base:.3f}"
        print(line)


if __name__ == "__main__":
    main()
