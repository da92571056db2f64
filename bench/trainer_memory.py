"""Peak memory of PPO steps: RSS as the batch grows (the bar is < 4 GiB up to 1,024 episodes), and
the dry run's memory plan against a measured learner step.

    python bench/trainer_memory.py                            # both reports below, one subprocess each
    python bench/trainer_memory.py --mode step --episodes 16 64 --budget 0    # the single-batch "before"
    python bench/trainer_memory.py --mode plan                # plan vs measured, shapes x precisions
    python bench/trainer_memory.py --mode plan-lora           # the same with LoRA adapters (frozen base)

* ``--mode plan``: for each shape (GPT-OSS layers of several widths, float32 and bf16 autocast, with
  and without gradient checkpointing) a real ``ppo_update`` on one micro-batch of rows of the
  planned length, its second call (AdamW's state exists, as in every step after the first) measured
  with :class:`~agentgym.trainer.memtrack.LiveBytes` (live tensor bytes), against
  ``plan.estimate_memory``'s "peak during update" for the same config (one process, CPU: eager
  attention and experts).

* ``--mode step`` (the quickstart model, agentgym's 264-token byte vocabulary): a real
  ``Trainer.train_step`` of ``cpu-quickstart`` without warm start (the untrained policy writes
  the longest episodes: its malformed calls draw error notices), i.e. collection of N
  episodes with the ``hf`` engine + the update. One torch thread.
* ``--mode update --vocab 201088`` (the same tiny GPT-OSS with GPT-OSS's 201,088-token
  vocabulary, random token ids): the learner update alone on N synthetic episodes laid out
  like the quickstart's (a shared 190-token prompt, two sampled actions around a tool
  result). The engine side of a 201k vocabulary belongs to the tokenizer/engine work.

Each measurement runs in a fresh process and reports its peak RSS (``ru_maxrss``, so setup
is included), the RSS just before the step, the step's wall time and its micro-batches.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

GIB = 1 << 30


def _rss_now() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / GIB


def _peak() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def measure_step(episodes: int, budget: int | None) -> dict[str, Any]:
    import torch

    from agentgym.trainer.config import load_config
    from agentgym.trainer.train import Trainer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as run:
        over = ["sft.steps=0", "log.eval_every=0", "log.progress=false", "log.plots=false",
                "log.tensorboard=false", "log.checkpoint_every=0", f"log.run_dir={run}",
                f"rollout.tasks_per_step={max(1, episodes // 8)}", "rollout.samples_per_task=8"]
        if budget is not None:
            over.append(f"ppo.micro_batch_tokens={budget}")
        t = Trainer(load_config("cpu-quickstart", over))
        before = _rss_now()
        m = t.train_step(0)
        t.close()
    return {"rss_before_gib": before, "t_step": m["t_step"], "t_update": m["t_update"],
            "micro_batches": int(m["micro_batches"]), "policy_tokens": int(m["mismatch_n_tokens"])}


def synthetic_batch(n: int, vocab: int, seed: int = 0) -> Any:
    """N episodes like the quickstart's: shared 190-token prompt, action (20-96 tokens), tool
    result (10-60, not policy), answer (10-96); random ids."""
    import torch

    from agentgym.trainer.algo.batch import make_batch
    from agentgym.trainer.algo.episode import Episode
    from agentgym.trajectory import Trajectory, Turn

    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, vocab - 1, (190,), generator=g).tolist()
    trajs = []
    for i in range(n):
        t = Trajectory("agentgym/Synthetic-v0", i, str(i), "random")
        t.append(prompt, policy=False)
        t.prompt_len = len(prompt)
        a1, obs, a2 = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((20, 97), (10, 61), (10, 97)))
        start = len(t.tokens)
        t.append(torch.randint(0, vocab - 1, (a1,), generator=g).tolist(), policy=True)
        t.append(torch.randint(0, vocab - 1, (obs,), generator=g).tolist(), policy=False)
        t.turns.append(Turn(start, start + a1, start + a1 + obs, 0.0))
        start = len(t.tokens)
        t.append(torch.randint(0, vocab - 1, (a2,), generator=g).tolist(), policy=True)
        t.turns.append(Turn(start, start + a2, start + a2, float(i % 3) - 1.0))
        for j in range(len(t.tokens)):
            if t.policy_mask[j]:
                t.logprobs[j] = -float(torch.rand((), generator=g)) * 5
        t.terminated = True
        trajs.append(t)
    return make_batch([Episode.from_record(t) for t in trajs], [i // 8 for i in range(n)], pad_id=vocab - 1)


def _learner(cfg: Any, model: Any, opt: Any, *, bf16: bool) -> Any:
    """A Learner of ``cfg`` whose policy, optimizer and compute dtype are the bench's own."""
    import torch

    from agentgym.trainer.learner import Learner

    s = Learner(cfg)
    s.model, s.params, s.optimizer = model, list(model.parameters()), opt
    s.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    s.compute_dtype = torch.bfloat16 if bf16 else torch.float32
    return s


def _update(s: Any, cfg: Any, batch: Any, step: int) -> dict[str, float]:
    """score -> advantages -> ppo_update, as the trainer's step runs them."""
    from agentgym.trainer.update import compute_advantages, ppo_update, score

    b = score(batch, cfg, step, s.ranks)
    return {**compute_advantages(s, b, cfg, step), **ppo_update(s, b, cfg, step)}


def measure_update(episodes: int, vocab: int, budget: int | None) -> dict[str, Any]:
    import torch

    from agentgym.trainer.config import load_config
    from agentgym.trainer.model.gptoss import build_tiny_gptoss

    torch.set_num_threads(1)
    over = ["sft.steps=0", f"rollout.tasks_per_step={max(1, episodes // 8)}", "rollout.samples_per_task=8"]
    if budget is not None:
        over.append(f"ppo.micro_batch_tokens={budget}")
    cfg = load_config("cpu-quickstart", over)
    model = build_tiny_gptoss(vocab, seed=0)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.ppo.lr)
    s = _learner(cfg, model, opt, bf16=False)
    batch = synthetic_batch(episodes, vocab)
    before = _rss_now()
    t0 = time.perf_counter()
    m = _update(s, cfg, batch, 0)
    return {"rss_before_gib": before, "t_update": time.perf_counter() - t0,
            "micro_batches": int(m["micro_batches"]), "policy_tokens": int(batch.policy_mask.sum()),
            "params_m": sum(p.numel() for p in params) / 1e6}


PLAN_SHAPES = [  # model.tiny overrides, rows length T, micro-batch tokens N
    ({"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 256}, 256, 1024),
    ({"num_hidden_layers": 3, "hidden_size": 512, "intermediate_size": 384, "num_attention_heads": 8,
      "num_key_value_heads": 2, "head_dim": 64}, 512, 2048),
    ({"num_hidden_layers": 2, "hidden_size": 384, "intermediate_size": 768, "num_local_experts": 8,
      "num_experts_per_tok": 4}, 128, 2048),
    ({"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 256, "vocab_size": 32768}, 256, 2048),
]


def measure_plan(tiny: dict[str, Any], seq: int, tokens: int, dtype: str, ckpt: bool,
                 lora: dict[str, Any] | None = None) -> dict[str, Any]:
    """(plan bytes, measured bytes) of one learner update on ``tokens // seq`` rows of ``seq`` tokens;
    ``lora`` ({"rank": r, "experts": bool}): PEFT adapters on a frozen base in the compute dtype,
    as the learner holds them."""

    import torch

    from agentgym.trainer.algo.batch import make_batch
    from agentgym.trainer.algo.episode import Episode
    from agentgym.trainer.config import load_config
    from agentgym.trainer.memtrack import LiveBytes
    from agentgym.trainer.model.gptoss import build_tiny_gptoss
    from agentgym.trainer.plan import _config, count_parameters, estimate_memory
    from agentgym.trajectory import Trajectory, Turn

    torch.set_num_threads(1)
    rows = tokens // seq
    over = ["sft.steps=0", f"model.tiny={json.dumps(tiny)}", f"model.dtype={dtype}",
            f"model.gradient_checkpointing={str(ckpt).lower()}", f"env.max_tokens={seq - 1}",
            f"ppo.micro_batch_tokens={tokens}", "rollout.tasks_per_step=1", f"rollout.samples_per_task={rows}",
            "ppo.kl_coef=0", "ppo.advantage=group"]
    if lora:
        over += ["controls=[]", f"model.lora.rank={lora['rank']}", f"model.lora.experts={str(lora['experts']).lower()}"]
    cfg = load_config("cpu-quickstart", over)
    config = _config("tiny", cfg)
    plan = estimate_memory(count_parameters(config, cfg.model.lora), config, cfg, world=1)
    vocab = config.vocab_size
    model = build_tiny_gptoss(vocab, seed=0, **tiny)
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    weights = list(model.parameters())
    if lora:
        from agentgym.trainer.model.lora import add_adapters

        add_adapters(model, cfg.model.lora)
        for q in model.parameters():  # the frozen base in the compute dtype, as the learner holds it
            if not q.requires_grad:
                q.data = q.data.to(torch.bfloat16 if dtype == "bfloat16" else torch.float32)
        weights = list(model.parameters())
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    bf16 = dtype == "bfloat16"
    s = _learner(cfg, model, opt, bf16=bf16)
    s.params = params
    g = torch.Generator().manual_seed(0)
    trajs = []
    for i in range(rows):  # seq - 1 tokens (the batch adds a pad column): one prompt token, then
        t = Trajectory("agentgym/Synthetic-v0", i, str(i), "random")  # policy tokens (the plan's worst case)
        n = seq - 1
        t.append(torch.randint(0, min(vocab, 264) - 1, (1,), generator=g).tolist(), policy=False)
        t.prompt_len = 1
        t.append(torch.randint(0, min(vocab, 264) - 1, (n - 1,), generator=g).tolist(), policy=True)
        t.turns.append(Turn(1, n, n, float(i % 3)))
        t.logprobs = [-1.0 if m else None for m in t.policy_mask]
        t.terminated = True
        trajs.append(t)
    batch = make_batch([Episode.from_record(t) for t in trajs], [0] * rows, pad_id=vocab - 1)
    _update(s, cfg, batch, 0)  # the first step allocates AdamW's state
    opt.zero_grad(set_to_none=True)
    with LiveBytes() as live:
        live.track(weights)
        live.track(v for st in opt.state.values() for v in st.values() if torch.is_tensor(v))
        m = _update(s, cfg, batch, 1)
    return {"plan": plan["peak during update"], "measured": live.peak, "micro_batches": int(m["micro_batches"]),
            "params": sum(p.numel() for p in params), "activations_plan": plan["activations"],
            "parts": {k: v for k, v in plan.items() if not k.startswith("peak")}}


def plan_table() -> None:
    print("| shape | T x rows | precision | grad ckpt | plan MiB | measured MiB | plan / measured |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for tiny, seq, tokens in PLAN_SHAPES:
        for dtype in ("float32", "bfloat16"):
            for ckpt in (False, True):
                cmd = [sys.executable, __file__, "--child", "--mode", "plan", "--plan-case",
                       json.dumps([tiny, seq, tokens, dtype, ckpt])]
                out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
                if out.returncode:
                    print(f"| {tiny} | failed: {out.stderr.strip().splitlines()[-1:]} |", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                ratio = r["plan"] / r["measured"]
                worst = max(worst, abs(ratio - 1))
                shape = ", ".join(f"{k.replace('num_', '').replace('_size', '')}={v}" for k, v in tiny.items())
                print(f"| {shape} | {seq} x {tokens // seq} | {'bf16 autocast' if dtype == 'bfloat16' else 'fp32'} | "
                      f"{'yes' if ckpt else 'no'} | {r['plan'] / 2**20:.1f} | {r['measured'] / 2**20:.1f} | "
                      f"{ratio:.3f} |", flush=True)
    print(f"\nlargest |plan / measured - 1|: {worst:.3f}")


LORA_SHAPES = [  # model.tiny overrides, rows length T, micro-batch tokens N
    ({"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 384, "num_local_experts": 4}, 256, 1024),
    ({"num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 512, "num_attention_heads": 8,
      "num_key_value_heads": 2, "head_dim": 64, "num_local_experts": 8, "num_experts_per_tok": 2}, 512, 2048),
]


def lora_plan_table() -> None:
    """The plan against a measured LoRA update (rank 8; attention adapters, then with the experts')."""
    print("| shape | T x rows | precision (base) | adapters | grad ckpt | plan MiB | measured MiB | plan / measured |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for tiny, seq, tokens in LORA_SHAPES:
        for dtype, ckpt in (("float32", False), ("bfloat16", False), ("bfloat16", True)):
            for experts in (False, True):
                cmd = [sys.executable, __file__, "--child", "--mode", "plan", "--plan-case",
                       json.dumps([tiny, seq, tokens, dtype, ckpt, {"rank": 8, "experts": experts}])]
                out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
                if out.returncode:
                    print(f"| {tiny} | failed: {out.stderr.strip().splitlines()[-1:]} |", flush=True)
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                ratio = r["plan"] / r["measured"]
                worst = max(worst, abs(ratio - 1))
                shape = ", ".join(f"{k.replace('num_', '').replace('_size', '')}={v}" for k, v in tiny.items())
                print(f"| {shape} | {seq} x {tokens // seq} | {'bf16' if dtype == 'bfloat16' else 'fp32'} | "
                      f"{'attention + experts' if experts else 'attention'} | {'yes' if ckpt else 'no'} | "
                      f"{r['plan'] / 2**20:.1f} | {r['measured'] / 2**20:.1f} | {ratio:.3f} |", flush=True)
    print(f"\nlargest |plan / measured - 1|: {worst:.3f}")


def child(args: argparse.Namespace) -> None:
    if args.mode == "plan":
        print(json.dumps(measure_plan(*json.loads(args.plan_case))))
        return
    n = args.episodes[0]
    res = measure_step(n, args.budget) if args.mode == "step" else measure_update(n, args.vocab, args.budget)
    res.update(episodes=n, peak_rss_gib=_peak())
    print(json.dumps(res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["step", "update", "both", "plan", "plan-lora"], default="both")
    ap.add_argument("--plan-case", help=argparse.SUPPRESS)
    ap.add_argument("--episodes", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--vocab", type=int, default=201088, help="vocabulary of --mode update")
    ap.add_argument("--budget", type=int, default=None, help="ppo.micro_batch_tokens (default: the config's)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    print(f"load average {os.getloadavg()}", flush=True)
    if args.mode in ("plan", "plan-lora"):
        plan_table() if args.mode == "plan" else lora_plan_table()
        print(f"\nload average {os.getloadavg()}")
        return
    modes = ["step", "update"] if args.mode == "both" else [args.mode]
    for mode in modes:
        label = "quickstart model, full PPO step" if mode == "step" else f"vocab {args.vocab}, learner update"
        print(f"\n{label}  (ppo.micro_batch_tokens={args.budget if args.budget is not None else 'default'})")
        print("episodes | peak RSS GiB | RSS before step | step s | micro-batches | policy tokens")
        for n in args.episodes:
            cmd = [sys.executable, __file__, "--child", "--mode", mode, "--episodes", str(n),
                   "--vocab", str(args.vocab)] + (["--budget", str(args.budget)] if args.budget is not None else [])
            out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
            if out.returncode != 0:
                print(f"{n:8d} | failed (exit {out.returncode}): {out.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            t = r.get("t_step", r.get("t_update"))
            print(f"{n:8d} | {r['peak_rss_gib']:12.2f} | {r['rss_before_gib']:15.2f} | {t:6.1f} | "
                  f"{r['micro_batches']:13d} | {r['policy_tokens']}", flush=True)
    print(f"\nload average {os.getloadavg()}")


if __name__ == "__main__":
    main()
