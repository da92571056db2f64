"""agentgym's PPO loop vs TRL's GRPOTrainer, side by side in one process, on the same tiny
GPT-OSS (same initial weights), the same tasks, batch size and samples per task.

    .venv/bin/python bench/trl_grpo_bench.py --init-single RUN_A/warm_start --init-multi RUN_B/warm_start --steps 10

Both trainers get the same rollouts machinery where TRL has none of its own for token-level
multi-turn episodes: TRL's experimental ``rollout_func`` hook runs the agentgym environment with
transformers sampling (agentgym's plain ``hf`` engine on TRL's model), returns prompt ids,
completion ids (actions + tool results), the env mask (tool results get no loss) and the
sampling log-probs; the reward function returns the environment's reward. agentgym runs its
own loop (prefix-sharing engine, exact on-policy ratio, seq-TIS). Same hyper-parameters on
both sides: lr, clip 0.2/0.28, token-level loss, 1 iteration per batch, no KL, temperature 1.

Printed: wall seconds per training step (mean over the steps after the first) and the mean
sampled reward of the last steps, for single-turn Math-v0 and multi-turn MathCalc-v0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TASKS = {"single": "agentgym/Math-v0", "multi": "agentgym/MathCalc-v0"}
# Both sides: easy arithmetic, shaped reward (outcome + format - malformed - per turn).
ENV_KWARGS = {"families": ["arithmetic"], "levels": ["easy"], "reward_mode": "shaped"}


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

        def decode(self, ids: Any, skip_special_tokens: bool = False, **kw: Any) -> str:
            ids = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
            if skip_special_tokens:
                ids = [i for i in ids if i < 256]
            return byte.decode(ids)

        def batch_decode(self, seqs: Any, skip_special_tokens: bool = False, **kw: Any) -> list[str]:
            return [self.decode(s, skip_special_tokens=skip_special_tokens) for s in seqs]

        def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
            return ()

    return HFByte()


def build_model(init: str | None, seed: int) -> Any:
    from agentgym.tokenizers import ByteTokenizer
    from agentgym.trainer.model import build_tiny_gptoss
    from agentgym.trainer.train import load_weights

    model = build_tiny_gptoss(ByteTokenizer().vocab_size, seed=seed)
    if init:
        load_weights(model, init)
    return model


def run_agentgym(task: str, args: argparse.Namespace, run_dir: str) -> dict[str, Any]:
    from agentgym.trainer.config import load_config
    from agentgym.trainer.train import Trainer

    cfg = load_config("cpu-quickstart", [
        f"env.id={TASKS[task]}", f"log.run_dir={run_dir}", "sft.steps=0", f"ppo.steps={args.steps}",
        f"rollout.tasks_per_step={args.tasks}", f"rollout.samples_per_task={args.samples}",
        f"ppo.lr={args.lr}", "ppo.warmup_steps=1", f"threads={args.threads}", "log.eval_every=0",
        "log.checkpoint_every=0", "log.plots=false", "log.progress=false", "log.tensorboard=false",
        f"env.max_action_tokens={args.max_tokens}", f"env.max_turns={1 if task == 'single' else 2}",
        "env.reward_mode=shaped", "env.prompt=harmony", "env.kwargs={families: [arithmetic], levels: [easy]}",
        "ppo.carry_sft_optimizer=false"])
    trainer = Trainer(cfg)
    init = getattr(args, f"init_{task}")
    if init:
        from agentgym.trainer.train import load_weights

        load_weights(trainer.s.model, init)
        trainer.s.engine.sync_weights(trainer.s.model)
    times, rewards = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        m = trainer.train_step(step)
        times.append(time.perf_counter() - t0)
        rewards.append(m["reward_mean"])
    trainer.s.close()
    return {"step_s": times, "reward": rewards}


def run_trl(task: str, args: argparse.Namespace, out_dir: str) -> dict[str, Any]:
    import gymnasium as gym
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from agentgym.trainer.engines.hf import HFEngine
    from agentgym.trainer.rollout import Collector

    tok = hf_byte_tokenizer()
    model = build_model(getattr(args, f"init_{task}"), args.seed)
    n = args.tasks * args.samples
    turns = 1 if task == "single" else 2

    def make_env() -> Any:
        return gym.make(TASKS[task], max_turns=turns, max_action_tokens=args.max_tokens, **ENV_KWARGS)

    step_counter = {"i": 0}
    collector: dict[str, Any] = {}

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        if "c" not in collector:  # plain transformers sampling on TRL's own model
            collector["c"] = Collector.from_factory(make_env, n, HFEngine(trainer.model, pad_id=tok.pad_token_id),
                                                    max_new_tokens=args.max_tokens)
        i = step_counter["i"]
        step_counter["i"] += 1
        seeds = [1_000_000 + i * args.tasks + t for t in range(args.tasks) for _ in range(args.samples)]
        trajs, _ = collector["c"].collect(seeds[:len(prompts)] if len(prompts) < n else seeds,
                                          temperature=1.0, sample_seed=args.seed * 7919 + i * 131)
        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                               "env_reward": []}
        for t in trajs:
            out["prompt_ids"].append(t.tokens[:t.prompt_len])
            out["completion_ids"].append(t.tokens[t.prompt_len:])
            out["logprobs"].append([lp if lp is not None else 0.0 for lp in t.logprobs[t.prompt_len:]])
            out["env_mask"].append(t.policy_mask[t.prompt_len:])
            out["env_reward"].append(t.total_reward)
        return out

    def env_reward(completions: list[Any], env_reward: list[float], **kw: Any) -> list[float]:
        return list(env_reward)

    data = Dataset.from_list([{"prompt": f"task {i}"} for i in range(args.tasks * (args.steps + 2))])
    config = GRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=n, num_generations=args.samples,
        gradient_accumulation_steps=1, max_steps=args.steps, learning_rate=args.lr,
        lr_scheduler_type="constant", max_grad_norm=1.0,
        epsilon=0.2, epsilon_high=0.28, beta=0.0, loss_type="dapo", num_iterations=1,
        temperature=1.0, max_completion_length=args.max_tokens * 2 * turns + 64,
        logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, bf16=False,
        shuffle_dataset=False, seed=args.seed, dataloader_num_workers=0, disable_tqdm=True,
    )
    times: list[float] = []
    rewards: list[float] = []

    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def on_step_begin(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            times.append(time.perf_counter() - self.t0)

        def on_log(self, a: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))

    trainer = GRPOTrainer(model=model, reward_funcs=env_reward, args=config, train_dataset=data,
                          processing_class=tok, rollout_func=rollout_func, callbacks=[Timer()])
    trainer.train()
    if "c" in collector:
        collector["c"].close()
    return {"step_s": times, "reward": rewards}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--init-single", help="warm-start weights for Math-v0 (an agentgym-train run dir)")
    ap.add_argument("--init-multi", help="warm-start weights for MathCalc-v0 (an agentgym-train run dir)")
    ap.add_argument("--task", choices=["single", "multi", "both"], default="both")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the raw numbers here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {}
    for task in (["single", "multi"] if args.task == "both" else [args.task]):
        with tempfile.TemporaryDirectory() as d:
            torch.manual_seed(args.seed)
            results[f"agentgym/{task}"] = run_agentgym(task, args, os.path.join(d, "ag"))
            torch.manual_seed(args.seed)
            results[f"trl/{task}"] = run_trl(task, args, os.path.join(d, "trl"))
    print(f"{'run':18} {'s/step (mean, steps 2..)':>26} {'reward first':>13} {'reward last':>12}")
    for name, r in results.items():
        st = r["step_s"][1:] or r["step_s"]
        print(f"{name:18} {statistics.mean(st):26.2f} {r['reward'][0]:13.3f} {r['reward'][-1]:12.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
