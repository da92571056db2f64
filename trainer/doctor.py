"""Mismatch doctor: does the trainer compute the log-probs the engine sampled with?

Before spending GPU hours: sample a few real episodes of an environment with the rollout
engine (the trainer's own ``Collector``, whose ``Episode`` records carry the engine's log-probs,
batched by its ``make_batch``), recompute the same
tokens' log-probs with the trainer (``policy_forward`` with the chosen attention
implementation), and report the mismatch statistics that training logs
every step (``correction.mismatch_stats``) with a verdict:

* ``healthy``   k3 <= 1e-3 and mean |dlogp| <= 0.02 (numerical noise; bf16 kernels land here);
* ``warning``   k3 <= 0.015 (the field's "healthy start" bound) and mean |dlogp| <= 0.05:
  train with rollout correction;
* ``unhealthy`` anything worse: a real bug (sinks dropped, wrong temperature, stale weights).
  For scale: GPT-OSS with sinks dropped in training measured mean |dlogp| 0.08-0.14; with a
  sink-aware kernel ~0.018.

The trainer attention is checked like everywhere else; ``allow_unsafe_attention=True``
exists only to *demonstrate* what a sink-dropping backend (``sdpa``) does to the report; such
a run is always ``unhealthy``, whatever the numbers (a fresh model hardly uses its sinks, so
the gap starts small and grows with training).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from agentgym.errors import ConfigError

from .algo.batch import make_batch
from .algo.correction import correction_weights, mismatch_stats
from .algo.episode import Episode
from .metrics import Progress
from .model.attention import set_attention
from .model.gptoss import SINK_DROPPING_ATTENTION, check_attention, load_policy, resolve_tokenizer
from .model.logprobs import policy_forward
from .model.routing import capture_routing, engine_routing, replay_routing, routers, routing_agreement
from .rollout.collector import Collector, drop_infra
from .rollout.engines import make_engine
from .rollout.engines.base import Engine, engine_abilities

__all__ = ["DoctorReport", "THRESHOLDS", "doctor_main", "run_doctor", "verdict"]

# What a user of the doctor can do when every episode was lost to a fault: the doctor keeps no
# state to resume from, it samples afresh.
RERUN_DOCTOR = "run agentgym-train doctor again (it samples afresh; there is nothing to resume)"

THRESHOLDS = {"healthy_k3": 1e-3, "healthy_abs_dlogp": 0.02, "warning_k3": 0.015, "warning_abs_dlogp": 0.05}


@dataclass
class DoctorReport:
    verdict: str  # "healthy" | "warning" | "unhealthy"
    reasons: list[str]
    stats: dict[str, float]
    setup: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": self.reasons, "stats": self.stats, "setup": self.setup}


def verdict(stats: dict[str, float]) -> tuple[str, list[str]]:
    """Classify mismatch statistics (module doc) -> (verdict, human-readable reasons)."""
    if not stats.get("n_tokens"):
        return "unhealthy", ["no policy tokens were sampled; nothing to compare"]
    k3, dl = stats["k3"], stats["abs_dlogp_mean"]
    if k3 <= THRESHOLDS["healthy_k3"] and dl <= THRESHOLDS["healthy_abs_dlogp"]:
        return "healthy", [f"k3={k3:.2e} <= {THRESHOLDS['healthy_k3']:g} and mean |dlogp|={dl:.2e}"]
    if k3 <= THRESHOLDS["warning_k3"] and dl <= THRESHOLDS["warning_abs_dlogp"]:
        return "warning", [
            f"k3={k3:.2e} is above noise but under {THRESHOLDS['warning_k3']}; mean |dlogp|={dl:.3f}",
            "train with rollout correction on (e.g. correction.mode=seq_tis or geo_mask)",
        ]
    return "unhealthy", [
        f"k3={k3:.3g} (bound {THRESHOLDS['warning_k3']}), mean |dlogp|={dl:.3f} (bound "
        f"{THRESHOLDS['warning_abs_dlogp']}), max |dlogp|={stats['abs_dlogp_max']:.2f}",
        "engine and trainer disagree: check that both honour attention sinks (eager / agentgym_flex), "
        "use the same temperature with top_p=1/top_k off, processed log-probs, and synced weights",
    ]


def _sample_episodes(
    engine: Engine, env_id: str, tokenizer: Any, episodes: int, *, max_new_tokens: int,
    temperature: float, seed: int, env_kwargs: dict[str, Any],
) -> tuple[list[Episode], int]:
    """Play ``episodes`` episodes with the trainer's :class:`Collector` (task seeds ``seed + i``,
    the engine's sampler seeded ``seed + round``) -> the Episode records the batch is made of, and
    how many episodes an infrastructure fault lost (left out, as training leaves them out)."""
    collector = Collector.from_factory(lambda: gym.make(env_id, tokenizer=tokenizer, **env_kwargs), episodes,
                                       engine, max_new_tokens=max_new_tokens)
    bar = Progress(episodes, "doctor: episodes sampled", file=sys.stderr)  # stdout is the report
    try:
        got, rollout = collector.collect([seed + i for i in range(episodes)], temperature=temperature,
                                      sample_seed=seed)
        bar.update(episodes, f"after {rollout.rounds} turns")
    finally:
        bar.close()
        collector.close()
    kept, _, lost = drop_infra(got, list(range(len(got))), then=RERUN_DOCTOR)
    return kept, lost


def run_doctor(
    model: str | nn.Module = "tiny",
    engine: str | Engine = "hf",
    attn_implementation: str = "eager",
    env_id: str = "agentgym/MathCalc-v1",
    episodes: int = 8,
    *,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
    device: str = "cpu",
    trainer_dtype: str = "float32",
    routing: bool = True,
    env_kwargs: dict[str, Any] | None = None,
    engine_kwargs: dict[str, Any] | None = None,
    allow_unsafe_attention: bool = False,
    tokenizer: Any = None,
) -> DoctorReport:
    """Sample ``episodes`` with ``engine``, rescore with the trainer, return a :class:`DoctorReport`.

    ``model``: a checkpoint path, hub id, ``"tiny"``, ``"tiny:o200k_harmony"``, or an
    ``nn.Module`` (then pass ``tokenizer``; default ByteTokenizer). The engine gets the
    model's float32 weights: ``hf`` samples from a private eager copy; ``vllm`` starts from
    them (its dtype is ``engine_kwargs["dtype"]``); ``openai-http`` is synced to them. The
    trainer rescores in ``trainer_dtype`` with ``attn_implementation``. With ``routing`` (MoE
    models, ``hf``/``vllm`` engines) the report adds how often engine and trainer picked the
    same experts, and the mismatch once the trainer replays the engine's routing (``*_replay``).
    ``engine`` may also be a running engine: it is synced to the model and left open.
    """
    if isinstance(model, nn.Module):
        base, name = model, type(model).__name__
    else:
        base, name = load_policy(model, device=device, attn_implementation="eager"), model
    if tokenizer is None:
        tokenizer = resolve_tokenizer(name if isinstance(model, str) else "tiny")
    if not allow_unsafe_attention:
        check_attention(attn_implementation, device)
    if trainer_dtype not in _DTYPES:
        raise ConfigError(f"trainer_dtype must be one of {sorted(_DTYPES)}, got {trainer_dtype!r}")
    kw = dict(engine_kwargs or {})
    engine_model = None
    own_engine = isinstance(engine, str)
    if not isinstance(engine, str):
        eng = engine
        eng.sync_weights(base)
        engine = type(engine).__name__
    elif engine == "hf":
        engine_model = copy.deepcopy(base)
        set_attention(engine_model, "eager")
        eng = make_engine("hf", model=engine_model, **kw)
    elif engine == "vllm":
        kw.setdefault("model", base)  # vLLM starts from these weights (saved to a checkpoint)
        eng = make_engine("vllm", **kw)
    else:
        eng = make_engine(engine, **kw)
        eng.sync_weights(base)
    trainer_model = base if trainer_dtype == "float32" else copy.deepcopy(base).to(_DTYPES[trainer_dtype])
    set_attention(trainer_model, attn_implementation)
    try:
        trajs, lost = _sample_episodes(eng, env_id, tokenizer, episodes, max_new_tokens=max_new_tokens,
                                       temperature=temperature, seed=seed, env_kwargs=env_kwargs or {})
        rows = [(e.traj.tokens, e.traj.policy_mask, [lp or 0.0 for lp in e.logprobs]) for e in trajs]
        engine_routes = _engine_routing(eng, engine_model, rows) if routing and routers(base) else None
    finally:
        if own_engine:
            eng.close()
    pad = getattr(trainer_model.config, "pad_token_id", None) or 0
    batch = make_batch(trajs, list(range(len(trajs))), pad_id=pad)
    ids, attn, pmask, blp = batch.input_ids, batch.attention_mask, batch.policy_mask, batch.behaviour_logp
    dev = next(trainer_model.parameters()).device

    def rescore() -> torch.Tensor:
        with torch.no_grad():
            return policy_forward(trainer_model, ids.to(dev), attn.to(dev), temperature=temperature or 1.0,
                                  with_entropy=False).logprobs.float().cpu()

    with capture_routing(trainer_model) as trainer_routes:
        old = rescore()
    weights = correction_weights(old, blp, pmask, mode="token_tis")
    stats = mismatch_stats(old, blp, pmask, weights)
    if engine_routes is not None:
        imposed = torch.stack(trainer_routes)  # (L, B*T, k): the trainer's own choice on padding
        L, _, k = imposed.shape
        imposed = imposed.view(L, *ids.shape, k)
        for b, route in enumerate(engine_routes):
            imposed[:, b, : route.shape[1]] = torch.as_tensor(route)
        imposed = imposed.view(L, -1, k)
        stats.update(routing_agreement(imposed, torch.stack(trainer_routes), attn.view(-1)))
        with replay_routing(trainer_model, imposed):
            replayed = mismatch_stats(rescore(), blp, pmask)
        stats.update({f"{key}_replay": replayed[key] for key in ("abs_dlogp_mean", "abs_dlogp_max", "k1", "k3")})
    v, reasons = verdict(stats)
    has_sinks = any(n.endswith("sinks") for n, _ in trainer_model.named_parameters())
    if has_sinks and attn_implementation in SINK_DROPPING_ATTENTION:
        # The numbers can look small on a model that barely uses its sinks yet (a fresh tiny
        # model: sinks ~ 0); the bug is structural and grows as training learns the sinks.
        v = "unhealthy"
        reasons = [f"trainer attention {attn_implementation!r} drops the attention sinks "
                   f"({SINK_DROPPING_ATTENTION[attn_implementation]}); measured here: mean |dlogp| "
                   f"{stats.get('abs_dlogp_mean', 0.0):.2e}, max {stats.get('abs_dlogp_max', 0.0):.2f}, "
                   "and the gap grows as the model learns to use its sinks", *reasons[1:]]
    setup = {"model": name, "engine": engine, "engine_dtype": str(kw.get("dtype", "float32")),
             "trainer_dtype": trainer_dtype, "attn_implementation": attn_implementation, "env_id": env_id,
             "vocab_size": int(tokenizer.vocab_size), "episodes": episodes, "max_new_tokens": max_new_tokens,
             "temperature": temperature, "tokens": int(attn.sum()), "policy_tokens": int(pmask.sum())}
    if lost:
        setup["episodes_lost"] = lost  # to infrastructure faults (a sandbox, a server): not in the stats
    return DoctorReport(v, reasons, stats, setup)


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _engine_routing(eng: Engine, engine_model: nn.Module | None,
                    rows: list[tuple[list[int], list[int], list[float]]]) -> list[Any] | None:
    """The engine's experts for every token of every episode, ``(L, len, k)`` each, or None (a
    server: its routing is not observable)."""
    if not engine_abilities(eng).routing and engine_model is None:
        return None
    return engine_routing(eng, [r[0] for r in rows])


def _print(report: DoctorReport) -> None:
    s = report.stats
    print(f"agentgym mismatch doctor: {report.setup}")
    for key in ("abs_dlogp_mean", "abs_dlogp_max", "k1", "k3", "log_ppl_diff_mean", "log_ppl_diff_max",
                "w_mean", "w_std", "w_min", "w_max", "ess", "truncated_frac", "n_tokens", "n_seqs",
                "routing_agree", "routing_tokens_all_layers_agree", "abs_dlogp_mean_replay",
                "abs_dlogp_max_replay", "k3_replay"):
        if key in s:
            print(f"  {key:>18}: {s[key]:.6g}")
    print(f"verdict: {report.verdict.upper()}")
    for r in report.reasons:
        print(f"  - {r}")


def doctor_main(argv: list[str] | None = None) -> int:
    """``agentgym-train doctor``: exit 0 healthy, 1 warning, 2 unhealthy."""
    from agentgym.cli import positive_int
    from agentgym.leaderboards.cli import parse_kv

    ap = argparse.ArgumentParser(prog="agentgym-train doctor", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", default="tiny",
                    help="checkpoint dir, hub id, 'tiny' or 'tiny:o200k_harmony' (GPT-OSS's real vocabulary)")
    ap.add_argument("--engine", default="hf", choices=["hf", "openai-http", "vllm"], help="the rollout engine")
    ap.add_argument("--attn", default="eager", help="trainer attention implementation")
    ap.add_argument("--env", default="agentgym/MathCalc-v1", help="the environment the episodes are played in")
    ap.add_argument("--episodes", type=positive_int, default=8, help="episodes sampled")
    ap.add_argument("--max-turns", type=positive_int, default=2,
                    help="turns per episode (an untrained model never stops: each turn adds max-new-tokens "
                         "over a growing context)")
    ap.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE",
                    help="gym.make keyword of the env (repeatable), e.g. --env-kwarg prompt=compact")
    ap.add_argument("--max-new-tokens", type=positive_int, default=64, help="tokens sampled per turn")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    ap.add_argument("--seed", type=int, default=0, help="task and sampling seed")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    ap.add_argument("--base-url", help="server URL for --engine openai-http")
    ap.add_argument("--reload", default="agentgym", help="openai-http: the server's reload protocol (agentgym, vllm)")
    ap.add_argument("--engine-dtype", default="bfloat16", choices=sorted(_DTYPES), help="--engine vllm: its dtype")
    ap.add_argument("--trainer-dtype", default="float32", choices=sorted(_DTYPES), help="the trainer's dtype")
    ap.add_argument("--allow-unsafe-attention", action="store_true",
                    help="demonstration only: let a sink-dropping attention (sdpa) through")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args(argv)
    engine_kwargs: dict[str, Any] = {}
    if args.engine == "openai-http":
        if not args.base_url:
            raise ConfigError("--engine openai-http needs --base-url http://HOST:PORT")
        engine_kwargs["base_url"] = args.base_url
        engine_kwargs["reload"] = args.reload
    elif args.engine == "vllm":
        engine_kwargs["dtype"] = args.engine_dtype
    env_kwargs = {"max_turns": args.max_turns, **parse_kv(args.env_kwarg, "--env-kwarg")}
    print(f"agentgym-train doctor: {args.episodes} episodes of {args.env} with the {args.engine} engine, up to "
          f"{env_kwargs['max_turns']} turns x {args.max_new_tokens} new tokens each", file=sys.stderr, flush=True)
    report = run_doctor(args.model, args.engine, args.attn, args.env, args.episodes,
                        max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                        device=args.device, trainer_dtype=args.trainer_dtype, engine_kwargs=engine_kwargs,
                        env_kwargs=env_kwargs, allow_unsafe_attention=args.allow_unsafe_attention)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report)
    return {"healthy": 0, "warning": 1}.get(report.verdict, 2)
