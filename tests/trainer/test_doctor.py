"""Mismatch doctor: eager trainer attention is healthy, a sink-dropping one is flagged."""

from __future__ import annotations

import json

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.trainer.doctor import doctor_main, run_doctor, verdict
from agentgym.trainer.model.gptoss import build_tiny_gptoss


def _sinky_model() -> torch.nn.Module:
    """A tiny GPT-OSS whose heads lean on their sinks, as trained GPT-OSS heads do
    (at random init the sinks are ~0 and barely change the softmax)."""
    model = build_tiny_gptoss(264, seed=0)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(3.0)
    return model


KW = dict(max_new_tokens=24, env_kwargs={"max_turns": 2})


def test_doctor_eager_is_healthy_and_sdpa_is_flagged() -> None:
    good = run_doctor(_sinky_model(), "hf", "eager", "agentgym/MathCalc-v1", 3, **KW)  # type: ignore[arg-type]
    assert good.verdict == "healthy", good.reasons
    assert good.stats["k3"] < 1e-6 and good.stats["abs_dlogp_max"] < 1e-4
    assert good.setup["policy_tokens"] > 0 and good.stats["n_seqs"] == 3
    with pytest.raises(ConfigError, match="sink"):
        run_doctor(_sinky_model(), "hf", "sdpa", "agentgym/MathCalc-v1", 1, **KW)  # type: ignore[arg-type]
    bad = run_doctor(_sinky_model(), "hf", "sdpa", "agentgym/MathCalc-v1", 3,
                     allow_unsafe_attention=True, **KW)  # type: ignore[arg-type]
    assert bad.verdict == "unhealthy" and "drops the attention sinks" in bad.reasons[0], bad.stats
    assert bad.stats["abs_dlogp_mean"] > 0.02 > 100 * good.stats["abs_dlogp_mean"]
    assert bad.stats["k3"] > 100 * max(good.stats["k3"], 1e-9)


def test_verdict_thresholds() -> None:
    base = {"n_tokens": 10.0, "abs_dlogp_max": 0.1}
    assert verdict({**base, "k3": 1e-4, "abs_dlogp_mean": 0.01})[0] == "healthy"
    assert verdict({**base, "k3": 5e-3, "abs_dlogp_mean": 0.03})[0] == "warning"
    assert verdict({**base, "k3": 0.05, "abs_dlogp_mean": 0.03})[0] == "unhealthy"
    assert verdict({**base, "k3": 1e-3, "abs_dlogp_mean": 0.1})[0] == "unhealthy"
    assert verdict({"n_tokens": 0.0})[0] == "unhealthy"


def test_doctor_main_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = doctor_main(["--model", "tiny", "--episodes", "2", "--max-new-tokens", "8", "--json",
                        "--env", "agentgym/Math-v1"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["verdict"] == "healthy"
    assert report["setup"]["env_id"] == "agentgym/Math-v1" and report["stats"]["n_seqs"] == 2


def test_doctor_reports_routing_and_replay_with_a_bfloat16_trainer() -> None:
    """Engine float32, trainer bfloat16: rounding moves some tokens to other experts; replaying
    the engine's routing in the trainer removes that part of the mismatch."""
    fp32 = run_doctor(_sinky_model(), "hf", "eager", "agentgym/MathCalc-v1", 3, **KW)  # type: ignore[arg-type]
    assert fp32.stats["routing_agree"] == 1.0 and fp32.stats["routing_tokens_all_layers_agree"] == 1.0
    bf16 = run_doctor(_sinky_model(), "hf", "eager", "agentgym/MathCalc-v1", 3,  # type: ignore[arg-type]
                      trainer_dtype="bfloat16", **KW)
    assert bf16.setup["trainer_dtype"] == "bfloat16" and bf16.stats["abs_dlogp_mean"] > 1e-4
    assert 0.5 < bf16.stats["routing_agree"] <= 1.0
    assert bf16.stats["abs_dlogp_mean_replay"] <= bf16.stats["abs_dlogp_mean"] + 1e-6


@pytest.mark.harmony
def test_doctor_runs_tiny_gptoss_with_the_real_vocabulary() -> None:
    pytest.importorskip("openai_harmony", reason="pip install 'agentgym-suite[harmony]'")
    report = run_doctor("tiny:o200k_harmony", "hf", "eager", "agentgym/MathCalc-v1", 2,
                        max_new_tokens=8, env_kwargs={"max_turns": 1})
    assert report.setup["vocab_size"] == 201_088 and report.verdict == "healthy", report.reasons
    assert report.stats["routing_agree"] == 1.0


def test_doctor_help_shows_defaults_and_the_turn_and_env_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        doctor_main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0
    for flag in ("--episodes EPISODES episodes sampled (default: 8)", "--max-turns MAX_TURNS",
                 "(default: 2)", "--env-kwarg KEY=VALUE", "(default: 64)"):
        assert flag in out, flag


def test_doctor_max_turns_and_env_kwargs_reach_the_env(capsys: pytest.CaptureFixture[str]) -> None:
    code = doctor_main(["--episodes", "2", "--max-turns", "1", "--max-new-tokens", "8",
                        "--env-kwarg", "prompt=compact", "--json"])
    captured = capsys.readouterr()
    assert "2 episodes of agentgym/MathCalc-v1 with the hf engine, up to 1 turns x 8 new tokens" in captured.err
    report = json.loads(captured.out)  # stdout is the report alone: progress went to stderr
    assert code in (0, 1, 2) and report["stats"]["n_seqs"] == 2
    assert report["stats"]["n_tokens"] <= 2 * 8  # one turn of at most 8 sampled tokens per episode


def test_a_doctor_run_whose_every_episode_is_lost_says_to_run_the_doctor_again() -> None:
    """An inference server that is down (a real port with nothing listening): every episode is an
    infrastructure fault, and the doctor, which has no --resume, says to fix it and run it again."""
    import socket

    from agentgym.errors import InfraError
    from agentgym.trainer.doctor import _sample_episodes
    from agentgym.trainer.model.gptoss import resolve_tokenizer
    from agentgym.trainer.rollout.engines.openai_http import OpenAIHTTPEngine

    with socket.socket() as s:  # a free loopback port, closed again: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    engine = OpenAIHTTPEngine(f"http://127.0.0.1:{port}", timeout=5.0)
    try:
        with pytest.raises(InfraError, match="every one of the 2 episodes") as e:
            _sample_episodes(engine, "agentgym/MathCalc-v1", resolve_tokenizer("tiny"), 2, max_new_tokens=8,
                             temperature=1.0, seed=0, env_kwargs={})
    finally:
        engine.close()
    assert "run agentgym-train doctor again" in str(e.value) and "--resume" not in str(e.value)
