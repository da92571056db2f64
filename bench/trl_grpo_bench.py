"""agentgym's PPO loop vs TRL's GRPOTrainer from the CPU quickstart's warm start.

    .venv/bin/python bench/trl_grpo_bench.py --run runs/cpu-quickstart --steps 20

Both trainers start from the same weights (``RUN/warm_start``, the quickstart's warm start: a
tiny GPT-OSS that imitated the oracle until its held-out check stopped it), train for the same number of steps on the same task stream (MathCalc-v1
with the run's env settings, the same task seeds and sampling seeds per step, 4 tasks x 8
samples), with the same hyper-parameters: the run's ``ppo.lr`` and warmup, clip 0.2/0.28,
token-level loss (TRL ``loss_type="dapo"``), group baseline normalised by the group's std,
one update per batch, k3 KL to the warm start in the loss with the run's ``ppo.kl_coef``
(TRL ``beta``), gradient clipping 1.0, a fresh AdamW on both sides (the warm start's
optimizer moments are not saved, so agentgym's ``carry_sft_optimizer`` is off here).

TRL has no token-level multi-turn rollouts of its own: its ``rollout_func`` hook runs the
agentgym environment with transformers-style sampling (agentgym's plain ``hf`` engine on
TRL's own model: every prompt prefilled in full), returning prompt ids, completion ids
(actions + tool results), the env mask (tool results get no loss) and the sampling log-probs;
the reward is the environment's (sparse: 1 for the right number). agentgym runs its own loop.

Printed: wall seconds per step (mean after the first) and, for the warm start and each
trained model, success on the same fixed evaluation tasks (the trainer's eval seeds),
greedy and at the training temperature, with 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

def hf_byte_tokenizer() -> Any:
    """agentgym's ByteTokenizer as a transformers PreTrainedTokenizer (TRL needs one)."""
    from transformers import PreTrainedTokenizer

    from agentgym.tokenizers import ByteTokenizer

    byte = ByteTokenizer()

    class HFByte(PreTrainedTokenizer):
        vocab_files_names: dict[str, str] = {}
        model_input_names = ["input_ids", "attention_mask"]

        def __init__(self, **kw: Any) -> None:
            self.byte = byte
            super().__init__(pad_token="<|endoftext|>", eos_token="<|return|>", **kw)

        @property
        def vocab_size(self) -> int:
            return byte.vocab_size

        def get_vocab(self) -> dict[str, int]:
            v = {chr(i) if i < 128 else f"<0x{i:02X}>": i for i in range(256)}
            v.update({byte.decode([i]): i for i in range(256, byte.vocab_size)})
            return v

        def _tokenize(self, text: str, **kw: Any) -> list[str]:
            return [f"<0x{b:02X}>" for b in text.encode()]

        def _convert_token_to_id(self, token: str) -> int:
            if token.startswith("<0x") and len(token) == 6:
                return int(token[3:5], 16)
            return byte.special_id(token) if token != "<|endoftext|>" else byte.pad_id

        def _convert_id_to_token(self, index: int) -> str:
            return f"<0x{index:02X}>" if index < 256 else byte.decode([index])

        def convert_tokens_to_string(self, tokens: list[str]) -> str:
            out = bytearray()
            for t in tokens:
                if t.startswith("<0x") and len(t) == 6:
                    out.append(int(t[3:5], 16))
                else:
                    out += t.encode()
            return out.decode("utf-8", errors="replace")

        def decode(self, ids: Any, skip_special_tokens: bool = False, **kw: Any) -> str:  # type: ignore[override]
            ids = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
            if skip_special_tokens:
                ids = [i for i in ids if i < 256]
            return byte.decode(ids)

        def batch_decode(self, seqs: Any, skip_special_tokens: bool = False, **kw: Any) -> list[str]:  # type: ignore[override]
            return [self.decode(s, skip_special_tokens=skip_special_tokens) for s in seqs]

        def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
            return ()

    return HFByte()


def build_model(init: str, seed: int) -> Any:
    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.model.files import load_weights
    from agentgym.trainer.model.gptoss import build_tiny_gptoss

    model = build_tiny_gptoss(ByteTokenizer().vocab_size, seed=seed)
    load_weights(model, init)
    return model


def bench_config(run: Path, steps: int, run_dir: str, extra: list[str]) -> Any:
    """The run's own config, continued from its warm start without SFT, for ``steps`` steps."""
    from agentgym.trainer.config import load_config

    return load_config(run / "config.yaml", [
        f"log.run_dir={run_dir}", "sft.steps=0", f"model.init_from={run / 'warm_start'}",
        f"ppo.steps={steps}", "ppo.carry_sft_optimizer=false", "log.eval_every=0",
        "log.checkpoint_every=0", "log.plots=false", "log.progress=false", "log.tensorboard=false",
        "curriculum.levels=[]", *extra])


def run_agentgym(cfg: Any) -> tuple[dict[str, Any], Any]:
    from agentgym.trainer.episodes import TRAIN_SEED_BASE
    from agentgym.trainer.train import Trainer

    assert TRAIN_SEED_BASE == 1_000_000
    trainer = Trainer(cfg)
    trainer.learner.save_warm_start()  # the KL reference: the warm start itself (as TRL's ref model)
    times, rewards = [], []
    for step in range(cfg.ppo.steps):
        t0 = time.perf_counter()
        m = trainer.train_step(step)
        times.append(time.perf_counter() - t0)
        rewards.append(m["reward_mean"])
    trainer.close()
    return {"step_s": times, "reward": rewards}, trainer.learner.model


def run_trl(cfg: Any, out_dir: str) -> tuple[dict[str, Any], Any]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.rollout.collector import Collector
    from agentgym.trainer.rollout.engines.hf import HFEngine

    tok = hf_byte_tokenizer()
    model = build_model(str(cfg.model.init_from), cfg.seed)
    # with beta > 0, GRPOTrainer loads its reference model from the policy's config path
    model.config._name_or_path = str(cfg.model.init_from)
    tasks, samples = cfg.rollout.tasks_per_step, cfg.rollout.samples_per_task
    n = tasks * samples
    make_env = _env_factory(cfg, ByteTokenizer())
    step_counter = {"i": 0}
    collector: dict[str, Any] = {}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        if "c" not in collector:  # plain transformers-style sampling on TRL's own model
            collector["c"] = Collector.from_factory(make_env, n, HFEngine(trainer.model, pad_id=tok.pad_token_id),
                                                    max_new_tokens=cfg.env.max_action_tokens)
        i = step_counter["i"]
        step_counter["i"] += 1
        seeds = [1_000_000 + i * tasks + t for t in range(tasks) for _ in range(samples)]
        episodes, _ = collector["c"].collect(seeds, temperature=cfg.rollout.temperature,
                                             sample_seed=cfg.seed * 7919 + i * 131, options=cfg.env.train_options)
        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                               "env_reward": []}
        for e in episodes:
            t = e.traj
            out["prompt_ids"].append(t.tokens[:t.prompt_len])
            out["completion_ids"].append(t.tokens[t.prompt_len:])
            out["logprobs"].append([lp if lp is not None else 0.0 for lp in e.logprobs[t.prompt_len:]])
            out["env_mask"].append(t.policy_mask[t.prompt_len:])
            out["env_reward"].append(t.total_reward)
        return out

    def env_reward(completions: list[Any], env_reward: list[float], **kw: Any) -> list[float | None]:
        return list(env_reward)

    data = Dataset.from_list([{"prompt": f"task {i}"} for i in range(tasks * (cfg.ppo.steps + 2))])
    config = GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=n, num_generations=samples,
        gradient_accumulation_steps=1, max_steps=cfg.ppo.steps, learning_rate=cfg.ppo.lr,
        lr_scheduler_type="constant_with_warmup", warmup_steps=cfg.ppo.warmup_steps,
        max_grad_norm=cfg.ppo.max_grad_norm, weight_decay=cfg.ppo.weight_decay,
        epsilon=cfg.ppo.clip_low, epsilon_high=cfg.ppo.clip_high, beta=cfg.ppo.kl_coef,
        loss_type="dapo", num_iterations=1, temperature=cfg.rollout.temperature,
        max_completion_length=cfg.env.max_action_tokens * 2 * cfg.env.max_turns + 64,
        logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False,
        shuffle_dataset=False, seed=cfg.seed, dataloader_num_workers=0, disable_tqdm=True,
    )
    times: list[float] = []
    rewards: list[float] = []

    class Timer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            times.append(time.perf_counter() - self.t0)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))

    trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=config, train_dataset=data,
                          processing_class=tok, rollout_func=rollout_func, callbacks=[Timer()])
    trainer.train()
    if "c" in collector:
        collector["c"].close()
    return {"step_s": times, "reward": rewards}, trainer.model


def _env_factory(cfg: Any, tokenizer: Any) -> Any:
    import gymnasium as gym

    import agentgym  # noqa: F401  (registers the environments)

    def make_env() -> Any:
        return gym.make(cfg.env.id, tokenizer=tokenizer, reward_mode=cfg.env.reward_mode,
                        max_turns=cfg.env.max_turns, max_tokens=cfg.env.max_tokens,
                        max_action_tokens=cfg.env.max_action_tokens, prompt=cfg.env.prompt, **cfg.env.kwargs)

    return make_env


def evaluate(cfg: Any, model: Any, episodes: int) -> dict[str, Any]:
    """Success on the trainer's fixed eval tasks, greedy and at the training temperature."""
    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.evaluation import collect_fixed, eval_record
    from agentgym.trainer.rollout.collector import Collector, make_prefix_engine
    EVAL_SEED_BASE = 0  # the trainer's evaluation problems: from seed 0 of the eval split

    model.eval()
    col = Collector.from_factory(_env_factory(cfg, ByteTokenizer()), min(64, episodes),
                                 make_prefix_engine(model, pad_id=ByteTokenizer().pad_id),
                                 max_new_tokens=cfg.env.max_action_tokens)
    out: dict[str, Any] = {}
    try:
        for prefix, t in (("", cfg.log.eval_temperature), ("sampled_", cfg.rollout.temperature)):
            trajs = collect_fixed(col, episodes, temperature=t, sample_seed=12345,
                                  options=cfg.env.eval_options, seed_base=EVAL_SEED_BASE)
            out.update(eval_record(trajs, t, prefix))
    finally:
        col.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a finished agentgym-train run of the CPU quickstart "
                    "(its config.yaml and warm_start/)")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: the run's ppo.steps)")
    ap.add_argument("--episodes", type=int, default=256, help="fixed evaluation tasks")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the raw numbers here")
    ap.add_argument("overrides", nargs="*", help="extra KEY=VALUE overrides for both sides")
    args = ap.parse_args()
    from agentgym.trainer.config import load_config
    from agentgym.trainer.stats import gain

    torch.set_num_threads(args.threads)
    run = Path(args.run)
    steps = args.steps or load_config(run / "config.yaml").ppo.steps
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        cfg = bench_config(run, steps, os.path.join(d, "ag"), [f"threads={args.threads}", *args.overrides])
        results["warm start"] = {"eval": evaluate(cfg, build_model(str(cfg.model.init_from), cfg.seed), args.episodes)}
        torch.manual_seed(cfg.seed)
        r, model = run_agentgym(cfg)
        results["agentgym"] = {**r, "eval": evaluate(cfg, model, args.episodes)}
        torch.manual_seed(cfg.seed)
        r, model = run_trl(cfg, os.path.join(d, "trl"))
        results["TRL GRPOTrainer"] = {**r, "eval": evaluate(cfg, model, args.episodes)}
    warm = results["warm start"]["eval"]
    print(f"{steps} steps of {cfg.rollout.tasks_per_step} tasks x {cfg.rollout.samples_per_task} samples "
          f"from {run / 'warm_start'}; success on {args.episodes} fixed tasks, 95% intervals")
    print(f"{'trainer':<17}{'s/step':>8}  {'greedy':<26}{'T=' + format(cfg.rollout.temperature, 'g'):<26}"
          f"{'gain over warm start (greedy / sampled)'}")
    for name, r in results.items():
        e = r["eval"]
        cells = [f"{e[p + 'success']:.3f} [{e[p + 'success_lo']:.3f}, {e[p + 'success_hi']:.3f}]"
                 for p in ("", "sampled_")]
        st = r.get("step_s", [])
        sps = f"{statistics.mean(st[1:] or st):8.2f}" if st else f"{'-':>8}"
        gains = ""
        if name != "warm start":
            gs = [gain(warm, e, p) for p in ("", "sampled_")]
            gains = " / ".join(f"{g['gain']:+.3f} ± {g['se']:.3f}" for g in gs if g)
        print(f"{name:<17}{sps}  {cells[0]:<26}{cells[1]:<26}{gains}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
