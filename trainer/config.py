"""The one typed config of ``agentgym-train``: YAML recipe + dotted command-line overrides.

    cfg = load_config("cpu-quickstart", ["ppo.lr=5e-4", "rollout.samples_per_task=8"])

Small nested dataclasses (env, model, rollout, ppo, correction, sft, log, distributed), each field
documented once by the string right under it (``--help`` prints those strings). Unknown
keys are rejected with a did-you-mean suggestion; values are checked against the field
types; derived values (batch sizes, schedule lengths) are computed in one place,
:meth:`TrainConfig.derived`. Recipes live in ``agentgym/trainer/recipes/*.yaml`` and are
found by bare name (``--config cpu-quickstart``) or by path.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import inspect
import math
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentgym.env import PROMPT_STYLES
from agentgym.errors import ConfigError
from agentgym.registration import capabilities

from .algo.correction_modes import CORRECTION_MODES, parse_mode
from .curriculum import CurriculumConfig
from .health import HealthConfig
from .receivers import OWN, check_receivers

__all__ = [
    "ALGOS", "ARMS",
    "CorrectionConfig", "DistributedConfig", "EnvConfig", "LoRAConfig", "LogConfig", "ModelConfig", "PPOConfig",
    "RECIPES_DIR", "RayConfig",
    "RolloutConfig", "SFTConfig", "TrainConfig", "config_from_dict", "config_help", "config_to_dict",
    "find_recipe",
    "load_config",
]

RECIPES_DIR = Path(__file__).parent / "recipes"


@dataclass
class EnvConfig:
    id: str = "agentgym/MathCalc-v1"
    """Registered environment id (``gym.make`` name)."""
    reward_mode: str = "sparse"
    """``sparse`` (task outcome only) or ``shaped`` (outcome + the env's documented terms)."""
    max_turns: int = 4
    """Turn budget per episode; hitting it truncates (the trainer bootstraps with GAE)."""
    max_tokens: int = 2048
    """Token budget of the whole episode (prompt included)."""
    max_action_tokens: int = 96
    """Longest action the env accepts; also the engine's max new tokens per turn."""
    prompt: str = "harmony"
    """Prompt style: ``harmony`` (GPT-OSS system + developer, ~600 byte tokens) or ``compact``
    (one short developer message, ~150; for tiny models trained from scratch)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for ``gym.make``: the env constructor's own (e.g. ``families`` on
    Math-v1, ``depth`` on Lookup-v1); a name its constructor does not take is refused."""
    train_split: str | None = "train"
    """The env's split that SFT demonstrations and RL tasks come from, given to the env as the
    constructor argument ``split`` and as the reset option ``split``. null: the env has no
    splits (then set ``exclude_held_out`` so that evaluation stays held out)."""
    eval_split: str | None = "eval"
    """The split evaluations and the warm start's stopping check draw their problems from
    (``test`` where an env has one and you mean it); null: the env has no splits."""
    exclude_held_out: bool = False
    """The trainer itself keeps held-out problems out of training: before a training episode it
    resets a probe env to read the task's id and replaces a task whose id is held out (an
    evaluation or stopping-check problem), for SFT demonstrations and RL tasks alike. For envs
    without splits; costs one extra reset per training task. Whatever this says, a training
    episode on a held-out problem is counted, and is an error when the env has splits."""
    train_options: dict[str, Any] = field(default_factory=dict)
    """More ``reset(options=...)`` for training episodes (the split goes in ``train_split``); only
    the options the env declares (``Capabilities.reset_options``) where it declares them."""
    eval_options: dict[str, Any] = field(default_factory=dict)
    """More ``reset(options=...)`` for evaluation episodes (the split goes in ``eval_split``)."""
    sample_option: str | None = None
    """A reset option that gives each RL sample of a task its index in the group (0 to
    ``rollout.samples_per_task - 1``), for an env whose randomness within a task has its own seed
    (Lookup-v1: ``fault_seed``, the draw of its faults). null: every sample of a task resets the
    same, faults included; with a near-deterministic policy its group then scores the same and a
    group baseline gives it no advantage."""


@dataclass
class LoRAConfig:
    rank: int = 0
    """Adapter rank r; 0 = no adapters (every weight trained). With r > 0 the base is frozen and
    AdamW updates only the adapters (PEFT's LoRA); the KL reference is the base with the adapters
    disabled, no second copy. docs/training/lora.md."""
    alpha: float = 32.0
    """Scale of the update: the adapter's output is multiplied by alpha / rank."""
    dropout: float = 0.0
    """Dropout on the adapters' input (0 keeps the PPO ratio of the first minibatch exactly 1)."""
    targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Linear modules (by name suffix) that get adapters: the attention projections by default;
    ``lm_head`` adds one on the output head, whose frozen weights otherwise cap how sure the policy
    can be of a token (docs/training/lora.md)."""
    experts: bool = False
    """Also adapt the MoE experts' fused weights (``mlp.experts.gate_up_proj`` and
    ``mlp.experts.down_proj``, one adapter per expert) through PEFT's ``target_parameters``."""
    export_merged: bool = False
    """Each PPO checkpoint also writes ``merged/``: the base with the adapters folded in, a plain
    model folder that transformers and ``agentgym-eval --policy hf`` load (``model/`` holds the
    adapters only)."""


@dataclass
class ModelConfig:
    name: str = "tiny"
    """``tiny`` (a local tiny GPT-OSS for a built-in tokenizer: ``tiny`` the byte one,
    ``tiny:o200k_harmony`` GPT-OSS's own 201,088 ids; see ``tokenizer``) or a local path / hub id."""
    tiny: dict[str, Any] = field(default_factory=dict)
    """Overrides for the tiny GPT-OSS config (hidden_size, num_hidden_layers, ...)."""
    tokenizer: str = "auto"
    """``auto`` (the model's own: ``byte`` for ``tiny``), ``byte`` (agentgym's byte tokenizer),
    ``o200k_harmony`` / ``gpt-oss``, or a local path / hub id of a Hugging Face tokenizer
    (:func:`~agentgym.trainer.model.gptoss.resolve_tokenizer` has every case)."""
    init_from: str | None = None
    """Start from these weights instead (a run dir, a checkpoint dir or a model dir); every
    parameter must match by name and shape (missing or unexpected keys are an error)."""
    attn_implementation: str = "auto"
    """Trainer attention; backends that drop GPT-OSS's sinks are refused."""
    dtype: str = "float32"
    """Compute dtype: float32 or bfloat16. Parameters, gradients and AdamW state stay float32
    (master weights); bfloat16 runs the forward/backward under autocast (one process) or FSDP2
    mixed precision (torchrun), and engines are synced with bfloat16 weights."""
    device: str = "cpu"
    """Trainer device: cpu or cuda (under torchrun: cuda:LOCAL_RANK)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass (memory for compute)."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """LoRA adapters instead of full fine-tuning (``model.lora.rank`` > 0)."""


@dataclass
class RayConfig:
    address: str | None = None
    """Ray cluster to join: null starts a local instance (or joins ``RAY_ADDRESS``), ``auto`` the
    cluster this machine belongs to (``ray start --head`` / ``ray start --address``)."""
    num_workers: int = 2
    """Rollout workers (Ray actors), each with its own envs and engine client, spread over nodes."""
    episodes_per_call: int = 4
    """Episodes a worker runs per call: the unit that is lost (and retried or failed) if it dies."""
    cpus_per_worker: float = 1.0
    """CPUs Ray reserves per worker (fractions let more workers share a small machine)."""
    gpus_per_worker: float = 0.0
    """GPUs Ray reserves per worker (for an in-worker engine; 0 with a server engine)."""
    retry: str = "auto"
    """Episodes lost with a worker: ``auto`` retries replayable envs and fails the others,
    ``always`` / ``never`` override (see rollout/ray_collector.py for the rule)."""
    replayable: list[str] = field(default_factory=list)
    """More env ids whose lost episodes may be run again (no state outlives an episode)."""
    max_attempts: int = 2
    """Runs of one episode at most (the first one included) before it is reported failed."""
    max_restarts: int = 3
    """Restarts of each worker after it died; past that it is retired."""
    call_timeout_s: float = 0.0
    """Kill (and restart) a worker whose unit runs longer than this; 0 = no limit."""
    init: dict[str, Any] = field(default_factory=dict)
    """Extra ``ray.init`` arguments for a local instance (num_cpus, object_store_memory, ...)."""


@dataclass
class RolloutConfig:
    engine: str = "hf"
    """Rollout engine: ``hf`` (in process), ``openai-http`` (a server) or ``vllm``."""
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the engine (base_url, tensor_parallel_size, ...)."""
    tasks_per_step: int = 8
    """Distinct tasks per PPO step."""
    samples_per_task: int = 4
    """Episodes per task (the group of the group baseline; same seed, same task)."""
    temperature: float = 1.0
    """Sampling temperature; the trainer computes log-probs at the same temperature."""
    max_workers: int = 16
    """Threads stepping environments concurrently."""
    prefix_cache: bool = True
    """hf engine: prefill the prompt prefix all episodes share once (same samples, faster)."""
    sleep_level: int = 0
    """A colocated engine's memory during the learner update: 0 = keeps it; 1 = sleeps (vLLM:
    KV cache freed, weights offloaded to CPU); 2 = sleeps and drops its weights (the weight
    sync refills them). Woken before each sync. Needs engine_kwargs.enable_sleep_mode."""
    engine_weights: str = "shared"
    """``hf`` engine: ``shared`` (it samples from the learner's own module: engine and learner
    agree to float noise, the ratio of an exactly on-policy step is 1 by construction) or
    ``copy`` (its own copy of the weights in ``engine_dtype``, refreshed every ``sync_every``
    steps: an engine really off the learner, as vLLM or a server is)."""
    engine_dtype: str = "auto"
    """Weights of an ``hf`` engine copy: ``auto`` (model.dtype), ``float32`` or ``bfloat16`` (a
    bf16 engine against the float32 learner: the mismatch rollout correction exists for)."""
    sync_every: int = 1
    """Push the learner's weights to the engine every N steps (1: after every update). With N > 1
    the episodes of a step come from a policy up to N-1 updates old and rollout correction
    (correction.mode) weighs them; needs an engine with its own weights (engine_weights=copy,
    vllm, openai-http). Evaluations sync first (a stale engine would evaluate an old policy):
    keep log.eval_every a multiple of N so that the staleness pattern does not change."""
    routing_replay: bool = False
    """Routing replay ("R3"): record the engine's MoE experts for every token of every episode
    (one engine prefill of each finished episode; hf or vllm engine) and impose them in the
    learner's old-log-prob, reference and training passes, so engine and learner score the same
    expert paths. Not with rollout.backend=ray."""
    backend: str = "local"
    """``local`` (envs on threads of this process) or ``ray`` (rollout workers as Ray actors)."""
    mode: str = "sync"
    """``sync`` (collect, then update, then sync: every batch comes from the current policy) or
    ``async`` (a producer thread keeps generating the next steps' episodes while the learner
    updates; weights go to the engine after every update; episodes in flight continue with the
    new weights and every sampled token records its policy version). Needs an engine with its own
    weights: engine_weights=copy, vllm, openai-http, or rollout.backend=ray. docs/async.md."""
    max_staleness: int = 1
    """``mode: async``: a step trains on tokens at most this many policy versions old. The
    producer starts step n's episodes only once the engine holds version n - k, so older tokens
    are never produced (a guard still drops and counts any: ``async_dropped_stale``)."""
    ray: RayConfig = field(default_factory=RayConfig)
    """Ray collection (rollout.backend=ray): workers, placement, fault handling."""


@dataclass
class PPOConfig:
    steps: int = 30
    """Number of PPO steps (collect -> update) after the warm start."""
    advantage: str = "group"
    """``group`` (baseline = mean score of the task's samples, no critic), ``prefix`` (token-level
    credit from the tree of a task's samples: each token against the mean score of the episodes
    that shared its prefix, 0 on a token they all took; ``algo/ppo.py:prefix_advantages``), ``batch`` (baseline =
    mean score of the whole step's episodes, all tasks together, as REINFORCE++: a solved easy
    task is still reinforced) or ``gae`` (value head)."""
    lr: float = 5e-4
    """AdamW learning rate of the policy (and value head)."""
    warmup_steps: int = 2
    """Linear learning-rate warmup, in optimizer steps."""
    schedule: str = "constant"
    """After warmup: ``constant`` or ``cosine`` (down to 10% of ``lr`` at the last optimizer
    step, ``steps`` x ``epochs`` x ``minibatches``: the last steps move the policy less, so the
    final weights wander less from step to step). Every arm of a run (placebo, RFT, SFT)
    takes the same schedule."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping (global L2 norm)."""
    epochs: int = 1
    """Passes over each batch. 1 epoch + 1 minibatch = exactly on-policy (ratio 1)."""
    minibatches: int = 1
    """Minibatches per epoch (split by episode); one optimizer step each."""
    micro_batch_tokens: int = 8192
    """Token budget of one forward/backward (rows x padded length, rows bucketed by length);
    gradients accumulate over a minibatch's micro-batches, normalised by its policy-token
    count, so the update does not depend on it. 0 = the whole minibatch at once. The warm
    start's SFT steps use the same budget."""
    clip_low: float = 0.2
    """Lower clip of the ratio: 1 - clip_low."""
    clip_high: float = 0.28
    """Upper clip of the ratio: 1 + clip_high (asymmetric, DAPO-style)."""
    gamma: float = 1.0
    """Discount (GAE) per policy token."""
    lam: float = 0.95
    """GAE lambda."""
    value_coef: float = 0.5
    """Weight of the value loss (GAE only)."""
    value_clip: float | None = 0.2
    """Clip of the value update (GAE only); null to disable."""
    group_std_normalize: bool = True
    """Divide group advantages by the group's score std (GRPO); false = Dr.GRPO style."""
    baseline_scale: float = 1.0
    """The group (or batch) baseline is this fraction of the mean score: ``A = r - s * mean``.
    1 = the usual baseline; 0 = REINFORCE without one (with 0/1 rewards: every success pushed up,
    failures not pushed down, the direction expert iteration takes); between, a mix of the two.
    The expected gradient points the same way for any value; they differ in variance and in what
    a finite step does. Below 1 it needs ``group_std_normalize=false`` (a group whose scores are
    all equal has std 0)."""
    kl_coef: float = 0.0
    """Weight of the KL to a frozen reference (the warm-started policy); 0 disables it."""
    kl_target: float | None = None
    """Adaptive KL penalty (Schulman et al. 2017, sec. 4, with a floor): after each step whose KL
    to the reference (``kl_ref``, the value the health monitor watches) is above 1.5 x this
    target, the coefficient doubles; below target / 1.5 it halves, but never below ``kl_coef``,
    its starting value. null (default): a fixed ``kl_coef``. Loss only (``kl_in: loss``).
    Logged as ``kl_coef``; kept in checkpoints."""
    kl_estimator: str = "k3"
    """Estimator of KL(policy || reference) from the sampled tokens (algo/ppo.py ``kl_estimate``):
    ``k3`` (in the loss its gradient optimises KL(reference || policy)), ``k2`` (0.5 x squared
    log-ratio: in the loss its gradient is that of KL(policy || reference)) or ``k1`` (the plain
    log-ratio: reward only, its loss gradient is zero in expectation). As a reward
    (``kl_in: reward``) only ``k1`` is right, so only ``k1`` is accepted there."""
    kl_in: str = "loss"
    """Where the KL goes: ``loss`` (penalty term) or ``reward`` (per token for GAE; with the
    group baseline the outcome scores are normalised in their group first, then each episode's
    summed penalty, centred in its group, is subtracted)."""
    placebo: bool = False
    """Control: permute the episodes' outcome scores within each batch before the advantages (the
    placebo arm: what the KL, the optimizer's momentum and noise do without the reward's
    information; the permuted return sits on the episode's last policy token)."""
    drop_uniform_groups: bool = False
    """Dynamic sampling: drop the groups whose scores are all equal (no signal for a group
    baseline; they only dilute the token mean) before the update. No re-sampling: the episode
    budget stays the same. Logged as ``groups_dropped_frac``."""
    mask_overlong: bool = False
    """Overlong masking: an episode with an action cut at the token limit (env.max_action_tokens,
    no stop token) gets no policy loss instead of being trained as an ordinary failure; its score
    still counts in its group's baseline. Logged as ``overlong_frac``."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (subtracted from the loss)."""
    normalize_rewards: bool = False
    """Divide scores by a running std of scores before computing advantages."""
    carry_sft_optimizer: bool = True
    """Start PPO's AdamW from the warm start's state: first and second moments *and* step count.
    A fresh AdamW moves every weight by ~lr on its first steps (m/sqrt(v) = sign g); carried
    moments keep the warm start's direction (m) and scale (v: SFT gradients, often larger than
    PPO's, shrink the step) for ~1/(1-beta2) = 1,000 steps. The step actually taken is logged
    every step as ``adam_step_rms`` (RMS of m_hat / (sqrt(v_hat) + eps), in units of lr)."""


@dataclass
class CorrectionConfig:
    mode: str = "seq_tis"
    """Rollout correction: none, token_tis, seq_tis, token_mis, seq_mis, geo_mask, or a rule
    plus the geometric mask, e.g. token_tis+geo_mask (verl's Geo-RS-Token-TIS)."""
    threshold: float = 2.0
    """Cap C of the TIS/MIS weights."""
    lo: float | None = None
    """Optional lower bound of seq_mis (an extension: verl's Seq-MIS has none)."""
    hi: float | None = None
    """Upper bound of seq_mis (default threshold)."""
    geo_band: list[float] = field(default_factory=lambda: [0.999, 1.001])
    """Band of exp(mean log rho) kept by geo_mask."""


@dataclass
class SFTConfig:
    steps: int = 0
    """Warm-start optimizer steps on oracle demonstrations (0 = no warm start)."""
    batch_size: int = 16
    """Demonstration episodes per step."""
    lr: float = 1e-3
    """Peak learning rate (after linear warmup)."""
    schedule: str = "cosine"
    """After warmup: ``cosine`` (down to 10% of the peak) or ``constant``."""
    warmup_steps: int = 10
    """Warmup steps."""
    max_grad_norm: float = 1.0
    """Gradient clipping."""
    seed: int = 10_000
    """First task seed of the demonstrations (kept apart from PPO's task seeds), for run seed 0;
    run seed ``s`` adds ``s x 10^8`` (``TrainConfig.stream``)."""
    teacher: str = "oracle"
    """Demonstration policy, one of the teachers the env declares (``Capabilities.teachers``):
    the built-in envs declare ``oracle``, always right, the honest warm start. A teacher whose name
    starts with ``defect-`` plants a defect on purpose, and the closing report says that a gain
    over its warm start is the defect being undone."""
    teacher_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the teacher's factory, for teachers that take options (``oracle``
    takes none)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Reset options of the warm start's demonstrations, over ``env.train_options`` (e.g.
    ``{depth: [1, 2], fail_rate: 0.0}`` on Lookup-v1: cheap demonstrations of the simpler cases,
    while RL trains on the harder ones ``env.train_options`` names)."""
    oracle_steps: int = 0
    """With a teacher other than ``oracle``: the first ``oracle_steps`` steps imitate the oracle,
    the rest the teacher (0 = the teacher from the start)."""
    load: str | None = None
    """Skip the warm start and start from a saved one: a run's ``warm_start/`` folder (weights,
    the warm start's AdamW state, its held-out evaluation). How the arms of a comparison share
    one warm start."""
    check_every: int = 0
    """Held-out stopping check every N warm-start steps (0: none): pass@1 and pass@k of the
    policy at ``check_temperature`` on ``check_problems`` held-out problems (eval split, none of
    them in the final evaluation). ``sft.steps`` is then the maximum."""
    check_from: int = 0
    """First warm-start step at which the check runs (before it, nothing to see)."""
    check_problems: int = 32
    """Held-out problems of the stopping check."""
    check_samples: int = 8
    """Samples per problem of the stopping check: the k of its pass@k."""
    check_temperature: float | None = None
    """Sampling temperature of the stopping check; null (default): rollout.temperature. Lets a
    recipe that trains below T=1 keep the warm start a T=1 check chose."""
    stop_pass_at_k: float | None = None
    """Stop the warm start once pass@k reaches this: enough successes in a group for RL to learn from."""
    stop_pass_at_1: float | None = None
    """... or once pass@1 reaches this: leave room for RL (the warm start must not already solve it)."""
    keep: str = "last"
    """The weights the warm start ends with when it runs to ``sft.steps`` without meeting its stop
    rule: ``last``, or ``best``: those of the check with the highest held-out pass@1 (the earliest
    of equals), with their AdamW state, so a loss spike near the cap does not become what every
    arm starts from. The best so far is kept in ``RUN_DIR/warm_best.pt`` (a resumed warm start
    reads it); single process only. A run that takes no warm-start step (an arm that loads one)
    has nothing to keep."""
    min_wellformed: float = 0.5
    """The warm start failed if fewer than this share of its held-out episodes at the training
    temperature are well formed (every action parsed, a tool called without error when the env
    has tools, a final answer given): its tool loop did not learn. The run then stops with exit
    status 3 after saving and evaluating the warm start; the controls bench counts the seed as
    failed."""
    checkpoint_every: int = 100
    """Warm-start steps between checkpoints (0 = only when it ends): ``--resume`` continues a
    killed warm start from the last one, exactly (single process)."""


@dataclass
class LogConfig:
    run_dir: str = "runs/agentgym"
    """Where metrics, plots, checkpoints and the resolved config go."""
    eval_every: int = 10
    """Evaluate every N PPO steps (and before the first and after the last); 0 = never."""
    eval_episodes: int = 32
    """Held-out problems of an evaluation: distinct task ids of the eval split (seeds are probed
    from ``eval_seed_start`` up and repeats of a problem skipped), the same every time."""
    eval_seed_start: int = 0
    """First seed probed for the evaluation problems. Above 0 the problems a run from 0 evaluates
    on (as many) are skipped as well: a recipe tuned with the default 0 and measured with, say,
    1000000 is never scored on a problem a tuning decision looked at. An eval split too small
    to hold both sets is used from this seed without skipping; the run's ``held out:`` line says
    which."""
    eval_temperature: float = 0.0
    """Temperature of the secondary evaluation (0 = greedy)."""
    eval_sampled: bool = True
    """Also evaluate the same problems at rollout.temperature (fixed sampling seeds), logged with
    a ``sampled_`` prefix: the primary number (the policy as trained, not its argmax)."""
    eval_samples: int = 1
    """Samples per problem at rollout.temperature in the warm-start and final evaluations
    (pass@k for k up to this; success is their mean); in-between evaluations take one."""
    eval_episodes_final: int = 0
    """Problems of the two evaluations the gain is measured between (right after the warm
    start, the end); 0 = eval_episodes. The others (untrained, in between) use eval_episodes."""
    checkpoint_every: int = 10
    """Checkpoint every N PPO steps (and at the end); 0 = only at the end."""
    keep_checkpoints: int = 2
    """How many step checkpoints to keep (oldest are deleted)."""
    export_dtype: str = "bfloat16"
    """Under torchrun every checkpoint also exports the policy as one Hugging Face model folder
    (``checkpoints/step-N/model``: safetensors, config, tokenizer) in this dtype: bfloat16 or
    float32 (the master weights exactly)."""
    tensorboard: bool = True
    """Write TensorBoard event files to run_dir/tb."""
    wandb: bool = False
    """Log to Weights & Biases too (needs ``pip install wandb``)."""
    progress: bool = True
    """Live progress bar (rich)."""
    plots: bool = True
    """Write PNG plots to run_dir/plots at the end."""
    save_trajectories: bool = False
    """Append every training trajectory to run_dir/trajectories.jsonl."""


@dataclass
class DistributedConfig:
    rollout_tp: int = 1
    """Under torchrun: ranks per rollout engine (its tensor-parallel size). world / rollout_tp
    engines each collect a share of the tasks; 1 = one engine per rank."""
    backend: str = "auto"
    """Process-group backend: auto (nccl on CUDA, gloo on CPU), nccl or gloo."""
    reshard_after_forward: bool = True
    """FSDP2: free each layer's gathered parameters after its forward (ZeRO-3); false keeps
    them until the backward (more memory, less communication)."""
    nproc: int = 0
    """Processes the recipe is written for (checked against torchrun's; 0 = any). The dry run
    (--dry-run) plans for this many."""
    gpu_memory_gib: float = 80.0
    """Memory of one GPU, for the dry run's per-GPU estimate."""


ALGOS = ("ppo", "rft", "raft", "sft")
SEED_STRIDE = 100_000_000  # run seed s draws its task streams from base + s * SEED_STRIDE (TrainConfig.stream)
# control arm -> (algo, ppo.placebo): the arms a run can be compared with (controls.py runs them)
ARMS: dict[str, tuple[str, bool]] = {"ppo": ("ppo", False), "placebo": ("ppo", True),
                                     "rft": ("rft", False), "raft": ("raft", False), "sft": ("sft", False)}


@dataclass
class TrainConfig:
    seed: int = 0
    """Seed of everything a run draws: the model's initial weights, the sampling, the placebo's
    shuffle, and every task stream (the warm start's demonstrations, the RL tasks, the SFT arm's
    demonstrations, the warm start's stopping-check problems: :meth:`stream`). The evaluation
    problems are not drawn by it: a measurement names its block with ``log.eval_seed_start``."""
    threads: int = 0
    """torch CPU threads (0 = torch's default)."""
    algo: str = "ppo"
    """What the steps after the warm start do (ppo.steps of them, each with the same episode
    budget, rollout.tasks_per_step x samples_per_task, and the same optimizer: ppo.lr, epochs,
    minibatches): ``ppo``; ``rft`` (rejection-sampling fine-tuning, or expert iteration: the NLL
    of the policy's own successful episodes); ``raft`` (best-of-group imitation, reward-ranked
    fine-tuning: the NLL of each group's highest-reward episode, where it scored above 0);
    ``sft`` (continued SFT on oracle demonstrations of as many new train problems: the
    ceiling)."""
    controls: list[str] = field(default_factory=list)
    """Arms to run after this one, each from the same saved warm start (RUN_DIR/controls/NAME):
    ``placebo`` (PPO on permuted rewards), ``rft``, ``raft``, ``sft``, ``ppo``. The closing lines compare
    this run with each on the same held-out problems (paired differences, standard errors)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    log: LogConfig = field(default_factory=LogConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)

    def derived(self) -> dict[str, Any]:
        """Values computed from the fields, in one place."""
        episodes = self.rollout.tasks_per_step * self.rollout.samples_per_task
        return {
            "episodes_per_step": episodes,
            "episodes_per_minibatch": max(1, episodes // self.ppo.minibatches),
            "exact_on_policy": self.ppo.epochs == 1 and self.ppo.minibatches == 1,
            "optimizer_steps": self.ppo.steps * self.ppo.epochs * self.ppo.minibatches,
        }

    def validate(self) -> None:
        choices = {
            "env.reward_mode": (self.env.reward_mode, ("sparse", "shaped")),
            "env.prompt": (self.env.prompt, tuple(PROMPT_STYLES)),
            "ppo.advantage": (self.ppo.advantage, ("group", "prefix", "batch", "gae")),
            "ppo.kl_estimator": (self.ppo.kl_estimator, ("k1", "k2", "k3")),
            "sft.keep": (self.sft.keep, ("last", "best")),
            "algo": (self.algo, ALGOS),
            "rollout.engine_weights": (self.rollout.engine_weights, ("shared", "copy")),
            "rollout.engine_dtype": (self.rollout.engine_dtype, ("auto", "float32", "bfloat16")),
            "ppo.kl_in": (self.ppo.kl_in, ("loss", "reward")),
            "model.dtype": (self.model.dtype, ("float32", "bfloat16")),
            "log.export_dtype": (self.log.export_dtype, ("bfloat16", "float32")),
            "sft.schedule": (self.sft.schedule, ("cosine", "constant")),
            "ppo.schedule": (self.ppo.schedule, ("constant", "cosine")),
            "distributed.backend": (self.distributed.backend, ("auto", "nccl", "gloo")),
            "rollout.backend": (self.rollout.backend, ("local", "ray")),
            "rollout.mode": (self.rollout.mode, ("sync", "async")),
            "rollout.ray.retry": (self.rollout.ray.retry, ("auto", "always", "never")),
        }
        if "split" in self.env.kwargs and (self.env.train_split is not None or self.env.eval_split is not None):
            raise ConfigError(f"env.kwargs.split={self.env.kwargs['split']!r}: the trainer gives the env its split "
                              "from env.train_split and env.eval_split; fix: set those (null: the env's own) "
                              "and drop env.kwargs.split")
        clash = sorted(set(self.env.kwargs) & set(OWN))
        if clash:
            raise ConfigError(f"env.kwargs: {clash} are env.* keys of their own; set them as "
                              + " ".join(f"env.{k}=..." for k in clash if k != "tokenizer")
                              + (" (the tokenizer comes from the model)" if "tokenizer" in clash else ""))
        if self.model.tiny and not (self.model.name == "tiny" or self.model.name.startswith("tiny:")):
            raise ConfigError(f"model.tiny={_short(self.model.tiny)} shapes the tiny model built locally, but "
                              f"model.name={self.model.name!r} is loaded as it is; fix: drop model.tiny, "
                              "or model.name=tiny")
        for key, (got, allowed) in choices.items():
            if got not in allowed:
                raise ConfigError(f"{key}: expected one of {list(allowed)}, got {got!r}; "
                                  f"fix: {key}={_suggest(str(got), allowed) or allowed[0]}")
        teachers = sorted(capabilities(self.env.id).teachers)  # none declared: the warm start says so
        if teachers and self.sft.teacher not in teachers:
            raise ConfigError(f"sft.teacher: {self.env.id} declares the teachers {teachers}, got "
                              f"{self.sft.teacher!r}; fix: sft.teacher={_suggest(self.sft.teacher, teachers) or 'oracle'}")

        try:
            parse_mode(self.correction.mode)
        except ConfigError as e:
            fix = _suggest(self.correction.mode, CORRECTION_MODES) or "seq_tis"
            raise ConfigError(f"correction.mode: {e}; fix: correction.mode={fix}") from None
        positive = {"rollout.tasks_per_step": self.rollout.tasks_per_step,
                    "rollout.samples_per_task": self.rollout.samples_per_task,
                    "ppo.epochs": self.ppo.epochs, "ppo.minibatches": self.ppo.minibatches,
                    "ppo.lr": self.ppo.lr, "sft.batch_size": self.sft.batch_size,
                    "sft.lr": self.sft.lr, "env.max_action_tokens": self.env.max_action_tokens,
                    "correction.threshold": self.correction.threshold,
                    "log.eval_episodes": self.log.eval_episodes,
                    "distributed.rollout_tp": self.distributed.rollout_tp,
                    "distributed.gpu_memory_gib": self.distributed.gpu_memory_gib,
                    "rollout.ray.num_workers": self.rollout.ray.num_workers,
                    "rollout.ray.episodes_per_call": self.rollout.ray.episodes_per_call,
                    "rollout.ray.max_attempts": self.rollout.ray.max_attempts,
                  "rollout.sync_every": self.rollout.sync_every, "rollout.max_staleness": self.rollout.max_staleness,
                  "log.eval_samples": self.log.eval_samples,
                  "sft.check_problems": self.sft.check_problems, "sft.check_samples": self.sft.check_samples}
        for key, v in positive.items():
            if not v > 0:
                raise ConfigError(f"{key}: expected a positive number, got {v!r}")
        nonneg = {"seed": self.seed, "sft.seed": self.sft.seed, "ppo.steps": self.ppo.steps, "sft.steps": self.sft.steps, "sft.oracle_steps": self.sft.oracle_steps,
                  "sft.checkpoint_every": self.sft.checkpoint_every,
                  "log.eval_episodes_final": self.log.eval_episodes_final,
                  "log.eval_seed_start": self.log.eval_seed_start,
                  "ppo.kl_coef": self.ppo.kl_coef, "ppo.entropy_coef": self.ppo.entropy_coef,
                  "rollout.temperature": self.rollout.temperature,
                  "log.eval_every": self.log.eval_every, "log.checkpoint_every": self.log.checkpoint_every,
                  "ppo.max_grad_norm": self.ppo.max_grad_norm, "threads": self.threads,
                  "ppo.micro_batch_tokens": self.ppo.micro_batch_tokens,
                  "rollout.sleep_level": self.rollout.sleep_level,
                  "distributed.nproc": self.distributed.nproc,
                  "rollout.ray.max_restarts": self.rollout.ray.max_restarts,
                  "rollout.ray.call_timeout_s": self.rollout.ray.call_timeout_s,
                  "sft.check_every": self.sft.check_every, "sft.check_from": self.sft.check_from}
        for key, v in nonneg.items():
            if v < 0:
                raise ConfigError(f"{key}: expected >= 0, got {v!r}")
        # With no warm-start steps (an arm that loads one, a run without one) there is nothing to keep.
        if self.sft.keep == "best" and self.sft.steps and not self.sft.check_every:
            raise ConfigError("sft.keep=best keeps the weights of the best held-out check, and this warm start "
                              f"has none (sft.steps={self.sft.steps}, sft.check_every={self.sft.check_every}); "
                              "fix: sft.check_every=N (and sft.check_from), or sft.keep=last")
        if self.sft.check_temperature is not None and not self.sft.check_temperature > 0:
            raise ConfigError(f"sft.check_temperature: expected > 0 (pass@k of greedy samples is pass@1) "
                              f"or null for rollout.temperature, got {self.sft.check_temperature!r}")
        if self.rollout.temperature == 0:
            raise ConfigError("rollout.temperature: expected > 0 for training (log-probs of greedy "
                              "sampling are not a distribution), got 0; use e.g. 1.0")
        if not 0 < self.ppo.clip_low < 1 or self.ppo.clip_high <= 0:
            raise ConfigError(f"ppo.clip_low must be in (0, 1) and ppo.clip_high > 0, got "
                              f"{self.ppo.clip_low} and {self.ppo.clip_high}")
        episodes = self.rollout.tasks_per_step * self.rollout.samples_per_task
        if self.ppo.minibatches > episodes:
            raise ConfigError(f"ppo.minibatches: expected at most the {episodes} episodes per step, "
                              f"got {self.ppo.minibatches}")
        if self.ppo.advantage in ("group", "prefix") and self.rollout.samples_per_task < 2:
            raise ConfigError(f"ppo.advantage={self.ppo.advantage} needs rollout.samples_per_task >= 2 (a group "
                              f"baseline over one sample is zero), got {self.rollout.samples_per_task}")
        self._validate_evidence()
        self.health.validate()
        self.curriculum.validate()
        if self.rollout.routing_replay and self.rollout.backend == "ray":
            raise ConfigError("rollout.routing_replay needs the engine's routing in this process; "
                              "it is not supported with rollout.backend=ray (use rollout.backend=local)")
        if self.rollout.sleep_level > 2:
            raise ConfigError(f"rollout.sleep_level: expected 0, 1 or 2, got {self.rollout.sleep_level}")
        if len(self.correction.geo_band) != 2:
            raise ConfigError(f"correction.geo_band: expected [lo, hi], got {self.correction.geo_band}")
        self._validate_lora()
        check_receivers(self)  # the mappings' keys, against the code that receives them

    def _validate_lora(self) -> None:
        """LoRA's numbers, and the paths it is wired into so far (docs/training/lora.md)."""
        lo, r = self.model.lora, self.rollout
        if lo.rank < 0:
            raise ConfigError(f"model.lora.rank: expected 0 (no adapters) or a positive rank, got {lo.rank}")
        if not lo.rank:
            return
        if not lo.alpha > 0 or not 0 <= lo.dropout < 1:
            raise ConfigError(f"model.lora: expected alpha > 0 and 0 <= dropout < 1, got alpha={lo.alpha}, "
                              f"dropout={lo.dropout}")
        if not lo.targets and not lo.experts:
            raise ConfigError("model.lora: no adapters to train (targets=[] and experts=false); fix: "
                              "model.lora.targets=[q_proj,k_proj,v_proj,o_proj] or model.lora.experts=true")
        if r.engine not in ("hf", "vllm"):
            raise ConfigError(f"model.lora.rank={lo.rank} runs with rollout.engine=hf (the learner's own model, "
                              f"adapters applied) or vllm (the base with the adapters merged in at each sync), got "
                              f"rollout.engine={r.engine}; fix: rollout.engine=hf or vllm, or model.lora.rank=0")
        unwired = {"rollout.engine_weights": (r.engine_weights, "shared"),
                   "rollout.backend": (r.backend, "local"), "rollout.mode": (r.mode, "sync")}
        for key, (got, ok) in unwired.items():
            if got != ok:
                raise ConfigError(f"model.lora.rank={lo.rank} runs with {key}={ok} only so far, got {key}={got}; "
                                  f"fix: {key}={ok}, or model.lora.rank=0")
        if self.controls or self.sft.load:
            raise ConfigError("model.lora.rank > 0 with controls or sft.load is not wired yet (they reload full "
                              "weights); fix: controls=[] sft.load=null, or model.lora.rank=0")


    def _validate_evidence(self) -> None:
        """Splits, controls, the KL estimators and the off-learner engine: what an honest
        comparison needs, refused early with a fix."""
        p, r = self.ppo, self.rollout
        if p.kl_in == "loss" and p.kl_estimator == "k1":
            raise ConfigError("ppo.kl_estimator=k1 with ppo.kl_in=loss: k1's gradient in the loss is "
                              "grad log pi, zero in expectation, so it pulls nowhere; fix: "
                              "ppo.kl_estimator=k2 (gradient of KL(pi || ref)) or k3 (KL(ref || pi)), "
                              "or ppo.kl_in=reward")
        if p.kl_target is not None and not (p.kl_target > 0 and p.kl_coef > 0 and p.kl_in == "loss"):
            raise ConfigError(f"ppo.kl_target={p.kl_target} adapts the KL penalty in the loss from ppo.kl_coef; "
                              f"expected kl_target > 0, kl_coef > 0 and kl_in=loss, got kl_coef={p.kl_coef}, "
                              f"kl_in={p.kl_in}; fix: e.g. ppo.kl_coef=0.1 ppo.kl_in=loss, or "
                              "ppo.kl_target=null for a fixed coefficient")
        if p.kl_in == "reward" and p.kl_estimator != "k1" and p.kl_coef != 0:
            raise ConfigError(f"ppo.kl_estimator={p.kl_estimator} with ppo.kl_in=reward: as a reward only k1 (the "
                              "log-ratio) gives the KL's gradient (its expected score-function gradient is that of "
                              f"KL(pi || ref)); {p.kl_estimator}'s points elsewhere away from the reference; fix: "
                              "ppo.kl_estimator=k1, or ppo.kl_in=loss")
        if p.baseline_scale != 1.0:
            if not 0.0 <= p.baseline_scale <= 1.0:
                raise ConfigError(f"ppo.baseline_scale: expected a fraction of the mean score in [0, 1], "
                                  f"got {p.baseline_scale}; fix: e.g. ppo.baseline_scale=0.5, or 1 for the "
                                  "usual baseline")
            clash = [f"ppo.{k}" for k, on in (("group_std_normalize", p.group_std_normalize),
                                              ("drop_uniform_groups", p.drop_uniform_groups)) if on]
            if p.advantage in ("gae", "prefix") or clash:
                raise ConfigError(f"ppo.baseline_scale={p.baseline_scale} scales the group baseline, so a "
                                  "group whose scores are all equal keeps a nonzero advantage; it cannot be "
                                  "divided by that group's std (0), nor dropped, and GAE (or prefix) has no group "
                                  f"baseline to scale; got ppo.advantage={p.advantage}"
                                  + (f" with {' and '.join(clash)}" if clash else "")
                                  + "; fix: ppo.advantage=group ppo.group_std_normalize=false "
                                  "ppo.drop_uniform_groups=false, or ppo.baseline_scale=1")
        if p.advantage == "prefix" and p.kl_in == "reward" and p.kl_coef != 0:
            raise ConfigError("ppo.advantage=prefix credits each token from the group's outcome scores only; a KL "
                              "penalty in the reward would be left out; fix: ppo.kl_in=loss, or ppo.advantage=group")
        if p.advantage == "batch" and p.drop_uniform_groups:
            raise ConfigError("ppo.drop_uniform_groups drops tasks whose samples all scored the same, but "
                              "with ppo.advantage=batch those still carry signal (one baseline for the step); "
                              "fix: ppo.drop_uniform_groups=false, or ppo.advantage=group")
        for key, opts in (("env.train_options", self.env.train_options), ("env.eval_options", self.env.eval_options)):
            if "split" in opts:
                which = "train" if "train" in key else "eval"
                raise ConfigError(f"{key} holds 'split': the split has its own key; fix: "
                                  f"env.{which}_split={opts['split']} and drop it from {key}")
        if p.placebo and self.algo != "ppo":
            raise ConfigError(f"ppo.placebo=true permutes PPO's rewards, but algo={self.algo}; "
                              "fix: algo=ppo, or ppo.placebo=false")
        arm = self.arm()
        for name in self.controls:
            if name not in ARMS:
                raise ConfigError(f"controls: unknown arm {name!r}; expected some of {list(ARMS)}"
                                  + (f"; did you mean {h!r}?" if (h := _suggest(name, ARMS)) else ""))
        if len(set(self.controls)) != len(self.controls) or arm in self.controls:
            raise ConfigError(f"controls: {self.controls} must name each arm once and not this run's own "
                              f"arm ({arm!r}); fix: e.g. controls=[placebo, rft, sft] with algo=ppo")
        if r.sync_every > 1 and r.sleep_level:
            raise ConfigError(f"rollout.sync_every={r.sync_every} keeps the engine's weights between syncs, "
                              f"and rollout.sleep_level={r.sleep_level} frees or drops them during updates; "
                              "fix: rollout.sleep_level=0, or rollout.sync_every=1")
        if r.sync_every > 1 and r.engine == "hf" and r.engine_weights == "shared":
            raise ConfigError(f"rollout.sync_every={r.sync_every} needs an engine with its own weights, but "
                              "the hf engine shares the learner's module (always current); fix: "
                              "rollout.engine_weights=copy (or rollout.sync_every=1)")
        if r.engine != "hf" and (r.engine_weights != "shared" or r.engine_dtype != "auto"):
            raise ConfigError(f"rollout.engine_weights / engine_dtype are for the hf engine; the "
                              f"{r.engine} engine holds its own weights (its dtype goes in "
                              "rollout.engine_kwargs); fix: drop them")
        self._validate_async()
        sc = self.sft
        for key, v in (("sft.stop_pass_at_k", sc.stop_pass_at_k), ("sft.stop_pass_at_1", sc.stop_pass_at_1),
                       ("sft.min_wellformed", sc.min_wellformed)):
            if v is not None and not 0 <= v <= 1:
                raise ConfigError(f"{key}: expected a share in [0, 1], got {v!r}")
        if (sc.stop_pass_at_k is not None or sc.stop_pass_at_1 is not None) and not sc.check_every:
            raise ConfigError("sft.stop_pass_at_k / stop_pass_at_1 need the held-out check: set "
                              "sft.check_every (e.g. 25)")
        if sc.load and sc.steps:
            raise ConfigError(f"sft.load={sc.load!r} starts from a saved warm start, and sft.steps={sc.steps} "
                              "asks for a new one; fix: sft.steps=0 with sft.load, or drop sft.load")

    def _validate_async(self) -> None:
        """``rollout.mode: async`` needs an engine that samples while the learner updates."""
        r = self.rollout
        if r.mode != "async":
            return
        why = []
        if r.engine == "hf" and r.engine_weights == "shared" and r.backend == "local":
            why.append(("the hf engine shares the learner's module (it would sample from weights "
                        "being updated)", "rollout.engine_weights=copy (its own copy, synced after every "
                        "update), rollout.engine=openai-http (agentgym serve model) or vllm"))
        if r.backend == "ray" and r.engine != "hf":
            why.append((f"rollout.backend=ray with rollout.engine={r.engine} (the workers share a server "
                        "whose weights they cannot version)", "rollout.engine=hf (weights in each worker), "
                        "or rollout.backend=local with the server"))
        if r.sync_every != 1:
            why.append((f"rollout.sync_every={r.sync_every} (async syncs after every update; "
                        "rollout.max_staleness bounds the lag)", "rollout.sync_every=1"))
        if r.sleep_level:
            why.append((f"rollout.sleep_level={r.sleep_level} (the engine keeps sampling during updates)",
                        "rollout.sleep_level=0"))
        if r.routing_replay:
            why.append(("rollout.routing_replay (routes are read after collection, from weights that "
                        "have moved on)", "rollout.routing_replay=false"))
        if self.curriculum.levels:
            why.append(("curriculum.levels (step n+k's levels depend on step n's outcomes)",
                        "curriculum.levels=[]"))
        if self.distributed.nproc > 1:
            why.append((f"distributed.nproc={self.distributed.nproc} (torchrun)", "distributed.nproc=0"))
        if why:
            got, fix = why[0]
            raise ConfigError(f"rollout.mode=async: expected an engine with its own weights sampling while "
                              f"the learner updates; got {got}; fix: {fix}, or rollout.mode=sync")

    def stream(self, base: int) -> int:
        """The first task seed of a stream that starts at ``base`` for seed 0: seed ``s`` moves
        every stream by ``s x SEED_STRIDE``, so two seeds train on different tasks and
        demonstrations (seed 0's are the streams as they always were)."""
        return base + self.seed * SEED_STRIDE

    def arm(self) -> str:
        """This run's arm name (``ppo``, ``placebo``, ``rft``, ``sft``)."""
        return next(name for name, (algo, placebo) in ARMS.items()
                    if algo == self.algo and placebo == self.ppo.placebo)

    def keeps_reference(self) -> bool:
        """A PPO run keeps the frozen reference in memory for its KL penalty (``ppo.kl_coef > 0``)
        or for the health monitor's KL check (``health.watch_kl``)."""
        return self.algo == "ppo" and (self.ppo.kl_coef > 0 or self.health.watch_kl)


# ---------------------------------------------------------------------------- loading

MAX_INT = 1 << 63  # every integer of the config fits an int64 (torch and numpy seeds, tensor sizes)
MAX_DEPTH = 32  # nesting of a recipe's mappings and lists (its sections are 3 deep)
MAX_RECIPE_BYTES = 1 << 20  # a recipe is a page of YAML; anything larger is a wrong file


def _short(value: Any) -> str:
    """``repr(value)`` cut to one readable line (a value may be a 5,000-digit number or a novel)."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit
        return f"an integer of more than {sys.get_int_max_str_digits()} digits"
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _check_depth(data: Any, where: str) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH`, iteratively (no recursion to overflow)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"{where}: expected mappings and lists nested at most {MAX_DEPTH} deep, "
                              "found deeper ones; fix: flatten that value")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((c, depth + 1) for c in children)


def _safe_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` whose every failure is one ConfigError line: bad syntax, nesting that
    exhausts the parser's recursion, an integer past Python's digit limit."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        first = " ".join(str(e).split())
        raise ConfigError(f"{where}: not valid YAML ({first[:200]}); fix the file's syntax") from None
    except RecursionError:
        raise ConfigError(f"{where}: expected YAML nested at most {MAX_DEPTH} deep, got one too deep "
                          "to parse; fix: flatten it") from None
    except ValueError as e:  # int("<5,000 digits>"): Python's limit on integer conversion
        raise ConfigError(f"{where}: a value cannot be read ({str(e).split(';')[0]}); expected numbers "
                          "of ordinary size (integers below 2^63)") from None
    _check_depth(data, where)
    return data


def _read_recipe(file: Path) -> str:
    """The recipe's text, or a ConfigError saying why it is not a recipe (a folder, a device,
    a binary or oversized file)."""
    if file.is_dir():
        raise ConfigError(f"{file}: expected a YAML file, got a directory; fix: --config {file}/NAME.yaml")
    if not file.is_file():
        raise ConfigError(f"{file}: expected a regular YAML file, got a device or special file")
    size = file.stat().st_size
    if size > MAX_RECIPE_BYTES:
        raise ConfigError(f"{file}: expected a YAML recipe (a few KB), got {size:,} bytes; is it the right file?")
    try:
        raw = file.read_bytes()
        if b"\0" in raw:
            raise UnicodeDecodeError("utf-8", raw, raw.index(b"\0"), raw.index(b"\0") + 1, "NUL byte")
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{file}: expected a UTF-8 YAML text file, got binary data (byte {e.start}); "
                          "is it the right file?") from None
    except OSError as e:
        raise ConfigError(f"{file}: cannot be read ({e.strerror or e}); fix its permissions or the path") from None


def _suggest(name: str, options: typing.Iterable[str]) -> str | None:
    hits = difflib.get_close_matches(name, list(options), n=1, cutoff=0.5)
    return hits[0] if hits else None


def _fields(cls: type) -> dict[str, dataclasses.Field[Any]]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and gently convert) ``value`` against the annotation ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if tp is Any:
        return value
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}; fix: {key}={{a: 1}}")
        for k in value:
            if not isinstance(k, str):
                raise ConfigError(f"{key}: expected names (strings) as keys, got {_short(k)}; fix: quote it, "
                                  f"{key}.'{k}'=...")
        _check_plain(value, key)
        return dict(value)
    if origin is list or tp is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}; fix: {key}=[0.999,1.001]")
        (item,) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item, key) for v in value]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {_short(value)}")
    if tp is int:
        if isinstance(value, str):  # YAML 1.1 reads "1e9" as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) >= MAX_INT:
                raise ConfigError(f"{key}: expected an integer of at most 63 bits (below 2^63), got one of "
                                  f"{len(str(abs(value)))} digits; fix: e.g. {key}=1000")
            return value
        raise ConfigError(f"{key}: expected an integer, got {_short(value)}")
    if tp is float:
        number: float | None = None
        try:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                number = float(value)
            elif isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
                number = float(value)
        except (ValueError, OverflowError):
            pass
        if number is None:
            raise ConfigError(f"{key}: expected a number, got {_short(value)}")
        if not math.isfinite(number):  # inf would train on NaN weights, NaN compares false everywhere
            raise ConfigError(f"{key}: expected a finite number, got {number}; fix: e.g. {key}=0.001")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _check_plain(value: Any, key: str) -> None:
    """A mapping's values are what JSON and YAML write: strings, finite numbers, true/false, null,
    lists and mappings of them (no dates, no sets, no inf or nan), to any depth."""
    stack = [(value, key)]
    while stack:
        v, where = stack.pop()
        if isinstance(v, dict):
            stack.extend((x, f"{where}.{k}") for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(v))
        elif isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{where}: expected a finite number, got {v}; fix: e.g. {where}=1.0")
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= MAX_INT:
            raise ConfigError(f"{where}: expected an integer of at most 63 bits (below 2^63), got one of "
                              f"{len(str(abs(v)))} digits")
        elif not (v is None or isinstance(v, (str, int, float, bool))):
            raise ConfigError(f"{where}: expected a string, number, true/false, null, list or mapping, got "
                              f"{type(v).__name__} {_short(v)}; fix: quote it ('{v}')")


# Keys that left the config, with the value that did nothing: a run dir saved before they left
# still resumes (its config.yaml lists every key).
_RETIRED: dict[str, Any] = {"sft.skip_tool": 0.0, "sft.guess_right": 0.0, "sft.sign_error": 0.0}


def _apply(obj: Any, data: dict[str, Any], prefix: str = "") -> None:
    hints = typing.get_type_hints(type(obj))
    known = _fields(type(obj))
    for k, v in data.items():
        key = f"{prefix}{k}"
        if key in _RETIRED and k not in known:
            if v != _RETIRED[key]:
                raise ConfigError(f"{key}={v!r}: an option of the defect teachers, which are no longer "
                                  "built in; fix: drop it, or declare such a teacher on your env "
                                  "(Capabilities.teachers) and pass its options in sft.teacher_kwargs")
            continue  # a run saved before they left: the default changed nothing
        if k not in known:
            hint = _suggest(str(k), known)
            raise ConfigError(f"unknown config key {key!r}"
                              + (f"; did you mean '{prefix}{hint}'?" if hint else "")
                              + f" Known keys under {prefix or 'the top level'}: {sorted(known)}")
        current = getattr(obj, k)
        if dataclasses.is_dataclass(current):
            if not isinstance(v, dict):
                raise ConfigError(f"{key}: expected a section (mapping), got {v!r}")
            _apply(current, v, key + ".")
        else:
            setattr(obj, k, _coerce(v, hints[k], key))


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r}: expected KEY=VALUE (e.g. ppo.lr=1e-3)")
    key, raw = item.split("=", 1)
    key = key.strip().lstrip("-")
    try:
        value = _safe_yaml(raw, f"override {key}") if raw != "" else ""
    except ConfigError as e:
        if "not valid YAML" not in str(e):
            raise
        value = raw  # not YAML: the text itself (a string value)
    return key.split("."), value


def _into_mapping(cfg: TrainConfig, keys: list[str], value: Any) -> tuple[list[str], Any]:
    """An override into a mapping-valued key (``sft.options.depth=[1]``) sets that one entry: the
    mapping's other entries (the recipe's, earlier overrides') stay. ``sft.options={...}`` replaces it."""
    obj: Any = cfg
    for i, k in enumerate(keys[:-1]):
        if not dataclasses.is_dataclass(obj) or k not in _fields(type(obj)):
            break  # an unknown key: _apply says which
        current = getattr(obj, k)
        if isinstance(current, dict):
            merged = copy.deepcopy(current)
            node = merged
            for sub in keys[i + 1:-1]:
                if not isinstance(node.get(sub), dict):
                    node[sub] = {}
                node = node[sub]
            node[keys[-1]] = value
            return keys[:i + 1], merged
        obj = current
    return keys, value


def find_recipe(name: str) -> Path:
    """A recipe by path, or by bare name in the shipped recipes folder."""
    p = Path(name)
    if p.exists():
        return p
    for cand in (RECIPES_DIR / name, RECIPES_DIR / f"{name}.yaml", RECIPES_DIR / p.name):
        if cand.exists():
            return cand
    shipped = sorted(x.stem for x in RECIPES_DIR.glob("*.yaml"))
    hint = _suggest(p.stem, shipped)
    raise ConfigError(f"config {name!r} not found: expected a YAML path or a shipped recipe "
                      f"({', '.join(shipped)})" + (f"; did you mean {hint!r}?" if hint else ""))


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> TrainConfig:
    """Defaults <- YAML file <- ``key.sub=value`` overrides; then validated."""
    cfg = TrainConfig()
    if path is not None:
        file = find_recipe(str(path))
        data = _safe_yaml(_read_recipe(file), str(file)) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{file}: expected a mapping at the top level, got {type(data).__name__}")
        _apply(cfg, data)
    for item in overrides:
        keys, value = _into_mapping(cfg, *_parse_override(item))
        nested: Any = value
        for k in reversed(keys):
            nested = {k: nested}
        _apply(cfg, nested)
    cfg.validate()
    return cfg


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    cfg = TrainConfig()
    _apply(cfg, data)
    cfg.validate()
    return cfg


def _field_docs(cls: type) -> dict[str, str]:
    """The string literal right under each field: the one place a field is documented."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for a, b in zip(body, body[1:]):
        if (isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
                and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
                and isinstance(b.value.value, str)):
            docs[a.target.id] = " ".join(b.value.value.split())
    return docs


def config_help(cfg: TrainConfig | None = None) -> str:
    """Every key with its current value and its documentation (for ``--help``)."""
    cfg = cfg or TrainConfig()
    lines: list[str] = []

    def walk(obj: Any, prefix: str) -> None:
        docs = _field_docs(type(obj))
        for name in _fields(type(obj)):
            v = getattr(obj, name)
            if dataclasses.is_dataclass(v):
                walk(v, f"{prefix}{name}.")
            else:
                lines.append(f"  {prefix}{name}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}")
                if name in docs:
                    lines.append(f"      {docs[name]}")

    walk(cfg, "")
    return "\n".join(lines)
