"""Collection: many environments stepped concurrently against one rollout engine.

Each round, every episode still running contributes its full token stream as a prompt; the
engine samples all of them in one batched ``generate`` call (stopping at Harmony's
``<|call|>`` / ``<|return|>``), the pool steps the environments concurrently with the exact
sampled ids, and the engine's log-probs (and, from a ``VersionedEngine``, the policy version of
every sampled token) are kept by the collector beside each env's trajectory, never written into
it. The next prompt is the trajectory's token stream itself: nothing is decoded and re-encoded.

What comes back is one :class:`~agentgym.trainer.algo.episode.Episode` per seed: a copy of the
env's trajectory, and the loop's own typed fields (``logprobs``, ``versions``, ``infra_error``);
the Ray and tensor-parallel collectors and the asynchronous producer return the same records.

Group sampling: ``seeds`` may repeat; the same seed gives the same task, so the samples of a
task form the group of the group baseline.

Infrastructure faults (``agentgym.errors.InfraError``: a container that cannot start at reset,
a remote env whose server is gone, an engine that times out, or an env's own
``info["infra_error"]``, which the env also notes in its trajectory's ``meta``) end only the
episodes they hit: those come back with ``Episode.infra_error`` set, and :func:`drop_infra`
leaves them out of the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agentgym.errors import InfraError, PoolStepError, TrainerError, infra_note
from agentgym.trajectory import Trajectory
from agentgym.vector import EnvPool

from ..algo.episode import NO_VERSION, Episode
from .engines.hf import HFEngine, decode, decoding_attention

__all__ = ["Collector", "RolloutStats", "cut_actions", "drop_infra", "group_seeds", "make_prefix_engine"]


@dataclass
class RolloutStats:
    episodes: int
    rounds: int  # batched generate calls
    sampled_tokens: int
    env_seconds: float
    gen_seconds: float


_RESUME_RUN = "continue the run with agentgym-train --resume RUN_DIR"


def drop_infra(episodes: Sequence[Episode], groups: Sequence[int], *,
               then: str = _RESUME_RUN) -> tuple[list[Episode], list[int], int]:
    """The episodes a batch may use: those lost to an infrastructure fault (``Episode.infra_error``)
    are neither outcomes nor failures of the policy, so they are masked out of the update (and
    of evaluations); returns (episodes, their group ids, how many were dropped). When every
    one was lost, InfraError says to fix the service and then ``then``: what the caller's user
    can do next (a training run resumes; a one-off check is run again)."""
    keep = [i for i, e in enumerate(episodes) if not e.infra_error]
    if not keep and episodes:
        raise InfraError(f"every one of the {len(episodes)} episodes was lost to an infrastructure fault (first: "
                         f"{episodes[0].infra_error}): the sandbox engine, env server or inference "
                         f"server is down; fix it and {then}")
    return [episodes[i] for i in keep], [groups[i] for i in keep], len(episodes) - len(keep)


def _faults(e: PoolStepError) -> dict[int, str]:
    """The infrastructure faults among a pool's exceptions; re-raise if any other kind is there."""
    other = [x for x in e.errors.values() if not isinstance(x, InfraError)]
    if other:
        raise other[0]
    return {i: infra_note(x) for i, x in e.errors.items()}


def group_seeds(first_seed: int, tasks: int, samples_per_task: int) -> tuple[list[int], list[int]]:
    """Task seeds repeated ``samples_per_task`` times, and the group id of each episode."""
    seeds = [first_seed + t for t in range(tasks) for _ in range(samples_per_task)]
    groups = [t for t in range(tasks) for _ in range(samples_per_task)]
    return seeds, groups


def cut_actions(traj: Trajectory, max_action_tokens: int, stop_ids: Sequence[int]) -> int:
    """How many of ``traj``'s actions were cut at the token limit: ``max_action_tokens`` long
    and not ended by a stop token (the engine ran out of budget mid-action). Read from the
    record itself, so it holds for any engine and any collector."""
    stop = set(int(t) for t in stop_ids)
    return sum(1 for u in traj.turns if u.action_end - u.action_start >= max_action_tokens
               and traj.tokens[u.action_end - 1] not in stop)


class Collector:
    """Runs whole episodes of a fixed set of environments with an :class:`Engine`.

    ``envs``: the pool (one env per concurrent episode) or a factory + ``n``.
    ``max_new_tokens``: per turn (the env's action budget). The engine's stop ids are the
    codec's stop ids, read from the first env.
    """

    def __init__(self, pool: EnvPool, engine: Any, *, max_new_tokens: int) -> None:
        self.pool = pool
        self.engine = engine
        self.max_new_tokens = max_new_tokens
        codec = pool.envs[0].unwrapped.codec  # type: ignore[attr-defined]
        self.stop_ids: tuple[int, ...] = tuple(codec.stop_ids)

    @classmethod
    def from_factory(cls, factory: Callable[[], Any], n: int, engine: Any, *, max_new_tokens: int,
                     max_workers: int | None = None) -> Collector:
        return cls(EnvPool(factory, n=n, max_workers=max_workers), engine, max_new_tokens=max_new_tokens)

    def collect(self, seeds: Sequence[int], *, temperature: float, sample_seed: int | None,
                options: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
                ) -> tuple[list[Episode], RolloutStats]:
        """One episode per seed (``len(seeds) <= len(pool)``), in order (module doc).

        ``sample_seed`` seeds the engine's sampler (round ``r`` uses ``sample_seed + r``), so a
        collection is reproducible given the weights. ``options``: the reset options of every
        episode, or a list with one dict per episode (e.g. a curriculum's levels).
        """
        import time

        n = len(seeds)
        if n > len(self.pool):
            raise TrainerError(f"{n} episodes asked of a pool of {len(self.pool)} envs; "
                               "build the pool with at least as many envs as episodes per step")
        envs: list[Any] = self.pool.envs[:n]
        t0 = time.perf_counter()
        per = [options] * n if options is None or isinstance(options, dict) else list(options)
        if len(per) != n:
            raise TrainerError(f"{len(per)} option dicts for {n} episodes; pass one per seed "
                               "or a single dict for all")
        lost: dict[int, str] = {}  # episode -> infrastructure fault that ended it (module doc)
        if n == len(self.pool) and all(o is per[0] for o in per):
            try:
                self.pool.reset(seeds, options=per[0])  # concurrent (sandboxes, servers start in parallel)
            except PoolStepError as e:
                lost.update(_faults(e))
        else:
            for i, s in enumerate(seeds):
                try:
                    self.pool.reset_one(i, seed=s, options=per[i])
                except InfraError as e:
                    lost[i] = infra_note(e)
        no_episode = set(lost)  # reset failed: nothing of these episodes exists
        # what the loop sampled, per token of each env's trajectory (the env's record stays the env's)
        logprobs: list[list[float | None]] = [[] for _ in range(n)]
        versions: list[list[int] | None] = [None] * n  # a list once a VersionedEngine's sample arrives
        env_s = time.perf_counter() - t0  # the prompts now sit in each env's trajectory
        gen_s = 0.0
        active = [i for i in range(n) if i not in lost]
        rounds = sampled = 0
        while active:
            prompts = [list(envs[i].unwrapped.trajectory.tokens) for i in active]
            t0 = time.perf_counter()
            try:
                samples = self.engine.generate(
                    prompts, max_new_tokens=self.max_new_tokens, temperature=temperature,
                    stop_ids=self.stop_ids,
                    seed=None if sample_seed is None else sample_seed + rounds)
            except InfraError as e:  # the engine timed out or its server is gone: these episodes are lost
                lost.update({i: infra_note(e) for i in active})
                break
            gen_s += time.perf_counter() - t0
            if len(samples) != len(active):
                raise TrainerError(f"engine returned {len(samples)} samples for {len(active)} prompts")
            t0 = time.perf_counter()
            try:
                results = self.pool.step({i: np.asarray(s.tokens, dtype=np.int64)
                                          for i, s in zip(active, samples)})
            except PoolStepError as e:  # e.g. a remote env whose server died: the others go on
                lost.update(_faults(e))
                results = e.results
            env_s += time.perf_counter() - t0
            still = []
            for i, s in zip(active, samples):
                if i not in results:
                    continue
                traj = envs[i].unwrapped.trajectory
                turn = len(traj.turns) - 1
                t = traj.turns[turn]
                kept = t.action_end - t.action_start  # the env may clip or reject the action
                if kept:
                    if traj.tokens[t.action_start:t.action_end] != list(s.tokens[:kept]):
                        raise TrainerError("the env stored different action tokens than were "
                                           "sampled; the trajectory must hold the exact samples")
                got = [float(x) for x in s.logprobs[:kept]]
                if len(got) != kept:
                    raise TrainerError(f"the engine returned {len(s.logprobs)} log-probs for {len(s.tokens)} "
                                       "sampled tokens; an engine reports one log-prob per sampled token")
                lps = logprobs[i]
                lps += [None] * (len(traj.tokens) - len(lps))
                lps[t.action_start:t.action_end] = got
                if "policy_version" in s.meta:  # a VersionedEngine: which weights sampled it
                    v = versions[i] = versions[i] or []
                    v += [NO_VERSION] * (len(traj.tokens) - len(v))
                    v[t.action_start:t.action_end] = [int(s.meta["policy_version"])] * kept
                sampled += len(s.tokens)
                if not results[i].done:
                    still.append(i)
            active = still
            rounds += 1
        out = []
        for i in range(n):
            u = envs[i].unwrapped
            traj = (Trajectory(env_id=u.env_id, seed=seeds[i], task_id="", tokenizer="")
                    if i in no_episode else u.trajectory.copy())
            size = len(traj.tokens)  # env tokens after the last action: no log-prob, NO_VERSION
            lps, vs = logprobs[i] + [None] * (size - len(logprobs[i])), versions[i]
            out.append(Episode(traj, lps, None if vs is None else vs + [NO_VERSION] * (size - len(vs)),
                               infra_error=lost.get(i) or traj.infra_error))
        return out, RolloutStats(n, rounds, sampled, env_s, gen_s)

    def close(self) -> None:
        self.pool.close()


# ---------------------------------------------------------------------------- prefix engine

def _common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    first, n = prompts[0], min(len(p) for p in prompts)
    for p in prompts[1:]:
        i = 0
        while i < n and p[i] == first[i]:
            i += 1
        n = i
    return n


def make_prefix_engine(model: Any, **kwargs: Any) -> Any:
    """An ``hf`` engine that prefills the prompts' shared prefix once (see PrefixHFEngine)."""

    class PrefixHFEngine(HFEngine):  # type: ignore[misc, valid-type]
        """``hf`` sampling where the prompt prefix all episodes share (system + developer
        message: ~600 byte tokens) is computed once instead of once per episode per turn.

        Prefill: the prefix at batch 1, then each distinct suffix on a copy of that cache (the
        samples of one task share their first prompt: it is computed once); the per-row caches
        are then left-padded into one batch (RoPE uses the real positions, so the keys/values do
        not depend on the slot) and decoding proceeds exactly as in ``HFEngine``. Same numbers
        as ``HFEngine`` up to float rounding (the mismatch statistics measure it every step);
        several times faster on long prompts.
        """

        min_prefix = 64

        @torch.no_grad()
        def _generate_batch(self, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                            stop_ids: Sequence[int], gen: Any) -> list[Any]:
            import copy as _copy

            from transformers import DynamicCache

            model: Any = self.model  # a transformers causal LM (its config, cache layout)
            dev = self.device
            window = getattr(model.config, "sliding_window", None) or 0
            P = min(_common_prefix(prompts), min(len(p) for p in prompts) - 1)
            if P < self.min_prefix or min(len(p) for p in prompts) < window:
                return super()._generate_batch(prompts, max_new_tokens, temperature, stop_ids, gen)
            was_training = model.training
            model.eval()
            attn = decoding_attention(model.config)
            try:
                B, L = len(prompts), max(len(p) for p in prompts)
                pre: Any = DynamicCache(config=model.config)
                ids = torch.tensor(prompts[0][:P], device=dev)[None]
                model(input_ids=ids, position_ids=torch.arange(P, device=dev)[None],
                      past_key_values=pre, use_cache=True, logits_to_keep=1)
                rows: list[Any] = []
                first_logits: list[torch.Tensor] = []
                prefilled: dict[tuple[int, ...], tuple[Any, torch.Tensor]] = {}
                for p in prompts:  # each distinct suffix once, on its own copy of the prefix cache
                    suffix = tuple(p[P:])  # the samples of one task share their whole prompt
                    if suffix not in prefilled:
                        c = _copy.deepcopy(pre)
                        out = model(input_ids=torch.tensor(suffix, device=dev)[None],
                                    position_ids=torch.arange(P, len(p), device=dev)[None],
                                    past_key_values=c, use_cache=True, logits_to_keep=1)
                        prefilled[suffix] = (c, out.logits[0, -1].float())
                    rows.append(prefilled[suffix][0])
                    first_logits.append(prefilled[suffix][1])
                cache: Any = DynamicCache(config=model.config)
                for li, layer in enumerate(cache.layers):
                    ks = [r.layers[li].keys for r in rows]
                    vs = [r.layers[li].values for r in rows]
                    if not layer.is_sliding:  # left-pad every row to L slots
                        ks = [torch.nn.functional.pad(k, (0, 0, L - k.shape[-2], 0)) for k in ks]
                        vs = [torch.nn.functional.pad(v, (0, 0, L - v.shape[-2], 0)) for v in vs]
                    layer.lazy_initialization(ks[0], vs[0])
                    layer.keys, layer.values = torch.cat(ks), torch.cat(vs)
                    if layer.is_sliding:
                        layer.cumulative_length = L
                mask = torch.zeros(B, L, dtype=torch.long, device=dev)
                for i, p in enumerate(prompts):
                    mask[i, L - len(p):] = 1
                last = torch.tensor([[len(p) - 1] for p in prompts], device=dev)  # each prompt's last position
                return decode(model, cache, mask, last, last, max_new_tokens=max_new_tokens, temperature=temperature,
                              gen=gen, stop_ids=stop_ids, pad_id=self.pad_id, first_logits=torch.stack(first_logits))
            finally:
                model.train(was_training)
                model.config._attn_implementation = attn

    return PrefixHFEngine(model, **kwargs)
