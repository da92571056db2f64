"""The learner: the policy being trained and what updates it.

    learner = Learner(cfg)
    out = learner.forward(learner.model, batch.select(rows), values=True)   # ForwardOut (B, T)

It holds the tokenizer, the policy (+ the value head for ``ppo.advantage: gae``), AdamW over
both with its warmup schedule, the frozen KL reference, where forward passes run
(:meth:`compute`) and the processes it spans (:attr:`ranks`,
:class:`~agentgym.trainer.distributed.Ranks`). Precision: parameters, gradients and AdamW state
are float32 (master weights); ``model.dtype: bfloat16`` computes in bfloat16 (autocast in one
process, FSDP2 mixed precision under torchrun, ``distributed.py``).

The forward pass of a :class:`~agentgym.trainer.algo.batch.Batch` gives per-token log-probs,
entropy and values on its policy tokens only; the prompt prefix every row shares runs once
(:func:`~agentgym.trainer.algo.batch.shared_prefix_len`).

With ``model.lora.rank`` > 0 the policy carries PEFT's LoRA adapters (:mod:`.lora`): the base is
frozen, :attr:`params` (and AdamW) hold the adapters only, :attr:`peft` is the PeftModel around
:attr:`model`, and the KL reference is ``lora.AdaptersOff`` (the same model, adapters disabled).
"""

from __future__ import annotations

import contextlib
import copy
import shutil
from pathlib import Path
from typing import Any

import torch

from agentgym.errors import CheckpointError, ConfigError

from . import distributed as D
from .algo.batch import Batch, shared_prefix_len
from .algo.optim import load_moments, lr_factor, save_moments
from .config import TrainConfig
from .model import sharding
from .model.attention import set_attention
from .model.files import load_weights, model_dir_problem, save_model_atomic
from .model.gptoss import (
    ValueHead,
    build_tiny_for,
    is_tiny,
    load_policy,
    resolve_attention,
    resolve_tokenizer,
)
from .model.logprobs import ForwardOut, policy_forward
from .model.lora import AdaptersOff, add_adapters
from .model.routing import replay_batch

__all__ = ["REFERENCE", "WARM_START", "Learner", "batch_forward"]

REFERENCE = "reference"  # RUN_DIR/reference: the KL anchor, saved once
WARM_START = "warm_start"  # RUN_DIR/warm_start: weights, SFT AdamW state, warm_start.json


class Learner:
    """Tokenizer, policy (+ value head), optimizer and schedule, KL reference, forward pass."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        torch.manual_seed(cfg.seed)
        dc = cfg.distributed
        self._initial_weights = cfg.sft.load or cfg.model.init_from or None  # a saved policy to start from (else built)
        if cfg.sft.load and (bad := model_dir_problem(cfg.sft.load)) is not None:
            raise CheckpointError(f"sft.load={cfg.sft.load}: not a complete warm start ({bad}); load the "
                                  "warm_start/ folder of a run that finished its warm start")
        self.dist = D.init_distributed(D.Layout.of(cfg))  # refuses a layout that does not fit torchrun's world
        self.ranks = D.Ranks(self.dist)
        self.device = self.dist.device if self.dist is not None else torch.device(cfg.model.device)
        self.compute_dtype = torch.bfloat16 if cfg.model.dtype == "bfloat16" else torch.float32
        self.tokenizer, self.model = self.build_policy()
        self.pad_id = int(getattr(self.tokenizer, "pad_id", None) or self.model.config.pad_token_id or 0)
        self.value_head = (ValueHead(self.model.config.hidden_size).to(self.device)
                           if cfg.ppo.advantage == "gae" else None)
        if self.dist is not None:
            sharding.shard_policy(self.model, compute_dtype=self.compute_dtype,
                           reshard_after_forward=dc.reshard_after_forward)
            sharding.materialize(self.model, self.device)
            self._load_initial_weights()
            if self.value_head is not None:
                sharding.shard_module(self.value_head, compute_dtype=self.compute_dtype)
        elif self._initial_weights is not None:
            load_weights(self.model, self._initial_weights)
        self.peft: Any = None  # the PeftModel around self.model when model.lora.rank > 0 (trainer/model/lora.py)
        if cfg.model.lora.rank:  # one process (D.layout_problems)
            self.peft = add_adapters(self.model, cfg.model.lora, seed=cfg.seed)  # base frozen, adapters in place
            for q in self.model.parameters():  # the frozen base in the compute dtype (plan.py counts it so)
                if not q.requires_grad:
                    q.data = q.data.to(self.compute_dtype)
        self.model.train()
        self.params = [q for q in self.model.parameters() if q.requires_grad] + (
            list(self.value_head.parameters()) if self.value_head is not None else [])
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.ppo.lr, weight_decay=cfg.ppo.weight_decay)
        p, total = cfg.ppo, cfg.ppo.steps * cfg.ppo.epochs * cfg.ppo.minibatches
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda i: lr_factor(i, p.warmup_steps, total, p.schedule))
        self.sft_optimizer: torch.optim.Optimizer | None = None  # the warm start's (run_sft sets it)
        if cfg.sft.load and cfg.ppo.carry_sft_optimizer:
            if self.dist is not None:
                raise ConfigError("sft.load with ppo.carry_sft_optimizer=true under torchrun is not "
                                  "supported; set ppo.carry_sft_optimizer=false")
            load_moments(Path(cfg.sft.load) / "sft_optimizer.pt", self.model, self.optimizer)
        self.ref_model: Any = None  # a frozen copy, or with LoRA lora.AdaptersOff (the base, no copy)

    # ------------------------------------------------------------------ building
    def build_policy(self, *, meta: bool | None = None) -> tuple[Any, Any]:
        """(tokenizer, policy) in float32. Under torchrun the policy is built on the meta device
        (no memory; weights arrive after sharding, :meth:`_load_initial_weights`)."""

        m = self.cfg.model
        meta = self.dist is not None if meta is None else meta
        tok: Any = resolve_tokenizer(m.name, m.tokenizer)
        model: Any
        if meta:
            model = sharding.policy_skeleton(m.name, tok.vocab_size, m.tiny, attn_implementation=m.attn_implementation,
                                      device=self.device)
        elif is_tiny(m.name):  # sized for its tokenizer (vocabulary, pad id)
            model = build_tiny_for(tok, seed=self.cfg.seed, **m.tiny).to(self.device)
            set_attention(model, resolve_attention(m.attn_implementation, self.device, model.config.head_dim))
        else:
            # a LoRA base is frozen in the compute dtype: never hold it in float32
            model = load_policy(m.name, device=self.device, dtype=self.compute_dtype if m.lora.rank else torch.float32,
                                attn_implementation=m.attn_implementation)
        if m.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return tok, model

    def _load_initial_weights(self) -> None:
        """Sharded policy: rank 0 reads the initial weights (``init_from``, else the tiny seed or
        ``model.name``), every rank receives its shards."""
        if self._initial_weights is not None:
            load_weights(self.model, self._initial_weights)
            return
        full = self.build_policy(meta=False)[1].state_dict() if self.ranks.main else {}
        D.load_full_state(self.model, full)

    # ------------------------------------------------------------------ forward
    def compute(self) -> contextlib.AbstractContextManager[Any]:
        """Where forward passes run: bfloat16 autocast for a single-process bf16 run (FSDP2
        casts by itself under torchrun), nothing otherwise."""
        if self.compute_dtype == torch.float32 or self.dist is not None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    def forward(self, model: Any, b: Batch, *, temperature: float = 1.0, values: bool = False,
                entropy: bool = True, entropy_grad: bool = False) -> ForwardOut:
        """Log-probs, entropy (and values with ``values``) of ``b``'s tokens under ``model`` (the
        policy or the reference), in the compute context, with routing replay when ``b`` has
        routes."""

        if isinstance(model, AdaptersOff):  # the LoRA reference: the policy with its adapters off
            with model.active() as base:
                return self.forward(base, b, temperature=temperature, values=values, entropy=entropy,
                                    entropy_grad=entropy_grad)
        with self.compute():
            return batch_forward(model, b, temperature=temperature, with_entropy=entropy,
                                 value_head=self.value_head if values else None, entropy_grad=entropy_grad)

    @torch.no_grad()
    def score_rows(self, model: Any, b: Batch, plan: list[torch.Tensor], *, temperature: float,
                   values: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and values) of every row, micro-batch by micro-batch -> (B, T) tensors."""
        logp = torch.zeros_like(b.behaviour_logp)
        vals = torch.zeros_like(b.behaviour_logp) if values else None
        for rows in plan:
            sub = b.select(rows)
            out = self.forward(model, sub, temperature=temperature, values=values, entropy=False)
            w = sub.input_ids.shape[1]
            logp[rows, :w] = out.logprobs.float()
            if vals is not None and out.values is not None:
                vals[rows, :w] = out.values.float()
        return logp, vals

    # ------------------------------------------------------------------ the KL reference
    def start_reference(self, *, resumed: bool) -> None:
        """Save the policy as PPO starts to ``RUN_DIR/reference`` (unless resuming), and load
        the frozen reference from there when the run keeps one (``TrainConfig.keeps_reference``).
        Never re-taken on resume. With LoRA the reference is the base (the adapters disabled):
        nothing is saved or copied."""
        if self.peft is not None:
            self.ref_model = AdaptersOff(self.peft) if self.cfg.keeps_reference() else None
            return
        ref_dir = Path(self.cfg.log.run_dir) / REFERENCE
        if not resumed:
            save_model_atomic(self.model, ref_dir, dtype=self.compute_dtype)
        elif not (ref_dir / "model.safetensors").exists():
            if self.cfg.keeps_reference():
                raise CheckpointError(f"{ref_dir} is missing: the KL reference (the policy when PPO "
                                      "started) is saved once per run and never re-taken from resumed "
                                      "weights. Restore it, or resume with ppo.kl_coef=0 health.watch_kl=false")
            return
        if not self.cfg.keeps_reference():
            return
        if self.dist is None:
            ref = copy.deepcopy(self.model).to(self.compute_dtype)
        else:
            ref = self.build_policy(meta=True)[1].to(self.compute_dtype)
            sharding.shard_policy(ref, compute_dtype=self.compute_dtype, mixed_precision=False,
                           reshard_after_forward=self.cfg.distributed.reshard_after_forward)
            sharding.materialize(ref, self.device)
        load_weights(ref, ref_dir)
        ref.eval().requires_grad_(False)
        self.ref_model = ref

    def save_warm_start(self, *, moments: Path | None = None) -> None:
        """Save the warm start once (``RUN_DIR/warm_start``: weights, and the warm start's AdamW
        moments in ``sft_optimizer.pt``, from ``self.sft_optimizer`` or else copied from
        ``moments``): the common starting point of the arms of a comparison (``sft.load``) and of
        benches such as bench/trl_grpo_bench.py. Written atomically; a complete one is kept."""
        warm = Path(self.cfg.log.run_dir) / WARM_START
        if self.warm_start_problem() is None:
            return
        extra = None
        if self.sft_optimizer is not None and self.dist is None:
            opt = self.sft_optimizer

            def extra(tmp: Path) -> None:
                save_moments(opt, self.model, tmp / "sft_optimizer.pt")
        elif moments is not None:  # a saved copy of them (written again around a damaged folder)
            def extra(tmp: Path) -> None:
                shutil.copyfile(moments, tmp / "sft_optimizer.pt")

        save_model_atomic(self.model, warm, extra=extra)  # a kill or a full disk leaves no half folder

    def warm_start_problem(self) -> str | None:
        """Why ``RUN_DIR/warm_start`` is not a complete warm start (checkpoint.model_dir_problem),
        or None. Its AdamW moments are expected from a single-process run."""
        extra = ("sft_optimizer.pt",) if self.dist is None else ()
        return model_dir_problem(Path(self.cfg.log.run_dir) / WARM_START, extra=extra)


def batch_forward(model: Any, b: Batch, *, temperature: float = 1.0, value_head: torch.nn.Module | None = None,
                  with_entropy: bool = True, entropy_grad: bool = False, min_prefix: int = 64) -> ForwardOut:
    """:func:`~agentgym.trainer.model.logprobs.policy_forward` of a :class:`Batch`: log-probs and
    entropy on its policy tokens only, the prompt prefix every row shares computed once.

    The shared prefix (P tokens) runs once at batch size 1 and the B suffixes attend to it
    through the KV cache (``policy_forward(..., shared_prefix=P)``): the prefix is B times
    cheaper and attention is (T - P) x T instead of T x T. Below ``min_prefix`` shared tokens
    the rows run whole. Values (with ``value_head``) cover every position. With replayed
    routes (``b.routes``) the engine's experts are used, row by row (no shared prefix).
    """

    P = 0 if b.routes is not None else shared_prefix_len(b.input_ids, b.policy_mask, b.lengths)
    with replay_batch(model, b.routes):
        return policy_forward(model, b.input_ids, b.attention_mask, temperature=temperature,
                              value_head=value_head, with_entropy=with_entropy, entropy_grad=entropy_grad,
                              shared_prefix=P if P >= min_prefix else 0, score_mask=b.policy_mask)
