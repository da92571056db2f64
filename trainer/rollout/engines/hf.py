"""The ``hf`` engine: batched sampling with a transformers causal LM and a KV cache.

Our own decoding loop rather than ``model.generate``: it makes the reported log-probs
exactly the trainer's definition (float32 ``log_softmax(logits / temperature)`` at the sampled
id, no top-p/top-k, no repetition penalty), and lets prompts of different lengths share a
batch (left padding, positions from the attention mask, as ``policy_forward`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from agentgym.errors import ConfigError

from ...model.gptoss import use_memory_efficient_experts
from .base import EngineAbilities, Sample

__all__ = ["DECODE_ATTENTION", "HFEngine", "decoding_attention", "gqa_eager_attention", "sample_step"]

DECODE_ATTENTION = "agentgym_gqa_eager"


def gqa_eager_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0,
                        **kwargs: Any) -> tuple[torch.Tensor, None]:
    """GPT-OSS's eager sink attention (same operations, same order) without ``repeat_kv``.

    The query heads that share a KV head are folded into the query dimension, so the KV
    cache is read in place instead of being copied ``heads / kv_heads`` times per layer per
    decoding step (that copy was ~40% of decoding time for the tiny model).
    query (B, H, Tq, D), key/value (B, Hkv, Tk, D), attention_mask (B, 1, Tq, Tk) additive
    float -> output (B, Tq, H, D).
    """
    B, H, Tq, D = query.shape
    Hkv, Tk = key.shape[1], key.shape[2]
    rep = H // Hkv
    q = query.reshape(B, Hkv, rep * Tq, D)  # head h = kv * rep + r, as repeat_kv orders them
    w = torch.matmul(q, key.transpose(2, 3)).view(B, H, Tq, Tk) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    sinks = module.sinks.reshape(1, -1, 1, 1).expand(B, -1, Tq, -1)  # type: ignore[operator]
    logits = torch.cat([w, sinks], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    probs = torch.softmax(logits, dim=-1, dtype=logits.dtype)[..., :-1].to(value.dtype)
    out = torch.matmul(probs.reshape(B, Hkv, rep * Tq, Tk), value).view(B, H, Tq, D)
    return out.transpose(1, 2).contiguous(), None


def decoding_attention(config: Any) -> str:
    """Switch ``config`` to :func:`gqa_eager_attention` for sampling; returns the previous name.

    Only from eager or ``agentgym_flex`` (flex would recompile for every new key length):
    other implementations are left alone. The trainer's forward keeps its own attention.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    previous = str(config._attn_implementation)
    if previous in ("eager", "agentgym_flex"):
        AttentionInterface.register(DECODE_ATTENTION, gqa_eager_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(DECODE_ATTENTION, eager_mask)
        config._attn_implementation = DECODE_ATTENTION
    return previous


class HFEngine:
    """Sample from a transformers causal LM in process.

    ``model``: the policy. With ``share=True`` (default) the engine samples from the very
    module the trainer optimises, so :meth:`sync_weights` with that module is free; with
    ``share=False`` it keeps its own copy and ``sync_weights`` copies the state dict.
    ``max_batch_size`` splits large prompt lists; ``pad_id`` fills left padding.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        share: bool = True,
        max_batch_size: int = 64,
        pad_id: int | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        if share:
            self.model = model
        else:
            import copy

            self.model = copy.deepcopy(model)
        if device is not None:
            self.model.to(device)
        use_memory_efficient_experts(self.model)
        self.max_batch_size = max_batch_size
        cfg_pad = getattr(self.model.config, "pad_token_id", None)
        self.pad_id = int(pad_id if pad_id is not None else (cfg_pad if cfg_pad is not None else 0))
        self._closed = False

    @property
    def abilities(self) -> EngineAbilities:
        """Its model is in this process: hooks on it observe the experts (``routing_replay``)."""
        return EngineAbilities(model=self.model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def sync_weights(self, model: nn.Module) -> None:
        if model is self.model:
            return
        self.model.load_state_dict(model.state_dict())

    def close(self) -> None:
        self._closed = True

    def generate(
        self,
        prompts: list[list[int]],
        *,
        max_new_tokens: int,
        temperature: float,
        stop_ids: Sequence[int],
        seed: int | None = None,
    ) -> list[Sample]:
        if self._closed:
            raise ConfigError("HFEngine.generate called after close(); build a new engine")
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        if any(len(p) == 0 for p in prompts):
            raise ConfigError("every prompt needs at least one token")
        gen = None
        if seed is not None:
            gen = torch.Generator(device=self.device).manual_seed(seed)
        out: list[Sample] = []
        for s in range(0, len(prompts), self.max_batch_size):
            out += self._generate_batch(
                prompts[s : s + self.max_batch_size], max_new_tokens, temperature, stop_ids, gen
            )
        return out

    @torch.no_grad()
    def _generate_batch(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        stop_ids: Sequence[int],
        gen: torch.Generator | None,
    ) -> list[Sample]:
        from transformers import DynamicCache

        model, dev = self.model, self.device
        config: Any = model.config
        was_training = model.training
        model.eval()
        attn = decoding_attention(config)
        try:
            B, L = len(prompts), max(len(p) for p in prompts)
            ids = torch.full((B, L), self.pad_id, dtype=torch.long, device=dev)
            mask = torch.zeros(B, L, dtype=torch.long, device=dev)
            for i, p in enumerate(prompts):  # left padding: last prompt token at column L-1
                ids[i, L - len(p) :] = torch.tensor(p, dtype=torch.long, device=dev)
                mask[i, L - len(p) :] = 1
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            return decode(model, DynamicCache(config=config), mask, ids, positions, max_new_tokens=max_new_tokens,
                          temperature=temperature, gen=gen, stop_ids=stop_ids, pad_id=self.pad_id)
        finally:
            model.train(was_training)
            config._attn_implementation = attn


def decode(model: Any, cache: Any, mask: torch.Tensor, step_ids: torch.Tensor, step_pos: torch.Tensor, *,
           max_new_tokens: int, temperature: float, gen: torch.Generator | None, stop_ids: Sequence[int],
           pad_id: int, first_logits: torch.Tensor | None = None) -> list[Sample]:
    """The decode loop of the ``hf`` engines: feed ``step_ids`` (B, n) at ``step_pos`` (B, n)
    with the KV ``cache`` (empty: the prompts' prefill; or already holding them, then
    ``first_logits`` (B, V) are the prompts' next-token logits), sample one token per row,
    append it, until every row stopped or ``max_new_tokens``. ``mask`` (B, L): the cache's
    valid columns (left padding)."""
    B, dev = mask.shape[0], mask.device
    stop = torch.tensor(sorted({int(t) for t in stop_ids}), dtype=torch.long, device=dev)
    tokens: list[list[int]] = [[] for _ in range(B)]
    logps: list[list[float]] = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    reason = ["length"] * B
    for step in range(max_new_tokens):
        if step or first_logits is None:
            logits = model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                           past_key_values=cache, use_cache=True).logits[:, -1].float()  # (B, V)
        else:
            logits = first_logits
        nxt = sample_step(logits, temperature, gen, stop, done, tokens, logps, reason)
        if bool(done.all()):
            break
        step_ids = torch.where(done, torch.full_like(nxt, pad_id), nxt)[:, None]
        step_pos = step_pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones(B, 1, dtype=mask.dtype, device=dev)], dim=1)
    return [Sample(tokens[i], logps[i], reason[i]) for i in range(B)]


def sample_step(logits: torch.Tensor, temperature: float, gen: torch.Generator | None,
                stop: torch.Tensor, done: torch.Tensor, tokens: list[list[int]],
                logps: list[list[float]], reason: list[str]) -> torch.Tensor:
    """Sample one token per row from ``logits`` (B, V) and record it for the unfinished rows.

    Log-probs are the processed ones (after temperature; greedy at temperature 0), so they are
    what the trainer recomputes. Rows that hit a stop id are marked done in place.
    """
    if temperature == 0:
        logp_all = torch.log_softmax(logits, dim=-1)
        nxt = logp_all.argmax(-1)
    else:
        logp_all = torch.log_softmax(logits / temperature, dim=-1)
        nxt = torch.multinomial(logp_all.exp(), 1, generator=gen).squeeze(-1)
    lp = logp_all.gather(-1, nxt[:, None]).squeeze(-1)
    for i in torch.nonzero(~done).flatten().tolist():
        tokens[i].append(int(nxt[i]))
        logps[i].append(float(lp[i]))
    hit = torch.isin(nxt, stop) & ~done
    for i in torch.nonzero(hit).flatten().tolist():
        reason[i] = "stop"
    done |= hit
    return nxt
